// SPDX-License-Identifier: Apache-2.0
// LMDB records: a caffe::Datum value as the Data layer and the Spark LMDB source read it,
// parsed and checked (free shape, and a fixed 1 x 4 x 4), then transformed (scale, mean values,
// crop, mirror) into the layer's buffer.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/context.hpp"
#include "data/data_transformer.hpp"
#include "data/datum_db.hpp"
#include "fuzz/fuzz_util.hpp"

namespace {

// Samples of at most this many values are transformed.
constexpr double kTransformValues = 1 << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cortado::fuzz::SetUpOnce();
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  cortado::fuzz::ExpectErrorsOnly([&] {
    caffe::Datum datum;
    cortado::ParseDatumRecord(value, "00000000", "fuzz.lmdb", "fuzz", {1, 4, 4}, &datum);
  });
  cortado::fuzz::ExpectErrorsOnly([&] {
    caffe::Datum datum;
    cortado::ParseDatumRecord(value, "00000000", "fuzz.lmdb", "fuzz", {}, &datum);
    caffe::TransformationParameter param;
    param.set_scale(0.5f);
    param.set_mirror(true);
    param.set_crop_size(2);
    param.add_mean_value(1.0f);
    cortado::DataTransformer transformer(param, caffe::TRAIN, "fuzz");
    const std::vector<int> shape = transformer.InferShape(datum);
    double values = 1;
    for (int dim : shape) values *= dim;
    if (values > kTransformValues) return;
    std::vector<float> out(static_cast<size_t>(values));
    cortado::Rng rng(1);
    transformer.Transform(datum, out.data(), &rng);
  });
  return 0;
}
