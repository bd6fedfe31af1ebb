// SPDX-License-Identifier: Apache-2.0
// The solver's `precision` on the GPU: TF32 (cuBLAS products and cuDNN convolutions on tensor
// cores when a context allows them, strict float32 otherwise, on the same context and shapes),
// and FLOAT16/BFLOAT16 (half operands in NHWC, float32 sums): the copies in and out, the layers
// against the CPU within the half type's rounding, and training with loss scaling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/device_info.hpp"
#include "core/tensor.hpp"
#include "io/proto_io.hpp"
#include "math/gpu.hpp"
#include "solvers/solver.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"
#include "support/scoped_env.hpp"

#if CORTADO_WITH_CUDA
#include "core/cuda.hpp"
#endif

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

// ---- float16 / bfloat16 -----------------------------------------------------------------

// Values that float16 and bfloat16 both hold exactly (multiples of 1/8 in [-16, 16]), so the
// copies must give them back bit for bit.
[[maybe_unused]] std::vector<float> ExactValues(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> eighths(-128, 128);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(eighths(rng)) / 8.0f;
  return v;
}

#if CORTADO_WITH_CUDA  // the copies are math::gpu functions, which exist only with CUDA
// Every path of the copies (half.cu): odd channels above 16 (the general tile), even channels
// above 16 (channel pairs; 64-position tiles, or 32 when hw is that small), 2 to 16 channels, one
// channel; sizes that leave partial tiles on both axes. beta = 0 must not read the destination
// (filled with NaN), beta = 1 adds to it.
TEST(MixedPrecisionGpuTest, NhwcCopiesTransposeAndComeBackExactly) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  ctx.MakeCurrent();
  struct Shape {
    int n, c, hw;
  };
  for (const Shape& shape : {Shape{3, 37, 45}, Shape{3, 64, 45}, Shape{2, 96, 7}, Shape{2, 130, 70},
                             Shape{2, 3, 1100}, Shape{3, 16, 33}, Shape{2, 1, 45}}) {
    const int kN = shape.n, kC = shape.c, kHw = shape.hw, kCount = kN * kC * kHw;
    const std::vector<float> values = ExactValues(kCount, 11 + kC);
    for (auto type : {Context::HalfType::kFloat16, Context::HalfType::kBFloat16}) {
      SCOPED_TRACE(std::string(type == Context::HalfType::kFloat16 ? "float16" : "bfloat16") +
                   " n " + std::to_string(kN) + " c " + std::to_string(kC) + " hw " +
                   std::to_string(kHw));
      Tensor src({kN, kC, kHw}), half({kCount / 2 + 1}), back({kN, kC, kHw}), fresh({kN, kC, kHw}),
          nhwc({kN, kHw, kC});
      std::copy(values.begin(), values.end(), src.mutable_cpu_data());
      math::gpu::ToHalfNhwc(ctx, type, kN, kC, kHw, src.gpu_data(), half.mutable_gpu_data());
      // NHWC in the half type, widened element by element (no transpose): a C-contiguous layout.
      math::gpu::FromHalfNhwc(ctx, type, 1, 1, kCount, half.gpu_data(), 0.0f,
                              nhwc.mutable_gpu_data());
      for (float* p = back.mutable_cpu_data(); p != back.mutable_cpu_data() + kCount; ++p) {
        *p = 0.5f;
      }
      for (float* p = fresh.mutable_cpu_data(); p != fresh.mutable_cpu_data() + kCount; ++p) {
        *p = std::nanf("");
      }
      math::gpu::FromHalfNhwc(ctx, type, kN, kC, kHw, half.gpu_data(), 1.0f,
                              back.mutable_gpu_data());
      math::gpu::FromHalfNhwc(ctx, type, kN, kC, kHw, half.gpu_data(), 0.0f,
                              fresh.mutable_gpu_data());
      ctx.Synchronize();
      for (int n = 0; n < kN; ++n) {
        for (int c = 0; c < kC; ++c) {
          for (int p = 0; p < kHw; ++p) {
            const int at = (n * kC + c) * kHw + p;
            const float v = values[at];
            ASSERT_EQ(nhwc.cpu_data()[(n * kHw + p) * kC + c], v) << n << " " << c << " " << p;
            ASSERT_EQ(back.cpu_data()[at], v + 0.5f) << n << " " << c << " " << p;
            ASSERT_EQ(fresh.cpu_data()[at], v) << n << " " << c << " " << p;
          }
        }
      }
    }
  }
}

