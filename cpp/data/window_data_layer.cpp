// SPDX-License-Identifier: Apache-2.0
// Follows Caffe's WindowDataLayer (src/caffe/layers/window_data_layer.cpp): the window file is
// read token by token as its `infile >>` reads do, and the crop geometry keeps its float
// arithmetic and rounding step by step, so the same windows give the same pixels.
#include "data/window_data_layer.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/logging.hpp"
#include "io/proto_io.hpp"

namespace cortado {
namespace {

constexpr int kChannels = 3;  // images are decoded as B, G, R (CV_LOAD_IMAGE_COLOR)

// The whitespace-separated tokens of a text, each with its 1-based line.
class Tokens {
 public:
  Tokens(std::string text, std::string owner, std::string source)
      : text_(std::move(text)), owner_(std::move(owner)), source_(std::move(source)) {}

  bool AtEnd() {
    SkipSpace();
    return pos_ >= text_.size();
  }
  // The line of the next token (or of the end).
  int line() {
    SkipSpace();
    return line_;
  }

  // The next token; `what` names it in the error when the file ends first.
  std::string Next(const std::string& what) {
    if (AtEnd()) Fail(line_, fmt::format("the file ends where {} was expected", what));
    const size_t start = pos_;
    while (pos_ < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  int NextInt(const std::string& what) {
    const int at = line();
    const std::string token = Next(what);
    errno = 0;
    char* end = nullptr;
    const long value = std::strtol(token.c_str(), &end, 10);  // NOLINT(runtime/int)
    if (token.empty() || *end != '\0' || errno == ERANGE || value < INT_MIN || value > INT_MAX) {
      Fail(at, fmt::format("{} must be an integer, got '{}'", what, token));
    }
    return static_cast<int>(value);
  }

  float NextFloat(const std::string& what) {
    const int at = line();
    const std::string token = Next(what);
    errno = 0;
    char* end = nullptr;
    const float value = std::strtof(token.c_str(), &end);
    if (token.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value)) {
      Fail(at, fmt::format("{} must be a number, got '{}'", what, token));
    }
    return value;
  }

  [[noreturn]] void Fail(int at, const std::string& what) const {
    CORTADO_THROW(kParse, "{}: window file {}:{}: {}", owner_, source_, at, what);
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      if (text_[pos_] == '\n') ++line_;
      ++pos_;
    }
  }

