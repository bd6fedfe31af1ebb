// SPDX-License-Identifier: Apache-2.0
// AdaDelta (Caffe's AdaDeltaSolver, type "AdaDelta"), with momentum as the decay rho:
//   g2 = rho * g2 + (1 - rho) * gradient^2
//   step = gradient * sqrt((dx2 + delta) / (g2 + delta))
//   dx2 = rho * dx2 + (1 - rho) * step^2
//   weights -= local_rate * step
// History: the g2 tensors of all learnable parameters, then their dx2 tensors (Caffe's order,
// so .solverstate files interoperate).
#include "math/math.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class AdaDeltaSolver final : public Solver {
 public:
  AdaDeltaSolver(const caffe::SolverParameter& param, Context* ctx) : Solver(param, ctx) {
    AddHistorySet();
  }
  const char* type() const override { return "AdaDelta"; }

 protected:
  void ComputeUpdateValue(int param_id, float rate) override {
    Tensor* p = net_->learnable_params()[param_id];
    const int n = p->count();
    if (n == 0) return;
    const size_t num_params = net_->learnable_params().size();
    const float delta = param_.delta();
    const float rho = param_.momentum();
    const float local_rate = rate * net_->params_lr()[param_id];
    float* g2 = history_[param_id]->mutable_cpu_data();
    float* dx2 = history_[param_id + num_params]->mutable_cpu_data();
    float* update = update_[param_id]->mutable_cpu_data();
    float* temp = temp_[param_id]->mutable_cpu_data();
    float* diff = p->mutable_cpu_diff();
    math::Sqr(n, diff, update);
    math::Axpby(n, 1.0f - rho, update, rho, g2);
    // update = sqrt((dx2 + delta) / (g2 + delta))
    math::Copy(n, dx2, update);
    math::AddScalar(n, delta, update);
    math::Copy(n, g2, temp);
    math::AddScalar(n, delta, temp);
    math::Div(n, update, temp, update);
    math::Sqrt(n, update, update);
    math::Mul(n, diff, update, diff);
    math::Sqr(n, diff, update);
    math::Axpby(n, 1.0f - rho, update, rho, dx2);
    math::Scale(n, local_rate, diff);
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(AdaDelta, AdaDeltaSolver);

}  // namespace cortado
