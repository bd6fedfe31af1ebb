// SPDX-License-Identifier: Apache-2.0
// Mixed precision: the element-wise layers that read and write 16-bit blobs on the GPU (ReLU,
// the residual sum, Split, pooling) against the CPU in float32, with their blobs kept in the
// half type and with float32 blobs whose half twins they use. The GPU side rounds its inputs
// once and its outputs once; the tolerance is a few units of the type's rounding.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/half_type.hpp"
#include "core/tensor.hpp"
#include "support/gpu_check.hpp"

namespace cortado::testing {
namespace {

struct HalfCase {
  HalfType type;
  bool homes;
};

class HalfLayersGpuTest : public ::testing::TestWithParam<HalfCase> {
 protected:
  GpuCheckOptions Options() const {
    GpuCheckOptions options;
    options.half = GetParam().type;
    options.half_homes = GetParam().homes;
    // float16 keeps 11 significant bits, bfloat16 8: two roundings of values up to a few units.
    options.tolerance = GetParam().type == HalfType::kFloat16 ? 4e-3f : 3e-2f;
    return options;
  }
};

TEST_P(HalfLayersGpuTest, Relu) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("name: 'relu' type: 'ReLU'", {2, 3, 5, 7}, Options());
  CheckBothWays("name: 'leaky' type: 'ReLU' relu_param { negative_slope: 0.1 }", {3, 4, 3, 3},
                Options());
}

TEST_P(HalfLayersGpuTest, ResidualSum) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam("name: 'sum' type: 'Eltwise' bottom: 'a' bottom: 'b'"),
                     {{2, 6, 5, 5}, {2, 6, 5, 5}}, Options());
  CheckGpuMatchesCpu(
      LayerParam("name: 'sum' type: 'Eltwise' bottom: 'a' bottom: 'b' eltwise_param { "
                 "coeff: 0.5 coeff: -2 }"),
      {{3, 7, 4, 3}, {3, 7, 4, 3}}, Options());
}

TEST_P(HalfLayersGpuTest, SplitSumsItsTopsGradients) {
  CORTADO_REQUIRE_GPU();
  for (const char* tops : {"top: 'a'", "top: 'a' top: 'b'", "top: 'a' top: 'b' top: 'c'"}) {
    SCOPED_TRACE(tops);
    CheckGpuMatchesCpu(LayerParam(std::string("name: 'split' type: 'Split' ") + tops),
                       {{2, 5, 3, 7}}, Options());
  }
}

// Inputs both 16-bit types hold exactly (k / 64, |k| <= 256): rounding cannot make two values of
// a window equal on the GPU that differ on the CPU, so MAX picks the same element on both.
void FillExactly(int index, Tensor* t) {
  std::mt19937 rng(17 + index);
  std::uniform_int_distribution<int> k(-256, 256);
  for (int i = 0; i < t->count(); ++i) t->mutable_cpu_data()[i] = k(rng) / 64.0f;
}

TEST_P(HalfLayersGpuTest, Pooling) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options = Options();
  options.fill_bottom = FillExactly;
  CheckGpuMatchesCpu(LayerParam("name: 'max' type: 'Pooling' pooling_param { pool: MAX "
                                "kernel_size: 3 stride: 2 pad: 1 }"),
                     {{2, 4, 9, 11}}, options);
  CheckGpuMatchesCpu(LayerParam("name: 'ave' type: 'Pooling' pooling_param { pool: AVE "
                                "kernel_size: 3 stride: 2 }"),
                     {{2, 3, 8, 7}}, Options());
  CheckGpuMatchesCpu(LayerParam("name: 'global' type: 'Pooling' pooling_param { pool: AVE "
                                "global_pooling: true }"),
                     {{3, 8, 7, 7}}, Options());
}

INSTANTIATE_TEST_SUITE_P(Types, HalfLayersGpuTest,
                         ::testing::Values(HalfCase{HalfType::kFloat16, true},
                                           HalfCase{HalfType::kFloat16, false},
                                           HalfCase{HalfType::kBFloat16, true},
                                           HalfCase{HalfType::kBFloat16, false}),
                         [](const auto& param_info) {
                           return std::string(HalfTypeName(param_info.param.type)) +
                                  (param_info.param.homes ? "_half_blobs" : "_float_blobs");
                         });

}  // namespace
}  // namespace cortado::testing
