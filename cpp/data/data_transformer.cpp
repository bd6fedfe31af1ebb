// SPDX-License-Identifier: Apache-2.0
#include "data/data_transformer.hpp"

#include <utility>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "io/proto_io.hpp"

namespace cortado {

ColorMode DecodeColorMode(const caffe::TransformationParameter& param) {
  if (param.force_color()) return ColorMode::kColor;
  if (param.force_gray()) return ColorMode::kGray;
  return ColorMode::kKeep;
}

DataTransformer::DataTransformer(const caffe::TransformationParameter& param, caffe::Phase phase,
                                 std::string owner)
    : param_(param), phase_(phase), owner_(std::move(owner)) {
  if (param_.has_mean_file() && param_.mean_value_size() > 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: transform_param sets both mean_file ('{}') and mean_value; use one", owner_,
                  param_.mean_file());
  }
  if (param_.force_color() && param_.force_gray()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: transform_param sets both force_color and force_gray; use one", owner_);
  }
  if (param_.has_mean_file()) {
    caffe::BlobProto proto;
    io::ReadProtoFromBinaryFile(param_.mean_file(), &proto);
    Tensor mean;
    mean.FromProto(proto);
    const auto& shape = mean.shape();
    // compute_image_mean writes 1 x C x H x W; accept C x H x W too.
    const bool ok = (shape.size() == 4 && shape[0] == 1) || shape.size() == 3;
    if (!ok) {
      CORTADO_THROW(kInvalidArgument, "{}: mean_file '{}' has shape {}; expected 1 x C x H x W",
                    owner_, param_.mean_file(), mean.ShapeString());
    }
    const size_t first = shape.size() - 3;
    mean_channels_ = shape[first];
    mean_height_ = shape[first + 1];
    mean_width_ = shape[first + 2];
    mean_.assign(mean.cpu_data(), mean.cpu_data() + mean.count());
  }
}

DecodedImage DataTransformer::Decode(const caffe::Datum& datum) const {
  return DecodeImage(datum.data().data(), datum.data().size(), DecodeColorMode(param_),
                     owner_ + ": encoded datum");
}

void DataTransformer::CheckShape(int channels, int height, int width) const {
  if (channels <= 0 || height <= 0 || width <= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: datum has shape {} x {} x {}; all must be positive",
                  owner_, channels, height, width);
  }
  const int crop = static_cast<int>(param_.crop_size());
  if (crop > 0 && (crop > height || crop > width)) {
    CORTADO_THROW(kInvalidArgument, "{}: crop_size {} is larger than the datum ({} x {} x {})",
                  owner_, crop, channels, height, width);
  }
  if (!mean_.empty() &&
      (mean_channels_ != channels || mean_height_ != height || mean_width_ != width)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: mean_file '{}' is {} x {} x {} but the datum is {} x {} x {}", owner_,
                  param_.mean_file(), mean_channels_, mean_height_, mean_width_, channels, height,
                  width);
  }
  const int num_means = param_.mean_value_size();
  if (num_means > 1 && num_means != channels) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: transform_param has {} mean_value entries for a datum of {} channels; give "
                  "one, or one per channel",
                  owner_, num_means, channels);
  }
}

std::vector<int> DataTransformer::InferShape(const caffe::Datum& datum) const {
  if (datum.encoded()) {
    const DecodedImage image = Decode(datum);
    return InferShape(image.channels, image.height, image.width);
  }
  return InferShape(datum.channels(), datum.height(), datum.width());
}

std::vector<int> DataTransformer::InferShape(int channels, int height, int width) const {
  CheckShape(channels, height, width);
  const int crop = static_cast<int>(param_.crop_size());
  return {channels, crop > 0 ? crop : height, crop > 0 ? crop : width};
}

void DataTransformer::Transform(const caffe::Datum& datum, float* out, Rng* rng) const {
  if (datum.encoded()) {
    const DecodedImage image = Decode(datum);
    CheckShape(image.channels, image.height, image.width);
    const uint8_t* u8 = image.pixels.data();
    Apply([u8](size_t i) { return static_cast<float>(u8[i]); }, image.channels, image.height,
          image.width, out, rng);
    return;
  }
  CheckShape(datum.channels(), datum.height(), datum.width());
  const int channels = datum.channels();
  const int in_height = datum.height();
  const int in_width = datum.width();
  const size_t expected = static_cast<size_t>(channels) * in_height * in_width;
  const std::string& bytes = datum.data();
  const bool has_uint8 = !bytes.empty();
  const size_t have = has_uint8 ? bytes.size() : static_cast<size_t>(datum.float_data_size());
  if (have != expected) {
    CORTADO_THROW(kInvalidArgument, "{}: datum {} x {} x {} holds {} {} values; expected {}",
                  owner_, channels, in_height, in_width, have, has_uint8 ? "byte" : "float",
                  expected);
  }
  if (has_uint8) {
    const auto* u8 = reinterpret_cast<const unsigned char*>(bytes.data());
    Apply([u8](size_t i) { return static_cast<float>(u8[i]); }, channels, in_height, in_width, out,
          rng);
  } else {
    const float* f32 = datum.float_data().data();
    Apply([f32](size_t i) { return f32[i]; }, channels, in_height, in_width, out, rng);
  }
}

void DataTransformer::Transform(const float* in, int channels, int height, int width, float* out,
                                Rng* rng) const {
  CheckShape(channels, height, width);
  Apply([in](size_t i) { return in[i]; }, channels, height, width, out, rng);
}

template <typename Value>
void DataTransformer::Apply(const Value& value, int channels, int in_height, int in_width,
                            float* out, Rng* rng) const {
  const bool train = phase_ == caffe::TRAIN;
  // Draw order as Caffe: the mirror coin first, then the crop offsets (h, then w).
  const bool mirror = train && param_.mirror() && ((*rng)() % 2) != 0;
  const int crop = static_cast<int>(param_.crop_size());
  int height = in_height, width = in_width, h_off = 0, w_off = 0;
  if (crop > 0) {
    height = width = crop;
    if (train) {
      h_off = static_cast<int>((*rng)() % static_cast<unsigned>(in_height - crop + 1));
      w_off = static_cast<int>((*rng)() % static_cast<unsigned>(in_width - crop + 1));
    } else {
      h_off = (in_height - crop) / 2;
      w_off = (in_width - crop) / 2;
    }
  }

  const float scale = param_.scale();
  const bool has_mean_file = !mean_.empty();
  const int num_means = param_.mean_value_size();
  for (int c = 0; c < channels; ++c) {
    const float channel_mean = num_means == 0   ? 0.0f
                               : num_means == 1 ? param_.mean_value(0)
                                                : param_.mean_value(c);
    for (int h = 0; h < height; ++h) {
      const size_t in_row = (static_cast<size_t>(c) * in_height + h_off + h) * in_width + w_off;
      float* out_row = out + (static_cast<size_t>(c) * height + h) * width;
      for (int w = 0; w < width; ++w) {
        const size_t in_index = in_row + w;
        // The mean is taken at the source position (as Caffe), so crops see the right mean.
        const float mean = has_mean_file ? mean_[in_index] : channel_mean;
        out_row[mirror ? width - 1 - w : w] = (value(in_index) - mean) * scale;
      }
    }
  }
}

}  // namespace cortado
