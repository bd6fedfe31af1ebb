// SPDX-License-Identifier: Apache-2.0
// SGD with momentum (Caffe's SGDSolver, type "SGD"):
//   history = momentum * history + local_rate * gradient;  weights -= history
// with local_rate = rate * lr_mult. One history tensor per learnable parameter.
#include <algorithm>
#include <vector>

#include "math/math.hpp"
#include "math/on_device.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class SGDSolver final : public Solver {
 public:
  SGDSolver(const caffe::SolverParameter& param, Context* ctx, const NetOptions& net_options)
      : Solver(param, ctx, net_options) {}
  const char* type() const override { return "SGD"; }

 protected:
  void ComputeUpdateValue(int param_id, float rate) override {
    Tensor* p = net_->learnable_params()[param_id];
    const int n = p->count();
    if (n == 0) return;
    const float local_rate = rate * net_->params_lr()[param_id];
    float* history = math::dev::MutableData(*ctx_, *history_[param_id]);
    math::dev::Axpby(*ctx_, n, local_rate, math::dev::Diff(*ctx_, *p), param_.momentum(), history);
    math::dev::Copy(*ctx_, n, history, math::dev::MutableDiff(*ctx_, *p));
  }

  // One pass over every parameter does the whole step (L2 or no weight decay): the same
  // arithmetic in the same order as the per-parameter path, which reads and writes each
  // parameter's values eleven times (four BLAS calls and Net::Update) where this reads three
  // arrays and writes three. On a GPU one multi-tensor kernel, without five launches per
  // parameter.
  bool ApplyFusedUpdate(float rate) override {
    if (param_.weight_decay() != 0.0f && param_.regularization_type() != "L2") return false;
    if (!math::dev::OnGpu(*ctx_)) {
      UpdateOnCpu(rate);
      return true;
    }
#if CORTADO_WITH_CUDA
    const auto& params = net_->learnable_params();
    std::vector<math::gpu::SgdTensor> tensors;
    tensors.reserve(params.size());
    for (size_t id = 0; id < params.size(); ++id) {
      Tensor* p = params[id];
      if (p->count() == 0) continue;
      tensors.push_back({p->mutable_gpu_data(), p->mutable_gpu_diff(),
                         history_[id]->mutable_gpu_data(), p->count(), rate * net_->params_lr()[id],
                         param_.weight_decay() * net_->params_weight_decay()[id]});
    }
    const float diff_scale =
        param_.iter_size() == 1 ? 1.0f : 1.0f / static_cast<float>(param_.iter_size());
    math::gpu::SgdUpdateMany(*ctx_, tensors, param_.momentum(), diff_scale);
    return true;
#else
    return false;
#endif
  }

 private:
  void UpdateOnCpu(float rate) {
    // Pieces of at most kPiece values, one parallel loop over all of them: one OpenMP region a
    // step, not one per parameter and pass. Each value is updated alone, so the pieces' order
    // and the thread count change nothing.
    constexpr int kPiece = 1 << 14;
    struct Piece {
      float* data;
      float* diff;
      float* history;
      int count;
      float rate;
      float decay;
    };
    std::vector<Piece> pieces;
    const auto& params = net_->learnable_params();
    for (size_t id = 0; id < params.size(); ++id) {
      Tensor* p = params[id];
      const int n = p->count();
      if (n == 0) continue;
      float* data = p->mutable_cpu_data();
      float* diff = p->mutable_cpu_diff();
      float* history = history_[id]->mutable_cpu_data();
      const float local_rate = rate * net_->params_lr()[id];
      const float decay = param_.weight_decay() * net_->params_weight_decay()[id];
      for (int at = 0; at < n; at += kPiece) {
        pieces.push_back(
            {data + at, diff + at, history + at, std::min(kPiece, n - at), local_rate, decay});
      }
    }
    const float momentum = param_.momentum();
    const bool normalize = param_.iter_size() != 1;
    const float diff_scale = normalize ? 1.0f / static_cast<float>(param_.iter_size()) : 1.0f;
    const int count = static_cast<int>(pieces.size());
#pragma omp parallel for if (count * kPiece > math::kParallelThreshold) schedule(static)
    for (int k = 0; k < count; ++k) {
      const Piece& piece = pieces[k];
      float* data = piece.data;
      float* diff = piece.diff;
      float* history = piece.history;
      const float local_rate = piece.rate;
      const float decay = piece.decay;
      for (int i = 0; i < piece.count; ++i) {
        float g = diff[i];
        if (normalize) g *= diff_scale;                          // Normalize
        if (decay != 0.0f) g = decay * data[i] + g;              // Regularize (L2)
        const float h = local_rate * g + momentum * history[i];  // ComputeUpdateValue
        history[i] = h;
        diff[i] = h;
        data[i] = data[i] - h;  // Net::Update
      }
    }
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(SGD, SGDSolver);

}  // namespace cortado