  std::string text_;
  std::string owner_, source_;
  size_t pos_ = 0;
  int line_ = 1;
};

// The bytes of image file `path`; `what` starts the error messages.
std::string ReadImageFile(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    CORTADO_THROW(kNotFound, "{}: cannot open the file ({})", what,
                  std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  }
  return WithContext(what, [&] { return io::ReadFile(path); });
}

}  // namespace

WindowDataLayer::~WindowDataLayer() { StopPrefetch(); }

void WindowDataLayer::DataSetup(const std::vector<Tensor*>& top) {
  const caffe::WindowDataParameter& p = param_.window_data_param();
  const caffe::TransformationParameter& t = param_.transform_param();
  source_ = p.source();
  if (source_.empty()) {
    CORTADO_THROW(kInvalidArgument, "{}: window_data_param.source (the window file) is empty",
                  Describe());
  }
  if (p.batch_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: window_data_param.batch_size must be positive",
                  Describe());
  }
  if (p.has_mean_file() || p.has_crop_size() || p.has_mirror()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: WindowData reads crop_size, mirror and mean_file from transform_param "
                  "(Caffe ignores window_data_param's); move them there",
                  Describe());
  }
  if (p.has_scale() && t.has_scale()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: scale is set in both window_data_param ({}) and transform_param ({}); "
                  "use one",
                  Describe(), p.scale(), t.scale());
  }
  if (t.crop_size() == 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: transform_param.crop_size (the side of the warped windows) must be "
                  "positive",
                  Describe());
  }
  if (!(p.fg_fraction() >= 0.0f && p.fg_fraction() <= 1.0f)) {
    CORTADO_THROW(kInvalidArgument, "{}: window_data_param.fg_fraction must be in [0, 1], got {}",
                  Describe(), p.fg_fraction());
  }
  if (p.crop_mode() != "warp" && p.crop_mode() != "square") {
    CORTADO_THROW(kInvalidArgument,
                  "{}: window_data_param.crop_mode must be 'warp' or 'square', got '{}'",
                  Describe(), p.crop_mode());
  }
  if (t.force_gray()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: transform_param.force_gray is not supported: WindowData decodes every "
                  "image in color (as Caffe)",
                  Describe());
  }
  batch_size_ = static_cast<int>(p.batch_size());
  crop_size_ = static_cast<int>(t.crop_size());
  context_pad_ = static_cast<int>(p.context_pad());
  square_ = p.crop_mode() == "square";
  if ((context_pad_ > 0 || square_) && crop_size_ <= 2 * static_cast<int64_t>(context_pad_)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: context_pad {} leaves nothing of a crop_size {} window (needs crop_size > "
                  "2 * context_pad)",
                  Describe(), context_pad_, crop_size_);
  }
  mirror_ = t.mirror() && phase() == caffe::TRAIN;
  scale_ = p.has_scale() ? p.scale() : t.scale();
  fg_fraction_ = p.fg_fraction();
  if (!ImageCodecsAvailable()) {
    CORTADO_THROW(kUnimplemented,
                  "{}: this build has no image codecs (libjpeg and libpng were not found: "
                  "WITH_IMAGES=OFF)",
                  Describe());
  }
  ReadWindowFile();
  ReadMean();

  const int num_fg = static_cast<int>(static_cast<float>(batch_size_) * fg_fraction_);
  if (num_fg > 0 && fg_windows_.empty()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: window file '{}' has no foreground window (overlap >= fg_threshold {}) "
                  "to draw {} per batch from",
                  Describe(), source_, p.fg_threshold(), num_fg);
  }
  if (batch_size_ - num_fg > 0 && bg_windows_.empty()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: window file '{}' has no background window (overlap < bg_threshold {}) "
                  "to draw {} per batch from",
                  Describe(), source_, p.bg_threshold(), batch_size_ - num_fg);
  }
  if (p.cache_images()) {
    for (const Image& image : images_) {
      cache_.push_back(ReadImageFile(image.path, fmt::format("{}: image '{}' ({}:{})", Describe(),
                                                             image.path, source_, image.line)));
    }
  }
  top[0]->Reshape({batch_size_, kChannels, crop_size_, crop_size_});
  top[1]->Reshape(std::vector<int>{batch_size_});
  CORTADO_LOG_INFO(
      "{}: output data size: {},{},{},{} from '{}' ({} images, {} foreground and {} background "
      "windows; fg_threshold {}, bg_threshold {}, fg_fraction {}, context_pad {}, crop_mode {}{})",
      Describe(), batch_size_, kChannels, crop_size_, crop_size_, source_, images_.size(),
      fg_windows_.size(), bg_windows_.size(), p.fg_threshold(), p.bg_threshold(), fg_fraction_,
      context_pad_, p.crop_mode(), p.cache_images() ? ", images cached" : "");
}