// The copies between two 16-bit layouts (half blobs around cuDNN): every path of half.cu's
// HalfToNhwc / HalfFromNhwc. Even hw with 4-byte aligned rows takes the wide tiles to NHWC
// (partial on both axes), unless CORTADO_HALF_WIDE_COPIES=0; odd hw, and a pointer 2 bytes off a
// 4-byte boundary, the pair tiles; odd channels the general tile; few channels and one channel
// their own. Values come back bit for bit, and with a bias each is the rounded sum.
TEST(MixedPrecisionGpuTest, HalfLayoutCopiesTransposeExactlyOnEveryPath) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  ctx.MakeCurrent();
  struct Shape {
    int n, c, hw, offset;  // offset: values of the half type before the data (0 or 1)
  };
  for (const Shape& shape :
       {Shape{3, 64, 196, 0}, Shape{2, 130, 70, 0}, Shape{2, 66, 64, 0}, Shape{2, 96, 50, 0},
        Shape{2, 34, 2, 0}, Shape{3, 64, 49, 0}, Shape{2, 130, 70, 1}, Shape{2, 37, 46, 0},
        Shape{2, 6, 130, 0}, Shape{2, 1, 46, 0}}) {
    const int kN = shape.n, kC = shape.c, kHw = shape.hw, kCount = kN * kC * kHw;
    const std::vector<float> values = ExactValues(kCount, 29 + kC + kHw);
    std::vector<float> bias_values(kC);
    for (int c = 0; c < kC; ++c) bias_values[c] = 0.25f * static_cast<float>(c % 7) - 0.75f;
    for (auto [type, wide_copies] :
         {std::pair{Context::HalfType::kFloat16, "1"}, std::pair{Context::HalfType::kBFloat16, "1"},
          std::pair{Context::HalfType::kFloat16, "0"}}) {
      ScopedEnv copies_env("CORTADO_HALF_WIDE_COPIES", wide_copies);
      SCOPED_TRACE(std::string(type == Context::HalfType::kFloat16 ? "float16" : "bfloat16") +
                   " n " + std::to_string(kN) + " c " + std::to_string(kC) + " hw " +
                   std::to_string(kHw) + " offset " + std::to_string(shape.offset) +
                   " wide copies " + wide_copies);
      // Half values live in float tensors, two per float; `offset` of them skipped at the front.
      const int kHalfFloats = (kCount + shape.offset) / 2 + 1;
      Tensor src({kCount}), bias({kC}), nchw({kHalfFloats}), nhwc({kHalfFloats}),
          back({kHalfFloats}), biased({kHalfFloats}), wide({kCount});
      std::copy(values.begin(), values.end(), src.mutable_cpu_data());
      std::copy(bias_values.begin(), bias_values.end(), bias.mutable_cpu_data());
      auto at = [&](Tensor& t) {
        return static_cast<void*>(reinterpret_cast<uint16_t*>(t.mutable_gpu_data()) + shape.offset);
      };
      math::gpu::ToHalf(ctx, type, kCount, src.gpu_data(), at(nchw));
      math::gpu::HalfNchwToNhwc(ctx, type, kN, kC, kHw, at(nchw), at(nhwc));
      math::gpu::FromHalfNhwc(ctx, type, 1, 1, kCount, at(nhwc), 0.0f, wide.mutable_gpu_data());
      ctx.Synchronize();
      for (int n = 0; n < kN; ++n) {
        for (int c = 0; c < kC; ++c) {
          for (int p = 0; p < kHw; ++p) {
            ASSERT_EQ(wide.cpu_data()[(n * kHw + p) * kC + c], values[(n * kC + c) * kHw + p])
                << "to NHWC: " << n << " " << c << " " << p;
          }
        }
      }
      math::gpu::HalfNhwcToNchw(ctx, type, kN, kC, kHw, at(nhwc), nullptr, at(back));
      math::gpu::FromHalfNhwc(ctx, type, 1, 1, kCount, at(back), 0.0f, wide.mutable_gpu_data());
      ctx.Synchronize();
      for (int i = 0; i < kCount; ++i) ASSERT_EQ(wide.cpu_data()[i], values[i]) << "back: " << i;
      math::gpu::HalfNhwcToNchw(ctx, type, kN, kC, kHw, at(nhwc), bias.gpu_data(), at(biased));
      math::gpu::FromHalfNhwc(ctx, type, 1, 1, kCount, at(biased), 0.0f, wide.mutable_gpu_data());
      ctx.Synchronize();
      // The sums of eighths in [-16, 16] and quarters in [-0.75, 0.75] are exact in both types.
      for (int i = 0; i < kCount; ++i) {
        ASSERT_EQ(wide.cpu_data()[i], values[i] + bias_values[(i / kHw) % kC]) << "bias: " << i;
      }
    }
  }
}

