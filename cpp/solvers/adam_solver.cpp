// SPDX-License-Identifier: Apache-2.0
// Adam (Caffe's AdamSolver, type "Adam"), beta1 = momentum, beta2 = momentum2, eps = delta:
//   m = beta1 * m + (1 - beta1) * gradient
//   v = beta2 * v + (1 - beta2) * gradient^2
//   weights -= local_rate * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
// with t = iter + 1. History: the m tensors of all learnable parameters, then their v tensors.
#include <cmath>

#include "math/math.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class AdamSolver final : public Solver {
 public:
  AdamSolver(const caffe::SolverParameter& param, Context* ctx) : Solver(param, ctx) {
    AddHistorySet();
  }
  const char* type() const override { return "Adam"; }

 protected:
  void ComputeUpdateValue(int param_id, float rate) override {
    Tensor* p = net_->learnable_params()[param_id];
    const int n = p->count();
    if (n == 0) return;
    const size_t num_params = net_->learnable_params().size();
    const float beta1 = param_.momentum();
    const float beta2 = param_.momentum2();
    const float local_rate = rate * net_->params_lr()[param_id];
    float* m = history_[param_id]->mutable_cpu_data();
    float* v = history_[param_id + num_params]->mutable_cpu_data();
    float* update = update_[param_id]->mutable_cpu_data();
    float* diff = p->mutable_cpu_diff();
    // Bias correction; pow(float, int) in double as in Caffe.
    const int t = iter_ + 1;
    const float correction =
        static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t)) /
                           (1.0 - std::pow(static_cast<double>(beta1), t)));
    math::Axpby(n, 1.0f - beta1, diff, beta1, m);
    math::Sqr(n, diff, update);
    math::Axpby(n, 1.0f - beta2, update, beta2, v);
    math::Sqrt(n, v, update);
    math::AddScalar(n, param_.delta(), update);
    math::Div(n, m, update, update);
    math::Scale(n, local_rate * correction, update, diff);
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(Adam, AdamSolver);

}  // namespace cortado
