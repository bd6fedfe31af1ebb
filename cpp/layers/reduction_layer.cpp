// SPDX-License-Identifier: Apache-2.0
#include "layers/reduction_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void ReductionLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const auto& p = param_.reduction_param();
  const Tensor& in = *bottom[0];
  if (bottom[0] == top[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: cannot run in place (the top is smaller than the bottom)",
                  Describe());
  }
  if (p.axis() < -in.num_axes() || p.axis() >= in.num_axes()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: reduction_param.axis {} is out of range for bottom shape {}", Describe(),
                  p.axis(), in.ShapeString());
  }
  op_ = p.operation();
  const int axis = in.CanonicalAxisIndex(p.axis());
  top[0]->Reshape(std::vector<int>(in.shape().begin(), in.shape().begin() + axis));
  num_ = in.count(0, axis);
  dim_ = in.count(axis);
  coeff_ = p.coeff();
  // Caffe divides coeff by the count here; an empty reduction then gives NaN rows, as in Caffe.
  if (op_ == caffe::ReductionParameter::MEAN) coeff_ /= static_cast<float>(dim_);
}

void ReductionLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int num = num_, dim = dim_;
  const auto op = op_;
  const float coeff = coeff_;
#pragma omp parallel for if (bottom[0]->count() > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < num; ++i) {
    const float* row = x + static_cast<size_t>(i) * dim;
    double sum = 0.0;
    switch (op) {
      case caffe::ReductionParameter::ASUM:
        for (int j = 0; j < dim; ++j) sum += std::fabs(row[j]);
        break;
      case caffe::ReductionParameter::SUMSQ:
        for (int j = 0; j < dim; ++j) sum += static_cast<double>(row[j]) * row[j];
        break;
      default:  // SUM, MEAN
        for (int j = 0; j < dim; ++j) sum += row[j];
        break;
    }
    // Caffe rounds the sum to float, then scales by coeff.
    y[i] = static_cast<float>(sum) * coeff;
  }
}

void ReductionLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const float* x = BackwardReadsBottomData(0) ? bottom[0]->cpu_data() : nullptr;
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int num = num_, dim = dim_;
  const auto op = op_;
  const float coeff = coeff_;
#pragma omp parallel for if (bottom[0]->count() > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < num; ++i) {
    const float g = dy[i] * coeff;
    const size_t offset = static_cast<size_t>(i) * dim;
    switch (op) {
      case caffe::ReductionParameter::ASUM:
        for (int j = 0; j < dim; ++j) {
          const float v = x[offset + j];
          dx[offset + j] = g * static_cast<float>((v > 0.0f) - (v < 0.0f));
        }
        break;
      case caffe::ReductionParameter::SUMSQ:
        for (int j = 0; j < dim; ++j) dx[offset + j] = (2.0f * g) * x[offset + j];
        break;
      default:  // SUM, MEAN
        for (int j = 0; j < dim; ++j) dx[offset + j] = g;
        break;
    }
  }
}

CORTADO_REGISTER_LAYER(Reduction, ReductionLayer);

}  // namespace cortado
