// SPDX-License-Identifier: Apache-2.0
// AdaDelta (Caffe's AdaDeltaSolver, type "AdaDelta"), with momentum as the decay rho:
//   g2 = rho * g2 + (1 - rho) * gradient^2
//   step = gradient * sqrt((dx2 + delta) / (g2 + delta))
//   dx2 = rho * dx2 + (1 - rho) * step^2
//   weights -= local_rate * step
// History: the g2 tensors of all learnable parameters, then their dx2 tensors (Caffe's order,
// so .solverstate files interoperate).
#include "math/on_device.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class AdaDeltaSolver final : public Solver {
 public:
  AdaDeltaSolver(const caffe::SolverParameter& param, Context* ctx, const NetOptions& net_options)
      : Solver(param, ctx, net_options) {
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
    float* g2 = math::dev::MutableData(*ctx_, *history_[param_id]);
    float* dx2 = math::dev::MutableData(*ctx_, *history_[param_id + num_params]);
    float* update = math::dev::MutableData(*ctx_, *update_[param_id]);
    float* temp = math::dev::MutableData(*ctx_, *temp_[param_id]);
    float* diff = math::dev::MutableDiff(*ctx_, *p);
    math::dev::Sqr(*ctx_, n, diff, update);
    math::dev::Axpby(*ctx_, n, 1.0f - rho, update, rho, g2);
    // update = sqrt((dx2 + delta) / (g2 + delta))
    math::dev::Copy(*ctx_, n, dx2, update);
    math::dev::AddScalar(*ctx_, n, delta, update);
    math::dev::Copy(*ctx_, n, g2, temp);
    math::dev::AddScalar(*ctx_, n, delta, temp);
    math::dev::Div(*ctx_, n, update, temp, update);
    math::dev::Sqrt(*ctx_, n, update, update);
    math::dev::Mul(*ctx_, n, diff, update, diff);
    math::dev::Sqr(*ctx_, n, diff, update);
    math::dev::Axpby(*ctx_, n, 1.0f - rho, update, rho, dx2);
    math::dev::Scale(*ctx_, n, local_rate, diff);
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(AdaDelta, AdaDeltaSolver);

}  // namespace cortado
