// SPDX-License-Identifier: Apache-2.0
#include "data/image_data_layer.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "core/logging.hpp"
#include "io/proto_io.hpp"

namespace cortado {

ImageDataLayer::~ImageDataLayer() { StopPrefetch(); }

void ImageDataLayer::DataSetup(const std::vector<Tensor*>& top) {
  const caffe::ImageDataParameter& p = param_.image_data_param();
  source_ = p.source();
  if (source_.empty()) {
    CORTADO_THROW(kInvalidArgument, "{}: image_data_param.source (the list file) is empty",
                  Describe());
  }
  if (p.batch_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: image_data_param.batch_size must be positive", Describe());
  }
  if (p.has_scale() || p.has_mean_file() || p.has_crop_size() || p.has_mirror()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: image_data_param.scale, mean_file, crop_size and mirror are deprecated; "
                  "set them in transform_param",
                  Describe());
  }
  if ((p.new_height() == 0) != (p.new_width() == 0)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: new_height ({}) and new_width ({}) must be set together, or neither",
                  Describe(), p.new_height(), p.new_width());
  }
  batch_size_ = static_cast<int>(p.batch_size());
  new_height_ = static_cast<int>(p.new_height());
  new_width_ = static_cast<int>(p.new_width());
  color_ = p.is_color() ? ColorMode::kColor : ColorMode::kGray;
  shuffle_ = p.shuffle();
  if (!ImageCodecsAvailable()) {
    CORTADO_THROW(kUnimplemented,
                  "{}: this build has no image codecs (libjpeg and libpng were not found: "
                  "WITH_IMAGES=OFF)",
                  Describe());
  }

  std::error_code ec;
  if (!std::filesystem::is_regular_file(source_, ec)) {
    // (A device or a pipe could be read forever.)
    CORTADO_THROW(kNotFound, "{}: cannot open the list file '{}': {}", Describe(), source_,
                  std::filesystem::exists(source_, ec) ? "not a regular file" : "no such file");
  }
  std::ifstream list(source_);
  if (!list) CORTADO_THROW(kNotFound, "{}: cannot open the list file '{}'", Describe(), source_);
  std::string text;
  int number = 0;
  while (std::getline(list, text)) {
    ++number;
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (text.empty()) continue;
    const size_t space = text.find_last_of(' ');
    char* end = nullptr;
    const long label =  // NOLINT(runtime/int)
        space == std::string::npos ? 0 : std::strtol(text.c_str() + space + 1, &end, 10);
    if (space == std::string::npos || space == 0 || end == text.c_str() + space + 1 || *end != 0 ||
        label < INT32_MIN || label > INT32_MAX) {
      CORTADO_THROW(kParse, "{}: {}:{}: '{}' is not 'path label' (an integer label last)",
                    Describe(), source_, number, text);
    }
    lines_.push_back({p.root_folder() + text.substr(0, space), static_cast<int>(label), number});
  }
  if (lines_.empty()) {
    CORTADO_THROW(kInvalidArgument, "{}: the list file '{}' names no image", Describe(), source_);
  }
  skip_ = 0;
  if (p.rand_skip() > 0) skip_ = static_cast<int64_t>(ctx_->rng()() % p.rand_skip());
  if (skip_ > 0) CORTADO_LOG_INFO("{}: skipping the first {} images", Describe(), skip_);

  transformer_ = std::make_unique<DataTransformer>(param_.transform_param(), phase(), Describe());
  // The first image of the stream fixes the shape of every batch.
  const DecodedImage first = Load(lines_[static_cast<size_t>(LineAt(0))]);
  image_shape_ = {first.channels, first.height, first.width};
  item_shape_ = transformer_->InferShape(first.channels, first.height, first.width);
  top[0]->Reshape({batch_size_, item_shape_[0], item_shape_[1], item_shape_[2]});
  top[1]->Reshape(std::vector<int>{batch_size_});
  CORTADO_LOG_INFO("{}: output data size: {},{},{},{} from '{}' ({} images{})", Describe(),
                   batch_size_, item_shape_[0], item_shape_[1], item_shape_[2], source_,
                   lines_.size(), shuffle_ ? ", shuffled every epoch" : "");
}

int64_t ImageDataLayer::LineAt(int64_t position) const {
  const int64_t n = num_lines();
  const int64_t at = skip_ + position;
  if (!shuffle_) return at % n;
  // Epoch e's order: a Fisher-Yates shuffle drawn from (seed, e) alone.
  const int64_t epoch = at / n;
  std::lock_guard<std::mutex> lock(order_mutex_);
  if (order_epoch_ != epoch) {
    std::mt19937_64 engine(seed() ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(epoch + 1)));
    order_.resize(static_cast<size_t>(n));
    std::iota(order_.begin(), order_.end(), 0);
    for (int64_t i = n - 1; i > 0; --i) {
      std::uniform_int_distribution<int64_t> pick(0, i);
      std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(pick(engine))]);
    }
    order_epoch_ = epoch;
  }
  return order_[static_cast<size_t>(at % n)];
}

DecodedImage ImageDataLayer::Load(const Line& line) const {
  const std::string what =
      fmt::format("{}: image '{}' ({}:{})", Describe(), line.path, source_, line.number);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(line.path, ec)) {
    CORTADO_THROW(kNotFound, "{}: cannot open the file ({})", what,
                  std::filesystem::exists(line.path, ec) ? "not a regular file" : "no such file");
  }
  const std::string bytes = WithContext(what, [&] { return io::ReadFile(line.path); });
  DecodedImage image = DecodeImage(bytes.data(), bytes.size(), color_, what);
  if (new_height_ > 0 && (image.height != new_height_ || image.width != new_width_)) {
    image = ResizeImage(image, new_height_, new_width_);
  }
  if (!image_shape_.empty() &&
      (image.channels != image_shape_[0] || image.height != image_shape_[1] ||
       image.width != image_shape_[2])) {
    CORTADO_THROW(kInvalidArgument,
                  "{} is {} x {} x {}, but the first image is {} x {} x {}: set new_height and "
                  "new_width to resize them alike",
                  what, image.channels, image.height, image.width, image_shape_[0], image_shape_[1],
                  image_shape_[2]);
  }
  return image;
}

void ImageDataLayer::LoadBatch(int64_t index, Rng* rng, DataBatch* batch) {
  batch->shapes = {{batch_size_, item_shape_[0], item_shape_[1], item_shape_[2]}, {batch_size_}};
  batch->tops.resize(2);
  const size_t item_count = static_cast<size_t>(item_shape_[0]) * item_shape_[1] * item_shape_[2];
  batch->tops[0].resize(item_count * batch_size_);
  batch->tops[1].resize(batch_size_);
  std::vector<float> pixels;
  for (int i = 0; i < batch_size_; ++i) {
    const Line& line = lines_[static_cast<size_t>(LineAt(index * batch_size_ + i))];
    const DecodedImage image = Load(line);
    pixels.assign(image.pixels.begin(), image.pixels.end());
    transformer_->Transform(pixels.data(), image.channels, image.height, image.width,
                            batch->tops[0].data() + item_count * i, rng);
    batch->tops[1][i] = static_cast<float>(line.label);
  }
}

CORTADO_REGISTER_LAYER(ImageData, ImageDataLayer);

}  // namespace cortado
