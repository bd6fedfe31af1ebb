// SPDX-License-Identifier: Apache-2.0
// SGD with momentum (Caffe's SGDSolver, type "SGD"):
//   history = momentum * history + local_rate * gradient;  weights -= history
// with local_rate = rate * lr_mult. One history tensor per learnable parameter.
#include "math/on_device.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class SGDSolver final : public Solver {
 public:
  SGDSolver(const caffe::SolverParameter& param, Context* ctx) : Solver(param, ctx) {}
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
};

}  // namespace

CORTADO_REGISTER_SOLVER(SGD, SGDSolver);

}  // namespace cortado