void WindowDataLayer::ReadWindowFile() {
  const caffe::WindowDataParameter& p = param_.window_data_param();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(source_, ec)) {
    CORTADO_THROW(kNotFound, "{}: cannot open the window file '{}': {}", Describe(), source_,
                  std::filesystem::exists(source_, ec) ? "not a regular file" : "no such file");
  }
  Tokens in(WithContext(Describe(), [&] { return io::ReadFile(source_); }), Describe(), source_);
  if (in.AtEnd()) {
    CORTADO_THROW(kInvalidArgument, "{}: the window file '{}' is empty", Describe(), source_);
  }
  std::map<int, int> label_counts;
  while (!in.AtEnd()) {
    const int image_line = in.line();
    const std::string hashtag = in.Next("'#'");
    if (hashtag != "#") {
      in.Fail(image_line, fmt::format("expected '# image_index', got '{}'", hashtag));
    }
    const int index = in.NextInt("the image index");
    if (index != static_cast<int>(images_.size())) {
      // Caffe uses the index to look the image up, so it must count 0, 1, 2, ...
      in.Fail(image_line,
              fmt::format("image index {} out of order: expected {}", index, images_.size()));
    }
    const std::string path = in.Next("the image path");
    const int channels_line = in.line();
    const int channels = in.NextInt("the image's channels");
    if (channels != kChannels) {
      in.Fail(channels_line, fmt::format("image '{}' has {} channels; WindowData reads images in "
                                         "color (3 channels)",
                                         path, channels));
    }
    const int size_line = in.line();
    const int height = in.NextInt("the image's height");
    const int width = in.NextInt("the image's width");
    if (height <= 0 || width <= 0) {
      in.Fail(size_line, fmt::format("image '{}' has size {} x {}; both must be positive", path,
                                     height, width));
    }
    const int count_line = in.line();
    const int num_windows = in.NextInt("the number of windows");
    if (num_windows < 0) {
      in.Fail(count_line, fmt::format("negative number of windows {}", num_windows));
    }
    images_.push_back({p.root_folder() + path, image_line});
    for (int i = 0; i < num_windows; ++i) {
      Window w;
      w.image = index;
      w.line = in.line();
      const std::string what = fmt::format("window {} of image {}", i, index);
      w.label = in.NextInt("the class index of " + what);
      const float overlap = in.NextFloat("the overlap of " + what);
      w.x1 = in.NextInt("x1 of " + what);
      w.y1 = in.NextInt("y1 of " + what);
      w.x2 = in.NextInt("x2 of " + what);
      w.y2 = in.NextInt("y2 of " + what);
      if (w.x1 > w.x2 || w.y1 > w.y2) {
        in.Fail(w.line, fmt::format("{} is ({}, {}) to ({}, {}): x1 <= x2 and y1 <= y2 needed",
                                    what, w.x1, w.y1, w.x2, w.y2));
      }
      if (overlap >= p.fg_threshold()) {
        if (w.label <= 0) {
          in.Fail(w.line, fmt::format("{} is foreground (overlap {} >= fg_threshold {}) but has "
                                      "class index {}; foreground classes are > 0",
                                      what, overlap, p.fg_threshold(), w.label));
        }
        fg_windows_.push_back(w);
        ++label_counts[w.label];
      } else if (overlap < p.bg_threshold()) {
        w.label = 0;  // background, whatever the file says
        bg_windows_.push_back(w);
        ++label_counts[0];
      }
    }
  }
  for (const auto& [label, count] : label_counts) {
    CORTADO_LOG_DEBUG("{}: class {} has {} windows", Describe(), label, count);
  }
}

void WindowDataLayer::ReadMean() {
  const caffe::TransformationParameter& t = param_.transform_param();
  if (t.has_mean_file() && t.mean_value_size() > 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: transform_param sets both mean_file ('{}') and mean_value; use one",
                  Describe(), t.mean_file());
  }
  if (t.has_mean_file()) {
    caffe::BlobProto proto;
    WithContext(Describe(), [&] { io::ReadProtoFromBinaryFile(t.mean_file(), &proto); });
    Tensor mean;
    mean.FromProto(proto);
    const std::vector<int>& shape = mean.shape();
    const bool ok = (shape.size() == 4 && shape[0] == 1) || shape.size() == 3;
    const size_t first = shape.size() - 3;
    if (!ok || shape[first] != kChannels) {
      CORTADO_THROW(kInvalidArgument, "{}: mean_file '{}' has shape {}; expected 1 x 3 x H x W",
                    Describe(), t.mean_file(), mean.ShapeString());
    }
    mean_height_ = shape[first + 1];
    mean_width_ = shape[first + 2];
    // Caffe centres the crop in the mean with the width's offset on both axes.
    const int off = (mean_width_ - crop_size_) / 2;
    if (mean_width_ < crop_size_ || off + crop_size_ > mean_height_) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: mean_file '{}' is {} x {}, too small for crop_size {} (Caffe reads rows "
                    "and columns ({} - {}) / 2 + [0, {}) of it)",
                    Describe(), t.mean_file(), mean_height_, mean_width_, crop_size_, mean_width_,
                    crop_size_, crop_size_);
    }
    mean_.assign(mean.cpu_data(), mean.cpu_data() + mean.count());
  }
  if (t.mean_value_size() > 0) {
    if (t.mean_value_size() != 1 && t.mean_value_size() != kChannels) {
      CORTADO_THROW(kInvalidArgument, "{}: give one mean_value or one per channel ({}), got {}",
                    Describe(), kChannels, t.mean_value_size());
    }
    for (int c = 0; c < kChannels; ++c) {
      mean_values_.push_back(t.mean_value(t.mean_value_size() == 1 ? 0 : c));
    }
  }
}

