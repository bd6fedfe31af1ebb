// SPDX-License-Identifier: Apache-2.0
#include "layers/eltwise_layer.hpp"

#include <algorithm>
#include <iterator>
#include <vector>

#include "math/math.hpp"

namespace cortado {

void EltwiseLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  // In place, the forward pass would overwrite a bottom it still reads, and the backward pass
  // the top diff it still needs for the other bottoms (Caffe gives a wrong answer).
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (bottom[i] == top[0]) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: cannot run in place: top '{}' is also bottom {}; give the top its own "
                    "name",
                    Describe(), param_.top_size() > 0 ? param_.top(0) : "", i);
    }
  }
  const auto& p = param_.eltwise_param();
  op_ = p.operation();
  stable_prod_grad_ = p.stable_prod_grad();
  if (p.coeff_size() > 0 && op_ != caffe::EltwiseParameter::SUM) {
    CORTADO_THROW(kInvalidArgument, "{}: coeff is only allowed with operation SUM, not {}",
                  Describe(), caffe::EltwiseParameter::EltwiseOp_Name(op_));
  }
  if (p.coeff_size() > 0 && p.coeff_size() != static_cast<int>(bottom.size())) {
    CORTADO_THROW(kInvalidArgument, "{}: {} coeff value(s) for {} bottoms; give one per bottom",
                  Describe(), p.coeff_size(), bottom.size());
  }
  coeffs_.assign(bottom.size(), 1.0f);
  for (int i = 0; i < p.coeff_size(); ++i) coeffs_[i] = p.coeff(i);
}

void EltwiseLayer::FuseRelu(float negative_slope) {
  CORTADO_CHECK(op_ == caffe::EltwiseParameter::SUM && negative_slope >= 0.0f,
                "{}: only a SUM fuses a ReLU, and only one of non-negative slope", Describe());
  relu_ = true;
  relu_slope_ = negative_slope;
}

void EltwiseLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  for (size_t i = 1; i < bottom.size(); ++i) {
    if (bottom[i]->shape() != bottom[0]->shape()) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: bottom {} has shape {} but bottom 0 has shape {}; all bottoms must "
                    "have the same shape",
                    Describe(), i, bottom[i]->ShapeString(), bottom[0]->ShapeString());
    }
  }
  top[0]->ReshapeLike(*bottom[0]);
  if (op_ == caffe::EltwiseParameter::MAX) {
    max_idx_.resize(bottom[0]->count());
    max_mask_.ReshapeLike(*bottom[0]);  // allocated only when a GPU pass first uses it
  }
}

void EltwiseLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = top[0]->count();
  std::vector<const Tensor*> all(bottom.begin(), bottom.end());
  all.push_back(top[0]);
  const bool kept = SameCpuBlocks(all);  // element by element: any layout, all alike
  float* out = top[0]->mutable_cpu_data_kept(kept);
  const int num_bottom = static_cast<int>(bottom.size());
  switch (op_) {
    case caffe::EltwiseParameter::PROD:
      math::Mul(n, bottom[0]->cpu_data_kept(kept), bottom[1]->cpu_data_kept(kept), out);
      for (int b = 2; b < num_bottom; ++b) math::Mul(n, out, bottom[b]->cpu_data_kept(kept), out);
      break;
    case caffe::EltwiseParameter::SUM:
      if (num_bottom == 2) {  // a residual connection: one pass
        const float* a = bottom[0]->cpu_data_kept(kept);
        const float* c = bottom[1]->cpu_data_kept(kept);
        const float ca = coeffs_[0];
        const float cc = coeffs_[1];
        const float slope = relu_slope_;
        const bool relu = relu_;
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
        for (int i = 0; i < n; ++i) {
          const float v = ca * a[i] + cc * c[i];
          out[i] = relu ? std::max(v, 0.0f) + slope * std::min(v, 0.0f) : v;
        }
        break;
      }
      math::Set(n, 0.0f, out);
      for (int b = 0; b < num_bottom; ++b)
        math::Axpy(n, coeffs_[b], bottom[b]->cpu_data_kept(kept), out);
      if (relu_) {  // as relu_layer.cpp computes it
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
        for (int i = 0; i < n; ++i) {
          out[i] = std::max(out[i], 0.0f) + relu_slope_ * std::min(out[i], 0.0f);
        }
      }
      break;
    case caffe::EltwiseParameter::MAX: {
      const float* a = bottom[0]->cpu_data_kept(kept);
      const float* c = bottom[1]->cpu_data_kept(kept);
      int* idx = max_idx_.data();
      for (int i = 0; i < n; ++i) {
        // Strict ">" so that a tie between the first two goes to bottom 1, as in Caffe.
        const bool first = a[i] > c[i];
        out[i] = first ? a[i] : c[i];
        idx[i] = first ? 0 : 1;
      }
      for (int b = 2; b < num_bottom; ++b) {
        const float* x = bottom[b]->cpu_data_kept(kept);
        for (int i = 0; i < n; ++i) {
          if (x[i] > out[i]) {
            out[i] = x[i];
            idx[i] = b;
          }
        }
      }
      break;
    }
    default:
      CORTADO_THROW(kInvalidArgument, "{}: unknown eltwise operation {}", Describe(),
                    static_cast<int>(op_));
  }
}

