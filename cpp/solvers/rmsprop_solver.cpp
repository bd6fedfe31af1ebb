// SPDX-License-Identifier: Apache-2.0
// RMSProp (Caffe's RMSPropSolver, type "RMSProp"):
//   history = rms_decay * history + (1 - rms_decay) * gradient^2
//   weights -= local_rate * gradient / (sqrt(history) + delta)
// One history tensor per learnable parameter. momentum must be 0 and rms_decay in [0, 1).
#include "math/on_device.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class RMSPropSolver final : public Solver {
 public:
  RMSPropSolver(const caffe::SolverParameter& param, Context* ctx, const NetOptions& net_options)
      : Solver(param, ctx, net_options) {
    if (param_.momentum() != 0.0f) {
      CORTADO_THROW(kInvalidArgument, "solver: momentum cannot be used with RMSProp (got {})",
                    param_.momentum());
    }
    if (param_.rms_decay() < 0.0f || param_.rms_decay() >= 1.0f) {
      CORTADO_THROW(kInvalidArgument, "solver: rms_decay must lie in [0, 1), got {}",
                    param_.rms_decay());
    }
  }
  const char* type() const override { return "RMSProp"; }

 protected:
  void ComputeUpdateValue(int param_id, float rate) override {
    Tensor* p = net_->learnable_params()[param_id];
    const int n = p->count();
    if (n == 0) return;
    const float decay = param_.rms_decay();
    const float local_rate = rate * net_->params_lr()[param_id];
    float* history = math::dev::MutableData(*ctx_, *history_[param_id]);
    float* update = math::dev::MutableData(*ctx_, *update_[param_id]);
    float* diff = math::dev::MutableDiff(*ctx_, *p);
    math::dev::Sqr(*ctx_, n, diff, update);
    math::dev::Axpby(*ctx_, n, 1.0f - decay, update, decay, history);
    math::dev::Sqrt(*ctx_, n, history, update);
    math::dev::AddScalar(*ctx_, n, param_.delta(), update);
    math::dev::Div(*ctx_, n, diff, update, update);
    math::dev::Scale(*ctx_, n, local_rate, update, diff);
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(RMSProp, RMSPropSolver);

}  // namespace cortado