DecodedImage WindowDataLayer::LoadImage(int index) const {
  const Image& image = images_[static_cast<size_t>(index)];
  const std::string what =
      fmt::format("{}: image '{}' ({}:{})", Describe(), image.path, source_, image.line);
  if (!cache_.empty()) {
    const std::string& bytes = cache_[static_cast<size_t>(index)];
    return DecodeImage(bytes.data(), bytes.size(), ColorMode::kColor, what);
  }
  const std::string bytes = ReadImageFile(image.path, what);
  return DecodeImage(bytes.data(), bytes.size(), ColorMode::kColor, what);
}

void WindowDataLayer::CropWindow(const Window& w, const DecodedImage& image, bool mirror,
                                 float* out) const {
  const int crop = crop_size_;
  int x1 = w.x1, y1 = w.y1, x2 = w.x2, y2 = w.y2;
  int pad_w = 0, pad_h = 0;
  int out_w = crop, out_h = crop;
  auto fail = [&](const std::string& what) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: window file {}:{}: window ({}, {}) to ({}, {}) of image "
                  "'{}' ({} x {}): {}",
                  Describe(), source_, w.line, w.x1, w.y1, w.x2, w.y2,
                  images_[static_cast<size_t>(w.image)].path, image.width, image.height, what);
  };
  if (context_pad_ > 0 || square_) {
    // Grow the box about its centre so that, warped to crop x crop, context_pad pixels of
    // context surround it; in float, as Caffe computes it.
    const float context_scale =
        static_cast<float>(crop) / static_cast<float>(crop - 2 * context_pad_);
    float half_height = static_cast<float>(y2 - y1 + 1) / 2.0f;
    float half_width = static_cast<float>(x2 - x1 + 1) / 2.0f;
    const float center_x = static_cast<float>(x1) + half_width;
    const float center_y = static_cast<float>(y1) + half_height;
    if (square_) {
      if (half_height > half_width) {
        half_width = half_height;
      } else {
        half_height = half_width;
      }
    }
    x1 = static_cast<int>(std::round(center_x - half_width * context_scale));
    x2 = static_cast<int>(std::round(center_x + half_width * context_scale));
    y1 = static_cast<int>(std::round(center_y - half_height * context_scale));
    y2 = static_cast<int>(std::round(center_y + half_height * context_scale));
    // Clip the grown box to the image, remembering how far it reached beyond each side.
    const int unclipped_height = y2 - y1 + 1;
    const int unclipped_width = x2 - x1 + 1;
    int pad_x1 = std::max(0, -x1);
    int pad_y1 = std::max(0, -y1);
    int pad_x2 = std::max(0, x2 - image.width + 1);
    int pad_y2 = std::max(0, y2 - image.height + 1);
    x1 += pad_x1;
    x2 -= pad_x2;
    y1 += pad_y1;
    y2 -= pad_y2;
    if (x1 > x2 || y1 > y2) fail("its padded region lies outside the image");
    const int clipped_height = y2 - y1 + 1;
    const int clipped_width = x2 - x1 + 1;
    // The clipped part is warped with the scale the whole grown box would have had; the parts
    // beyond the image become a zero border of the matching size.
    const float scale_x = static_cast<float>(crop) / static_cast<float>(unclipped_width);
    const float scale_y = static_cast<float>(crop) / static_cast<float>(unclipped_height);
    out_w = static_cast<int>(std::round(static_cast<float>(clipped_width) * scale_x));
    out_h = static_cast<int>(std::round(static_cast<float>(clipped_height) * scale_y));
    pad_x1 = static_cast<int>(std::round(static_cast<float>(pad_x1) * scale_x));
    pad_x2 = static_cast<int>(std::round(static_cast<float>(pad_x2) * scale_x));
    pad_y1 = static_cast<int>(std::round(static_cast<float>(pad_y1) * scale_y));
    pad_y2 = static_cast<int>(std::round(static_cast<float>(pad_y2) * scale_y));
    pad_h = pad_y1;
    pad_w = mirror ? pad_x2 : pad_x1;  // a mirrored window mirrors its border too
    // Rounding may overshoot the crop by a pixel.
    if (pad_h + out_h > crop) out_h = crop - pad_h;
    if (pad_w + out_w > crop) out_w = crop - pad_w;
    if (out_h <= 0 || out_w <= 0) fail("too little of it lies inside the image to warp");
  } else if (x1 < 0 || y1 < 0 || x2 >= image.width || y2 >= image.height) {
    fail("the window is not inside the image");
  }

  // Cut out the box (planar B, G, R) and warp it.
  DecodedImage box;
  box.channels = image.channels;
  box.height = y2 - y1 + 1;
  box.width = x2 - x1 + 1;
  box.pixels.resize(static_cast<size_t>(box.channels) * box.height * box.width);
  for (int c = 0; c < box.channels; ++c) {
    for (int h = 0; h < box.height; ++h) {
      const uint8_t* src = image.pixels.data() +
                           (static_cast<size_t>(c) * image.height + (y1 + h)) * image.width + x1;
      std::copy(src, src + box.width,
                box.pixels.data() + (static_cast<size_t>(c) * box.height + h) * box.width);
    }
  }
  const DecodedImage warped =
      box.height == out_h && box.width == out_w ? std::move(box) : ResizeImage(box, out_h, out_w);

  const int mean_off = mean_.empty() ? 0 : (mean_width_ - crop) / 2;
  for (int c = 0; c < kChannels; ++c) {
    for (int h = 0; h < out_h; ++h) {
      const uint8_t* row = warped.pixels.data() + (static_cast<size_t>(c) * out_h + h) * out_w;
      float* dst = out + (static_cast<size_t>(c) * crop + h + pad_h) * crop + pad_w;
      const float* mean_row =
          mean_.empty()
              ? nullptr
              : mean_.data() +
                    (static_cast<size_t>(c) * mean_height_ + h + mean_off + pad_h) * mean_width_ +
                    mean_off + pad_w;
      const float mean_value = mean_values_.empty() ? 0.0f : mean_values_[c];
      for (int x = 0; x < out_w; ++x) {
        const float pixel = static_cast<float>(row[mirror ? out_w - 1 - x : x]);
        dst[x] = (pixel - (mean_row != nullptr ? mean_row[x] : mean_value)) * scale_;
      }
    }
  }
}

