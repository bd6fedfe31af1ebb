// SPDX-License-Identifier: Apache-2.0
// The solver's `precision: TF32` on the GPU: cuBLAS products and cuDNN convolutions on tensor
// cores when a context allows them, strict float32 otherwise, on the same context and shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/config.hpp"
#include "core/device_info.hpp"
#include "core/tensor.hpp"
#include "math/gpu.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"
#include "support/scoped_env.hpp"

namespace cortado::testing {
namespace {

// TF32 tensor cores exist from compute capability 8.0 (Ampere) on.
bool HasTensorFloat32() {
  const auto devices = QueryCudaDevices();
  return !devices.empty() && devices[0].compute_major >= 8;
}

// C = A B with every A value 1 + 1e-4 and every B value 1, K = 1024: in float32 each sum is
// 1024 * (1 + 1e-4) = 1024.1024; TF32 keeps 10 bits of mantissa, rounds 1 + 1e-4 to 1, and sums
// to exactly 1024. Returns C's first value.
float ProductOfNearOnes(Context& ctx) {
  constexpr int kM = 64, kN = 64, kK = 1024;
  Tensor a({kM, kK}), b({kK, kN}), c({kM, kN});
  float* pa = a.mutable_cpu_data();
  for (int i = 0; i < a.count(); ++i) pa[i] = 1.0001f;
  float* pb = b.mutable_cpu_data();
  for (int i = 0; i < b.count(); ++i) pb[i] = 1.0f;
  math::gpu::Gemm(ctx, false, false, kM, kN, kK, 1.0f, a.gpu_data(), b.gpu_data(), 0.0f,
                  c.mutable_gpu_data());
  ctx.Synchronize();
  const float first = c.cpu_data()[0];
  for (int i = 1; i < c.count(); ++i) EXPECT_EQ(c.cpu_data()[i], first) << "element " << i;
  return first;
}

TEST(PrecisionGpuTest, Tf32ProductsRoundTheirInputsAndFloat32ProductsDoNot) {
  CORTADO_REQUIRE_GPU();
  if (!CORTADO_WITH_CUBLAS) GTEST_SKIP() << "a build without cuBLAS computes in float32 only";
  if (!HasTensorFloat32()) GTEST_SKIP() << "this GPU has no TF32 tensor cores";
  Context ctx(Device::Cuda(0), 1);
  ctx.MakeCurrent();
  EXPECT_NEAR(ProductOfNearOnes(ctx), 1024.1024f, 2e-3f) << "strict float32 by default";
  ctx.set_allow_tf32(true);
  EXPECT_EQ(ProductOfNearOnes(ctx), 1024.0f) << "TF32 allowed";
  ctx.set_allow_tf32(false);
  EXPECT_NEAR(ProductOfNearOnes(ctx), 1024.1024f, 2e-3f) << "strict float32 again";
}

caffe::LayerParameter WideConvolution() {
  return LayerParam(
      "name: 'conv' type: 'Convolution' convolution_param { num_output: 64 kernel_size: 3 "
      "pad: 1 weight_filler { type: 'gaussian' std: 0.1 } bias_filler { type: 'gaussian' "
      "std: 0.1 } }");
}

// Sums of 576 products of values in [-1, 1] times N(0, 0.1) weights: TF32's rounding of each
// input (relative 2^-11) leaves errors near 1e-3 of the sums' scale, far above float32's.
TEST(PrecisionGpuTest, Tf32ConvolutionMatchesCpuWithinTf32Rounding) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.allow_tf32 = true;
  options.tolerance = 2e-2f;
  CheckGpuMatchesCpu(WideConvolution(), {{8, 64, 16, 16}}, options);
}

// The largest difference between `a` and `b`, relative to b's largest magnitude.
float RelativeDifference(const Tensor& a, const Tensor& b) {
  float diff = 0.0f, scale = 0.0f;
  for (int i = 0; i < b.count(); ++i) {
    diff = std::max(diff, std::fabs(a.cpu_data()[i] - b.cpu_data()[i]));
    scale = std::max(scale, std::fabs(b.cpu_data()[i]));
  }
  return diff / scale;
}

// One context runs the same shape with TF32 allowed, then strict: plans are kept per context,
// shape and math, so the strict layer does not reuse the TF32 one's algorithms (with cuDNN's
// graph API an engine fixes its math). Both APIs.
TEST(PrecisionGpuTest, StrictConvolutionAfterTf32InOneContextStaysFloat32) {
  CORTADO_REQUIRE_GPU();
  for (const char* api : {"legacy", "graph"}) {
    SCOPED_TRACE(api);
    ScopedEnv env("CORTADO_CUDNN_API", api);
    Context cpu(Device::Cpu(), 3);
    Tensor x({8, 64, 16, 16}), cpu_y, tf32_y, strict_y;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (int i = 0; i < x.count(); ++i) x.mutable_cpu_data()[i] = uniform(rng);
    auto reference = CreateLayer(WideConvolution(), &cpu);
    reference->Initialize({&x}, {&cpu_y});
    reference->Forward({&x}, {&cpu_y});

    Context gpu(Device::Cuda(0), 3);
    gpu.MakeCurrent();
    for (bool tf32 : {true, false}) {
      gpu.set_allow_tf32(tf32);
      Tensor& y = tf32 ? tf32_y : strict_y;
      auto layer = CreateLayer(WideConvolution(), &gpu);
      layer->Initialize({&x}, {&y});
      for (size_t i = 0; i < layer->blobs().size(); ++i) {
        layer->blobs()[i]->CopyFrom(*reference->blobs()[i]);
      }
      layer->Forward({&x}, {&y});
      gpu.Synchronize();
    }
    EXPECT_LT(RelativeDifference(tf32_y, cpu_y), 1e-2f);
    EXPECT_LT(RelativeDifference(strict_y, cpu_y), 1e-4f);
  }
}

}  // namespace
}  // namespace cortado::testing
