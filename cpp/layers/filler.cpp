// SPDX-License-Identifier: Apache-2.0
#include "layers/filler.hpp"

#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "math/math.hpp"

namespace cortado {
namespace {

// Caffe's fan-in / fan-out for xavier and msra: fan_in = count / shape(0),
// fan_out = count / shape(1) (see caffe/filler.hpp).
float FanScale(const caffe::FillerParameter& param, const Tensor& t) {
  CORTADO_CHECK_GT(t.count(), 0);
  const float fan_in = static_cast<float>(t.count()) / t.shape(0);
  const float fan_out =
      t.num_axes() > 1 ? static_cast<float>(t.count()) / t.shape(1) : static_cast<float>(t.count());
  switch (param.variance_norm()) {
    case caffe::FillerParameter::FAN_OUT:
      return fan_out;
    case caffe::FillerParameter::AVERAGE:
      return (fan_in + fan_out) / 2.0f;
    default:
      return fan_in;
  }
}

}  // namespace

void Fill(const caffe::FillerParameter& param, Rng& rng, Tensor* tensor) {
  const int n = tensor->count();
  if (n == 0) return;
  float* data = tensor->mutable_cpu_data();
  const std::string& type = param.type();
  if (type == "constant") {
    math::Set(n, param.value(), data);
  } else if (type == "uniform") {
    math::RngUniform(n, param.min(), param.max(), rng, data);
  } else if (type == "gaussian") {
    math::RngGaussian(n, param.mean(), param.std(), rng, data);
    if (param.sparse() >= 0) {
      // Each output keeps about `sparse` non-zero inputs (Caffe: p = sparse / num_outputs).
      if (tensor->num_axes() < 1) {
        CORTADO_THROW(kInvalidArgument, "sparse gaussian filler needs at least 1 axis");
      }
      const float p = std::min(1.0f, static_cast<float>(param.sparse()) / tensor->shape(0));
      std::vector<unsigned int> mask(n);
      math::RngBernoulli(n, p, rng, mask.data());
      for (int i = 0; i < n; ++i) data[i] *= static_cast<float>(mask[i]);
    }
  } else if (type == "positive_unitball") {
    // Uniform in [0, 1), then each output's weights are scaled to sum to 1.
    math::RngUniform(n, 0.0f, 1.0f, rng, data);
    const int num = tensor->shape(0);
    const int dim = n / num;
    for (int i = 0; i < num; ++i) {
      float sum = 0.0f;
      for (int j = 0; j < dim; ++j) sum += data[i * dim + j];
      for (int j = 0; j < dim; ++j) data[i * dim + j] /= sum;
    }
  } else if (type == "xavier") {
    const float scale = std::sqrt(3.0f / FanScale(param, *tensor));
    math::RngUniform(n, -scale, scale, rng, data);
  } else if (type == "msra") {
    const float stddev = std::sqrt(2.0f / FanScale(param, *tensor));
    math::RngGaussian(n, 0.0f, stddev, rng, data);
  } else if (type == "bilinear") {
    if (tensor->num_axes() != 4 || tensor->shape(2) != tensor->shape(3)) {
      CORTADO_THROW(kInvalidArgument,
                    "bilinear filler needs a 4-D blob with square kernels, got shape {}",
                    tensor->ShapeString());
    }
    const int width = tensor->shape(3);
    const int height = tensor->shape(2);
    // Caffe: f = ceil(width / 2), c = (width - 1) / (2 f).
    const float f = std::ceil(width / 2.0f);
    const float c = static_cast<float>(width - 1) / (2.0f * f);
    for (int i = 0; i < n; ++i) {
      const float x = static_cast<float>(i % width);
      const float y = static_cast<float>((i / width) % height);
      data[i] = (1.0f - std::fabs(x / f - c)) * (1.0f - std::fabs(y / f - c));
    }
  } else {
    CORTADO_THROW(kInvalidArgument,
                  "unknown filler type '{}' (known: bilinear, constant, gaussian, msra, "
                  "positive_unitball, uniform, xavier)",
                  type);
  }
}

}  // namespace cortado
