// SPDX-License-Identifier: Apache-2.0
// Nesterov's accelerated gradient (Caffe's NesterovSolver, type "Nesterov"):
//   history' = momentum * history + local_rate * gradient
//   weights -= (1 + momentum) * history' - momentum * history
// One history tensor per learnable parameter.
#include "math/math.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class NesterovSolver final : public Solver {
 public:
  NesterovSolver(const caffe::SolverParameter& param, Context* ctx) : Solver(param, ctx) {}
  const char* type() const override { return "Nesterov"; }

 protected:
  void ComputeUpdateValue(int param_id, float rate) override {
    Tensor* p = net_->learnable_params()[param_id];
    const int n = p->count();
    if (n == 0) return;
    const float momentum = param_.momentum();
    const float local_rate = rate * net_->params_lr()[param_id];
    float* history = history_[param_id]->mutable_cpu_data();
    float* update = update_[param_id]->mutable_cpu_data();
    math::Copy(n, history, update);  // the previous history
    math::Axpby(n, local_rate, p->cpu_diff(), momentum, history);
    math::Axpby(n, 1.0f + momentum, history, -momentum, update);
    math::Copy(n, update, p->mutable_cpu_diff());
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(Nesterov, NesterovSolver);

}  // namespace cortado
