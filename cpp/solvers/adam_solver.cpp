// SPDX-License-Identifier: Apache-2.0
// Adam (Caffe's AdamSolver, type "Adam"), beta1 = momentum, beta2 = momentum2, eps = delta:
//   m = beta1 * m + (1 - beta1) * gradient
//   v = beta2 * v + (1 - beta2) * gradient^2
//   weights -= local_rate * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
// with t = iter + 1. History: the m tensors of all learnable parameters, then their v tensors.
#include <cmath>

#include "math/on_device.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class AdamSolver final : public Solver {
 public:
  AdamSolver(const caffe::SolverParameter& param, Context* ctx, const NetOptions& net_options)
      : Solver(param, ctx, net_options) {
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
    float* m = math::dev::MutableData(*ctx_, *history_[param_id]);
    float* v = math::dev::MutableData(*ctx_, *history_[param_id + num_params]);
    float* update = math::dev::MutableData(*ctx_, *update_[param_id]);
    float* diff = math::dev::MutableDiff(*ctx_, *p);
    // Bias correction; pow(float, int) in double as in Caffe.
    const int t = iter_ + 1;
    const float correction =
        static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t)) /
                           (1.0 - std::pow(static_cast<double>(beta1), t)));
    math::dev::Axpby(*ctx_, n, 1.0f - beta1, diff, beta1, m);
    math::dev::Sqr(*ctx_, n, diff, update);
    math::dev::Axpby(*ctx_, n, 1.0f - beta2, update, beta2, v);
    math::dev::Sqrt(*ctx_, n, v, update);
    math::dev::AddScalar(*ctx_, n, param_.delta(), update);
    math::dev::Div(*ctx_, n, m, update, update);
    math::dev::Scale(*ctx_, n, local_rate * correction, update, diff);
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(Adam, AdamSolver);

}  // namespace cortado
