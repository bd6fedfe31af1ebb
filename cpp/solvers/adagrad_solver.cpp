// SPDX-License-Identifier: Apache-2.0
// AdaGrad (Caffe's AdaGradSolver, type "AdaGrad"):
//   history += gradient^2;  weights -= local_rate * gradient / (sqrt(history) + delta)
// One history tensor per learnable parameter. momentum must be 0, as in Caffe.
#include "math/on_device.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

class AdaGradSolver final : public Solver {
 public:
  AdaGradSolver(const caffe::SolverParameter& param, Context* ctx, const NetOptions& net_options)
      : Solver(param, ctx, net_options) {
    if (param_.momentum() != 0.0f) {
      CORTADO_THROW(kInvalidArgument, "solver: momentum cannot be used with AdaGrad (got {})",
                    param_.momentum());
    }
  }
  const char* type() const override { return "AdaGrad"; }

 protected:
  void ComputeUpdateValue(int param_id, float rate) override {
    Tensor* p = net_->learnable_params()[param_id];
    const int n = p->count();
    if (n == 0) return;
    const float local_rate = rate * net_->params_lr()[param_id];
    float* history = math::dev::MutableData(*ctx_, *history_[param_id]);
    float* update = math::dev::MutableData(*ctx_, *update_[param_id]);
    float* diff = math::dev::MutableDiff(*ctx_, *p);
    math::dev::Sqr(*ctx_, n, diff, update);
    math::dev::Add(*ctx_, n, update, history, history);
    math::dev::Sqrt(*ctx_, n, history, update);
    math::dev::AddScalar(*ctx_, n, param_.delta(), update);
    math::dev::Div(*ctx_, n, diff, update, update);
    math::dev::Scale(*ctx_, n, local_rate, update, diff);
  }
};

}  // namespace

CORTADO_REGISTER_SOLVER(AdaGrad, AdaGradSolver);

}  // namespace cortado
