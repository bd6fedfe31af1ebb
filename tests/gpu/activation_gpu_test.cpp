// SPDX-License-Identifier: Apache-2.0
// Element-wise activation layers on the GPU against the CPU, and their gradient checks there.
#include <gtest/gtest.h>

#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {
namespace {

TEST(ReLUGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam("type: 'ReLU'"), {{2, 3, 4, 5}});
}

TEST(ReLUGpuTest, LeakyInPlaceMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.in_place = true;
  CheckGpuMatchesCpu(LayerParam("type: 'ReLU' relu_param { negative_slope: -0.3 }"), {{2, 3, 4, 5}},
                     options);
}

TEST(ReLUGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam("type: 'ReLU' relu_param { negative_slope: 0.1 }"), &ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  FillGaussian(&bottom);
  GradientCheckOptions options;
  options.kink = 0.0f;
  options.kink_range = 0.02f;
  GradientChecker(options).Check(layer.get(), {&bottom}, {&top});
}

}  // namespace
}  // namespace cortado::testing