namespace {

// The top's gradient at element i: t0, or t0 + t1 with kTerms (SumTopDiffs), masked by the sign
// of the fused ReLU's output (relu_top) with kRelu.
template <bool kTerms, bool kRelu>
inline float SumGradient(const float* t0, const float* t1, const float* relu_top, float slope,
                         int i) {
  const float dy = kTerms ? t0[i] + t1[i] : t0[i];
  return kRelu ? (relu_top[i] > 0.0f ? dy : dy * slope) : dy;
}

// A SUM's gradients: diffs[k] = coeffs[k] * g with g = SumGradient, in one pass for all the
// bottoms that want one. The bottoms' diffs may share buffers with the top diffs read (the memory
// plan lets them, for a folded Split: net/memory_plan.cpp), at the same element only, which every
// element reads before it writes: hence simd, which would otherwise fall back to a scalar loop on
// that overlap.
template <bool kTerms, bool kRelu>
void SumBackwardCpu(int n, const float* t0, const float* t1, const float* relu_top, float slope,
                    const std::vector<float*>& diffs, const std::vector<float>& coeffs) {
  if (diffs.size() == 2) {  // a residual connection
    float* d0 = diffs[0];
    float* d1 = diffs[1];
    const float c0 = coeffs[0];
    const float c1 = coeffs[1];
#pragma omp parallel for simd if (n > math::kParallelThreshold) schedule(static)
    for (int i = 0; i < n; ++i) {
      const float g = SumGradient<kTerms, kRelu>(t0, t1, relu_top, slope, i);
      d0[i] = c0 * g;
      d1[i] = c1 * g;
    }
    return;
  }
  if (diffs.size() == 1) {  // one bottom wants it (a sum folded into a BatchNorm asks for one)
    float* d0 = diffs[0];
    const float c0 = coeffs[0];
#pragma omp parallel for simd if (n > math::kParallelThreshold) schedule(static)
    for (int i = 0; i < n; ++i) d0[i] = c0 * SumGradient<kTerms, kRelu>(t0, t1, relu_top, slope, i);
    return;
  }
  const int m = static_cast<int>(diffs.size());
  float* const* out = diffs.data();
  const float* c = coeffs.data();
#pragma omp parallel for simd if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) {
    const float g = SumGradient<kTerms, kRelu>(t0, t1, relu_top, slope, i);
    for (int k = 0; k < m; ++k) out[k][i] = c[k] * g;
  }
}

}  // namespace

void EltwiseLayer::SumTopDiffs(const Tensor* a, const Tensor* b) {
  CORTADO_CHECK(op_ == caffe::EltwiseParameter::SUM && a != nullptr && b != nullptr,
                "{}: only a SUM takes its top's gradient as a sum of two diffs", Describe());
  top_diff_terms_[0] = a;
  top_diff_terms_[1] = b;
}

void EltwiseLayer::BackwardCpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  const int n = top[0]->count();
  const int num_bottom = static_cast<int>(bottom.size());
  std::vector<const Tensor*> all(bottom.begin(), bottom.end());
  all.push_back(top[0]);
  if (sums_top_diffs())
    all.insert(all.end(), std::begin(top_diff_terms_), std::end(top_diff_terms_));
  const bool kept = SameCpuBlocks(all);  // element by element: any layout, all alike
  if (op_ == caffe::EltwiseParameter::SUM) {
    std::vector<float*> diffs;
    std::vector<float> coeffs;
    for (int b = 0; b < num_bottom; ++b) {
      if (!propagate_down[b]) continue;
      diffs.push_back(bottom[b]->mutable_cpu_diff_kept(kept));
      coeffs.push_back(coeffs_[b]);
    }
    if (diffs.empty()) return;
    const float* relu_top = relu_ ? top[0]->cpu_data_kept(kept) : nullptr;
    const bool terms = sums_top_diffs();
    const float* t0 = terms ? top_diff_terms_[0]->cpu_diff_kept(kept) : top[0]->cpu_diff_kept(kept);
    const float* t1 = terms ? top_diff_terms_[1]->cpu_diff_kept(kept) : nullptr;
    decltype(&SumBackwardCpu<true, true>) pass =
        terms ? (relu_ ? SumBackwardCpu<true, true> : SumBackwardCpu<true, false>)
              : (relu_ ? SumBackwardCpu<false, true> : SumBackwardCpu<false, false>);
    pass(n, t0, t1, relu_top, relu_slope_, diffs, coeffs);
    return;
  }
  const float* top_diff = top[0]->cpu_diff_kept(kept);
  const float* top_data = top[0]->cpu_data_kept(kept);
  for (int b = 0; b < num_bottom; ++b) {
    if (!propagate_down[b]) continue;
    float* diff = bottom[b]->mutable_cpu_diff_kept(kept);
    switch (op_) {
      case caffe::EltwiseParameter::PROD:
        if (stable_prod_grad_) {
          // Product of all the other bottoms.
          bool started = false;
          for (int j = 0; j < num_bottom; ++j) {
            if (j == b) continue;
            if (!started) {
              math::Copy(n, bottom[j]->cpu_data_kept(kept), diff);
              started = true;
            } else {
              math::Mul(n, diff, bottom[j]->cpu_data_kept(kept), diff);
            }
          }
        } else {
          math::Div(n, top_data, bottom[b]->cpu_data_kept(kept), diff);
        }
        math::Mul(n, diff, top_diff, diff);
        break;
      case caffe::EltwiseParameter::MAX: {
        const int* idx = max_idx_.data();
        for (int i = 0; i < n; ++i) diff[i] = idx[i] == b ? top_diff[i] : 0.0f;
        break;
      }
      default:
        break;
    }
  }
}

void EltwiseLayer::BackwardForHost(const std::vector<Tensor*>& top,
                                   const std::vector<bool>& propagate_down,
                                   const std::vector<Tensor*>& bottom) {
  if (ctx_->device().is_cuda()) {
    BackwardGpu(top, propagate_down, bottom);
  } else {
    BackwardCpu(top, propagate_down, bottom);
  }
}

CORTADO_REGISTER_LAYER(Eltwise, EltwiseLayer);

}  // namespace cortado
