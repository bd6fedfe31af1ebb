// SPDX-License-Identifier: Apache-2.0
// DataTransformer: Caffe's DataTransformer for one caffe::Datum, driven by TransformationParameter.
//
// Params: scale, mirror, crop_size, mean_file (a BlobProto .binaryproto of shape 1 x C x H x W,
// or C x H x W), mean_value (one value, or one per channel). mean_file and mean_value together are
// an error. For each output pixel, in Caffe's order:
//   out = (in - mean) * scale
// where `in` is the uint8 `data` byte (or `float_data` value when `data` is empty) at the cropped
// (and possibly mirrored) position and `mean` is mean_file's value at the same *uncropped* position
// as `in` (Caffe indexes the mean at the source position, not the output position) or the
// channel's mean_value.
// Crop: with crop_size > 0 the output is C x crop x crop; the offset is random in TRAIN
// (h_off then w_off, each rng() % (dim - crop + 1)) and centered in TEST ((dim - crop) / 2).
// Mirror: a random horizontal flip (rng() % 2, drawn before the crop offsets).
//
// Encoded datums (`encoded: true`: `data` holds a JPEG or PNG file) are decoded first, as
// Caffe's DecodeDatumToCVMat does, into 3 channels with force_color, 1 with force_gray, else as
// the file is (see image_codec.hpp), and then transformed as a raw datum of that shape. The Data
// layer decodes its records already while reading them (ParseDatumRecord in datum_db.hpp, in
// its prefetch thread), so the transformer meets raw datums there.
//
// Differences from Caffe: mirror applies in TRAIN only (Caffe also flips in TEST).
//
// The transformer holds no random state: callers pass the engine, so a data layer can give each
// batch its own seeded engine. Const methods are safe to call from several threads at once.
#pragma once

#include <string>
#include <vector>

#include "core/context.hpp"
#include "data/image_codec.hpp"
#include "proto/caffe.pb.h"

namespace cortado {

// The decoding of encoded datums that `param` asks for: kColor with force_color, kGray with
// force_gray, else kKeep. (Setting both is refused by DataTransformer's constructor.)
ColorMode DecodeColorMode(const caffe::TransformationParameter& param);

class DataTransformer {
 public:
  // Reads `param` and loads mean_file. `owner` names the layer in error messages
  // ("layer 'mnist' (Data)"). Throws kInvalidArgument for mean_file with mean_value or
  // force_color with force_gray, and kNotFound/kIo/kParse for an unreadable mean_file.
  DataTransformer(const caffe::TransformationParameter& param, caffe::Phase phase,
                  std::string owner);

  // Output shape {C, H', W'} for `datum` (crop applied; an encoded datum is decoded to learn its
  // shape). Throws kInvalidArgument when the crop exceeds the datum or the mean does not fit it,
  // and for an encoded datum as DecodeImage does (kParse for a corrupt image, the message
  // starting with the owner).
  std::vector<int> InferShape(const caffe::Datum& datum) const;

  // Writes the transformed datum (C x H' x W' floats, row-major) to `out`, drawing mirror and
  // crop decisions from `rng` (TRAIN only). An encoded datum is decoded first. Validates the
  // datum as InferShape does, and also that a raw datum's data holds C*H*W values.
  void Transform(const caffe::Datum& datum, float* out, Rng* rng) const;

  // The same for a raw sample of `channels` x `height` x `width` floats (what a feeder pushes
  // into a feed layer), as for a datum holding those values in float_data.
  std::vector<int> InferShape(int channels, int height, int width) const;
  void Transform(const float* in, int channels, int height, int width, float* out, Rng* rng) const;

  const caffe::TransformationParameter& param() const { return param_; }

 private:
  // `datum`'s image (encoded) decoded as the parameters ask.
  DecodedImage Decode(const caffe::Datum& datum) const;
  void CheckShape(int channels, int height, int width) const;
  // The transform itself; `value(i)` reads input value i (row-major C x H x W).
  template <typename Value>
  void Apply(const Value& value, int channels, int in_height, int in_width, float* out,
             Rng* rng) const;

  caffe::TransformationParameter param_;
  caffe::Phase phase_;
  std::string owner_;
  // mean_file contents (C x H x W) and its shape, when mean_file is set.
  std::vector<float> mean_;
  int mean_channels_ = 0, mean_height_ = 0, mean_width_ = 0;
};

}  // namespace cortado