TEST(MixedPrecisionGpuTest, CopiesRoundToNearestEven) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  ctx.MakeCurrent();
  // 1 + 2^-11 lies halfway between float16's 1 and 1 + 2^-10: ties go to the even 1.
  // 1 + 3 * 2^-11 lies between 1 + 2^-10 and 1 + 2^-9: ties go to 1 + 2^-9. bfloat16 keeps 7
  // bits: 1 + 2^-8 rounds to 1, 1 + 3 * 2^-8 to 1 + 2^-6.
  Tensor src({4}), half({2}), back({4});
  const float in[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f};
  std::copy(in, in + 4, src.mutable_cpu_data());
  math::gpu::ToHalf(ctx, Context::HalfType::kFloat16, 4, src.gpu_data(), half.mutable_gpu_data());
  math::gpu::FromHalfNhwc(ctx, Context::HalfType::kFloat16, 1, 1, 4, half.gpu_data(), 0.0f,
                          back.mutable_gpu_data());
  ctx.Synchronize();
  EXPECT_EQ(back.cpu_data()[0], 1.0f);
  EXPECT_EQ(back.cpu_data()[1], 1.0f + 0x1p-9f);
  math::gpu::ToHalf(ctx, Context::HalfType::kBFloat16, 4, src.gpu_data(), half.mutable_gpu_data());
  math::gpu::FromHalfNhwc(ctx, Context::HalfType::kBFloat16, 1, 1, 4, half.gpu_data(), 0.0f,
                          back.mutable_gpu_data());
  ctx.Synchronize();
  EXPECT_EQ(back.cpu_data()[2], 1.0f);
  EXPECT_EQ(back.cpu_data()[3], 1.0f + 0x1p-6f);
}
#endif  // CORTADO_WITH_CUDA

// The product of near-ones again: float16 rounds 1 + 1e-4 to 1 (as TF32 does), so the mixed
// product sums to exactly 1024, in a float32 result.
TEST(MixedPrecisionGpuTest, MixedProductsRoundTheirOperandsAndSumInFloat32) {
  CORTADO_REQUIRE_GPU();
  if (!CORTADO_WITH_CUBLAS) GTEST_SKIP() << "a build without cuBLAS computes in float32 only";
  Context ctx(Device::Cuda(0), 1);
  ctx.MakeCurrent();
  constexpr int kM = 64, kN = 64, kK = 1024;
  Tensor a({kM, kK}), b({kK, kN}), c({kM, kN});
  for (int i = 0; i < a.count(); ++i) a.mutable_cpu_data()[i] = 1.0001f;
  for (int i = 0; i < b.count(); ++i) b.mutable_cpu_data()[i] = 1.0f;
  math::gpu::GemmMixed(ctx, false, false, kM, kN, kK, 1.0f, a.gpu_data(), b.gpu_data(), 0.0f,
                       c.mutable_gpu_data());
  ctx.Synchronize();
  EXPECT_NEAR(c.cpu_data()[0], 1024.1024f, 2e-3f) << "no half type: float32";
  ctx.set_half_compute(Context::HalfType::kFloat16);
  math::gpu::GemmMixed(ctx, false, false, kM, kN, kK, 1.0f, a.gpu_data(), b.gpu_data(), 0.0f,
                       c.mutable_gpu_data());
  ctx.Synchronize();
  for (int i = 0; i < c.count(); ++i) ASSERT_EQ(c.cpu_data()[i], 1024.0f) << i;
  // 2049 ones: float16 cannot hold 2049 but the float32 sum can.
  Tensor ones_a({1, 2049}), ones_b({2049, 1}), sum({1, 1});
  for (int i = 0; i < 2049; ++i) ones_a.mutable_cpu_data()[i] = ones_b.mutable_cpu_data()[i] = 1;
  math::gpu::GemmMixed(ctx, false, false, 1, 1, 2049, 1.0f, ones_a.gpu_data(), ones_b.gpu_data(),
                       0.0f, sum.mutable_gpu_data());
  ctx.Synchronize();
  EXPECT_EQ(sum.cpu_data()[0], 2049.0f);
}

