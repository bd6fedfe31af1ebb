// SPDX-License-Identifier: Apache-2.0
// SGD with momentum (Caffe's SGDSolver, type "SGD"):
//   history = momentum * history + local_rate * gradient;  weights -= history
// with local_rate = rate * lr_mult. One history tensor per learnable parameter.
#include <vector>

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
  // arithmetic in the same order as the per-parameter path, which reads and writes each value
  // eleven times on the CPU (four BLAS calls and Net::Update) and launches five kernels per
  // parameter on a GPU, where this reads three arrays and writes three (math::SgdUpdateMany).
  bool ApplyFusedUpdate(float rate) override {
    if (param_.weight_decay() != 0.0f && param_.regularization_type() != "L2") return false;
    const auto& params = net_->learnable_params();
    std::vector<math::SgdTensor> tensors;
    tensors.reserve(params.size());
    for (size_t id = 0; id < params.size(); ++id) {
      Tensor* p = params[id];
      if (p->count() == 0) continue;
      tensors.push_back({math::dev::MutableData(*ctx_, *p), math::dev::MutableDiff(*ctx_, *p),
                         math::dev::MutableData(*ctx_, *history_[id]), p->count(),
                         rate * net_->params_lr()[id],
                         param_.weight_decay() * net_->params_weight_decay()[id]});
    }
    const float diff_scale =
        param_.iter_size() == 1 ? 1.0f : 1.0f / static_cast<float>(param_.iter_size());
    math::dev::SgdUpdateMany(*ctx_, tensors, param_.momentum(), diff_scale);
    return true;
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(SGD, SGDSolver);

}  // namespace cortado
