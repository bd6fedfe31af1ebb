// SPDX-License-Identifier: Apache-2.0
// SGD with momentum (Caffe's SGDSolver, type "SGD"):
//   history = momentum * history + local_rate * gradient;  weights -= history
// with local_rate = rate * lr_mult. One history tensor per learnable parameter.
#include "math/math.hpp"
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
    float* history = history_[param_id]->mutable_cpu_data();
    math::Axpby(n, local_rate, p->cpu_diff(), param_.momentum(), history);
    math::Copy(n, history, p->mutable_cpu_diff());
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(SGD, SGDSolver);

}  // namespace cortado