// float16 keeps 11 significant bits, bfloat16 8: the layers' sums of thousands of rounded
// products stay within these tolerances of float32's, bfloat16's 2^3 times float16's (on an
// H200 the largest bfloat16 error, on a filter gradient, was 0.118).
constexpr float kFloat16Tolerance = 2e-2f;
constexpr float kBFloat16Tolerance = 8 * kFloat16Tolerance;

// `param` on `shapes` against the CPU in float16 and in bfloat16, each within its tolerance.
void CheckInBothHalfTypes(const caffe::LayerParameter& param,
                          const std::vector<std::vector<int>>& shapes) {
  for (auto type : {Context::HalfType::kFloat16, Context::HalfType::kBFloat16}) {
    SCOPED_TRACE(type == Context::HalfType::kFloat16 ? "float16" : "bfloat16");
    GpuCheckOptions options;
    options.half = type;
    options.tolerance =
        type == Context::HalfType::kFloat16 ? kFloat16Tolerance : kBFloat16Tolerance;
    CheckGpuMatchesCpu(param, shapes, options);
  }
}

TEST(MixedPrecisionGpuTest, ConvolutionMatchesCpuWithinHalfRounding) {
  CORTADO_REQUIRE_GPU();
  CheckInBothHalfTypes(WideConvolution(), {{8, 64, 16, 16}});
  // A strided, grouped convolution with channels that are no multiple of 8 (too little work per
  // element for the half type to pay: made to take it).
  ScopedEnv all("CORTADO_HALF_CONVOLUTIONS", "all");
  CheckInBothHalfTypes(
      LayerParam("name: 'conv' type: 'Convolution' convolution_param { num_output: 12 "
                 "kernel_size: 3 stride: 2 pad: 1 group: 3 weight_filler { type: 'gaussian' "
                 "std: 0.1 } bias_filler { type: 'constant' value: 0.5 } }"),
      {{2, 6, 11, 13}});
}

#if CORTADO_WITH_CUDA
// Under mixed precision a convolution with little arithmetic per element copied runs in TF32 on
// its float32 operands (its copies into the half type would cost more than its tensor cores
// save), and CORTADO_HALF_CONVOLUTIONS=all puts it in the half type: the half scratch says which
// ran. Either way it matches the CPU within the half type's rounding.
TEST(MixedPrecisionGpuTest, ConvolutionsWithLittleWorkPerElementRunInTf32UnlessAllAreHalf) {
  CORTADO_REQUIRE_GPU();
  // The rule is for float32 blobs: on half blobs every convolution computes in the half type.
  ScopedEnv float_blobs("CORTADO_HALF_TENSORS", "0");
  auto conv = [](int outputs, int kernel) {
    return LayerParam(
        "name: 'conv' type: 'Convolution' convolution_param { num_output: " +
        std::to_string(outputs) + " kernel_size: " + std::to_string(kernel) +
        " pad: " + std::to_string(kernel / 2) +
        " weight_filler { type: 'gaussian' std: 0.05 } bias_filler { type: 'constant' value: "
        "0.25 } }");
  };
  // How many times a forward and backward of `p` on x of `shape` used the half scratch.
  auto scratch_calls = [](const caffe::LayerParameter& p, const std::vector<int>& shape) {
    Context ctx(Device::Cuda(0), 3);
    ctx.MakeCurrent();
    ctx.set_half_compute(Context::HalfType::kFloat16);
    Tensor x(shape), y;
    math::gpu::RngUniform(ctx, x.count(), -1.0f, 1.0f, x.mutable_gpu_data());
    auto layer = CreateLayer(p, &ctx);
    layer->Initialize({&x}, {&y});
    const uint64_t before = cuda::Get(ctx).half_scratch_calls();
    layer->Forward({&x}, {&y});
    math::gpu::RngUniform(ctx, y.count(), -1.0f, 1.0f, y.mutable_gpu_diff());
    layer->Backward({&y}, {true}, {&x});
    ctx.Synchronize();
    return cuda::Get(ctx).half_scratch_calls() - before;
  };
  // 2 C K R S / (C + K) multiply-adds per element: 1x1 40 -> 48 does 44, 1x1 512 -> 512 does
  // 512, 3x3 40 -> 64 does 443; the half type from 256.
  const std::vector<int> narrow = {4, 40, 9, 9}, wide = {2, 512, 5, 5};
  EXPECT_EQ(scratch_calls(conv(48, 1), narrow), 0u) << "1x1 40 -> 48: TF32, no half copies";
  EXPECT_GT(scratch_calls(conv(512, 1), wide), 0u) << "1x1 512 -> 512: half";
  EXPECT_GT(scratch_calls(conv(64, 3), narrow), 0u) << "3x3 40 -> 64: half";
  CheckInBothHalfTypes(conv(48, 1), {narrow});
  CheckInBothHalfTypes(conv(512, 1), {wide});
  ScopedEnv all("CORTADO_HALF_CONVOLUTIONS", "all");
  EXPECT_GT(scratch_calls(conv(48, 1), narrow), 0u) << "1x1 40 -> 48 with "
                                                       "CORTADO_HALF_CONVOLUTIONS=all";
  CheckInBothHalfTypes(conv(48, 1), {narrow});
}
#endif

