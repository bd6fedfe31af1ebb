// SPDX-License-Identifier: Apache-2.0
// Nesterov's accelerated gradient (Caffe's NesterovSolver, type "Nesterov"):
//   history' = momentum * history + local_rate * gradient
//   weights -= (1 + momentum) * history' - momentum * history
// One history tensor per learnable parameter.
#include "math/on_device.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class NesterovSolver final : public Solver {
 public:
  NesterovSolver(const caffe::SolverParameter& param, Context* ctx, const NetOptions& net_options)
      : Solver(param, ctx, net_options) {}
  const char* type() const override { return "Nesterov"; }

 protected:
  void ComputeUpdateValue(int param_id, float rate) override {
    Tensor* p = net_->learnable_params()[param_id];
    const int n = p->count();
    if (n == 0) return;
    const float momentum = param_.momentum();
    const float local_rate = rate * net_->params_lr()[param_id];
    float* history = math::dev::MutableData(*ctx_, *history_[param_id]);
    float* update = math::dev::MutableData(*ctx_, *update_[param_id]);
    math::dev::Copy(*ctx_, n, history, update);  // the previous history
    math::dev::Axpby(*ctx_, n, local_rate, math::dev::Diff(*ctx_, *p), momentum, history);
    math::dev::Axpby(*ctx_, n, 1.0f + momentum, history, -momentum, update);
    math::dev::Copy(*ctx_, n, update, math::dev::MutableDiff(*ctx_, *p));
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(Nesterov, NesterovSolver);

}  // namespace cortado