void WindowDataLayer::LoadBatch(int64_t /*index*/, Rng* rng, DataBatch* batch) {
  const size_t item = static_cast<size_t>(kChannels) * crop_size_ * crop_size_;
  batch->shapes = {{batch_size_, kChannels, crop_size_, crop_size_}, {batch_size_}};
  batch->tops.resize(2);
  batch->tops[0].assign(item * batch_size_, 0.0f);  // borders beyond the image stay 0
  batch->tops[1].assign(batch_size_, 0.0f);
  // Caffe's split and order: background windows first, then foreground ones.
  const int num_fg = static_cast<int>(static_cast<float>(batch_size_) * fg_fraction_);
  const int num_samples[2] = {batch_size_ - num_fg, num_fg};
  int item_id = 0;
  for (int is_fg = 0; is_fg < 2; ++is_fg) {
    const std::vector<Window>& windows = is_fg ? fg_windows_ : bg_windows_;
    for (int k = 0; k < num_samples[is_fg]; ++k) {
      const uint32_t pick = static_cast<uint32_t>((*rng)());
      const Window& w = windows[pick % windows.size()];
      const bool mirror = mirror_ && (static_cast<uint32_t>((*rng)()) % 2) != 0;
      CropWindow(w, LoadImage(w.image), mirror, batch->tops[0].data() + item * item_id);
      batch->tops[1][item_id] = static_cast<float>(w.label);
      ++item_id;
    }
  }
}

CORTADO_REGISTER_LAYER(WindowData, WindowDataLayer);

}  // namespace cortado