TEST(MixedPrecisionGpuTest, InnerProductMatchesCpuWithinHalfRounding) {
  CORTADO_REQUIRE_GPU();
  CheckInBothHalfTypes(
      LayerParam("name: 'ip' type: 'InnerProduct' inner_product_param { num_output: 40 "
                 "weight_filler { type: 'gaussian' std: 0.1 } bias_filler { type: 'gaussian' "
                 "std: 0.1 } }"),
      {{16, 300}});
}

// A small convolutional net trained with `precision: FLOAT16` on the GPU: dynamic loss scaling
// starts at 65536, the loss falls as it does in float32, and the weights stay within float16's
// rounding of the float32 run's.
TEST(MixedPrecisionGpuTest, Float16TrainingFollowsFloat32) {
  CORTADO_REQUIRE_GPU();
  // Its convolution (3 -> 16 channels) would stay in TF32 on its own: made to take float16.
  ScopedEnv all("CORTADO_HALF_CONVOLUTIONS", "all");
  const std::string net =
      "name: 'small' "
      "layer { name: 'data' type: 'DummyData' top: 'x' top: 'label' dummy_data_param { "
      "  shape { dim: 16 dim: 3 dim: 12 dim: 12 } shape { dim: 16 } "
      "  data_filler { type: 'uniform' min: -1 max: 1 } data_filler { type: 'constant' value: 1 } "
      "} } "
      "layer { name: 'conv' type: 'Convolution' bottom: 'x' top: 'c' convolution_param { "
      "  num_output: 16 kernel_size: 3 weight_filler { type: 'xavier' } } } "
      "layer { name: 'relu' type: 'ReLU' bottom: 'c' top: 'c' } "
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'c' top: 'y' inner_product_param { "
      "  num_output: 4 weight_filler { type: 'xavier' } } } "
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'y' bottom: 'label' top: 'loss' } ";
  std::vector<std::vector<float>> weights;
  std::vector<float> losses;
  for (auto precision : {caffe::SolverParameter::FLOAT32, caffe::SolverParameter::FLOAT16}) {
    caffe::SolverParameter param;
    io::ReadProtoFromTextString(net, "<net>", param.mutable_net_param());
    param.set_base_lr(0.05f);
    param.set_momentum(0.9f);
    param.set_lr_policy("fixed");
    param.set_max_iter(20);
    param.set_random_seed(7);
    param.set_snapshot_after_train(false);
    param.set_precision(precision);
    Context ctx(Device::Cuda(0), 7);
    ctx.MakeCurrent();
    auto solver = CreateSolver(param, &ctx);
    const float first = solver->net()->Forward();
    solver->Step(20);
    EXPECT_EQ(solver->skipped_updates(), 0);
    EXPECT_EQ(solver->loss_scale(), precision == caffe::SolverParameter::FLOAT16 ? 65536.0f : 1.0f);
    const float last = solver->net()->Forward();
    EXPECT_LT(last, first * 0.5f) << "the loss falls";
    losses.push_back(last);
    std::vector<float> w;
    for (Tensor* p : solver->net()->learnable_params()) {
      w.insert(w.end(), p->cpu_data(), p->cpu_data() + p->count());
    }
    weights.push_back(w);
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  float diff = 0.0f, scale = 0.0f;
  for (size_t i = 0; i < weights[0].size(); ++i) {
    diff = std::max(diff, std::fabs(weights[0][i] - weights[1][i]));
    scale = std::max(scale, std::fabs(weights[0][i]));
  }
  EXPECT_LT(diff, 2e-2f * scale) << "float32 loss " << losses[0] << ", float16 " << losses[1];
}

}  // namespace
}  // namespace cortado::testing
