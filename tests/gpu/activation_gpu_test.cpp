// SPDX-License-Identifier: Apache-2.0
// Element-wise activation layers on the GPU against the CPU, and their gradient checks there.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {
namespace {

// fill_bottom for inputs that must stay in [lo, hi] (Log, fractional powers).
std::function<void(int, Tensor*)> FillRange(float lo, float hi) {
  return [lo, hi](int i, Tensor* t) { FillUniform(t, lo, hi, 7 + i); };
}

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

TEST(AbsValGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("type: 'AbsVal'", {2, 3, 4, 5});
}

TEST(AbsValGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 4, 5});
  FillGaussian(&bottom);
  GradientCheckOptions options;
  options.kink = 0.0f;
  options.kink_range = 0.011f;
  GpuGradientCheck("type: 'AbsVal'", &bottom, options);
}

TEST(ELUGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (float alpha : {1.0f, 0.5f, -0.5f}) {
    SCOPED_TRACE(alpha);
    CheckBothWays(fmt::format("type: 'ELU' elu_param {{ alpha: {} }}", alpha), {2, 3, 4, 5});
  }
}

TEST(ELUGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 4, 5});
  FillGaussian(&bottom);
  GradientCheckOptions options;
  options.kink = 0.0f;
  options.kink_range = 0.011f;
  GpuGradientCheck("type: 'ELU' elu_param { alpha: 0.5 }", &bottom, options);
}

TEST(ExpGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("type: 'Exp'", {2, 3, 4, 5});
  CheckBothWays("type: 'Exp' exp_param { base: 2 scale: 0.5 shift: 1 }", {2, 3, 4, 5});
}

TEST(ExpGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2, 2});
  FillGaussian(&bottom);
  GpuGradientCheck("type: 'Exp' exp_param { base: 2 scale: 0.5 shift: 1 }", &bottom);
}

TEST(LogGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.fill_bottom = FillRange(0.5f, 2.0f);
  CheckBothWays("type: 'Log'", {2, 3, 4, 5}, options);
  CheckBothWays("type: 'Log' log_param { base: 2 scale: 0.7 shift: 0.5 }", {2, 3, 4, 5}, options);
}

TEST(LogGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2, 2});
  FillUniform(&bottom, 0.5f, 2.0f);
  GpuGradientCheck("type: 'Log' log_param { base: 2 scale: 0.7 shift: 0.5 }", &bottom);
}

TEST(PowerGpuTest, MatchesCpuEveryCase) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    float power, scale, shift, lo, hi;
  };
  // Linear, square, fractional (no shift, shifted), cube, and the constant cases (power 0,
  // scale 0) whose gradient is zero.
  const Case cases[] = {{1.0f, 0.83f, -2.4f, -1.0f, 1.0f}, {2.0f, 0.34f, -2.4f, -1.0f, 1.0f},
                        {0.37f, 0.83f, 0.0f, 0.5f, 2.0f},  {0.37f, 0.83f, 1.5f, 0.5f, 2.0f},
                        {3.0f, -0.5f, 0.2f, -1.0f, 1.0f},  {0.0f, 0.83f, 1.5f, -1.0f, 1.0f},
                        {2.5f, 0.0f, 1.5f, -1.0f, 1.0f}};
  for (const Case& c : cases) {
    const std::string text = fmt::format(
        "type: 'Power' power_param {{ power: {} scale: {} shift: {} }}", c.power, c.scale, c.shift);
    SCOPED_TRACE(text);
    GpuCheckOptions options;
    options.fill_bottom = FillRange(c.lo, c.hi);
    CheckBothWays(text, {2, 3, 4, 5}, options);
  }
}

TEST(PowerGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2, 2});
  FillUniform(&bottom, 0.5f, 2.0f);
  GpuGradientCheck("type: 'Power' power_param { power: 0.37 scale: 0.83 shift: 1.5 }", &bottom);
}

std::string PReLUText(bool shared) {
  return fmt::format(
      "type: 'PReLU' prelu_param {{ channel_shared: {} "
      "filler {{ type: 'uniform' min: 0.1 max: 0.6 }} }}",
      shared ? "true" : "false");
}

TEST(PReLUGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "channel_shared" : "per channel");
    CheckBothWays(PReLUText(shared), {2, 3, 4, 5});
    CheckBothWays(PReLUText(shared), {4, 6});  // no spatial axes
  }
}

// The slope gradient adds to what the slope diff holds, on the GPU as on the CPU.
TEST(PReLUGpuTest, SlopeGradientAccumulates) {
  CORTADO_REQUIRE_GPU();
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "channel_shared" : "per channel");
    Context cpu(Device::Cpu(), 1701), gpu(Device::Cuda(0), 1701);
    auto cpu_layer = CreateLayer(LayerParam(PReLUText(shared)), &cpu);
    auto gpu_layer = CreateLayer(LayerParam(PReLUText(shared)), &gpu);
    Tensor cpu_bottom({2, 3, 4, 5}), gpu_bottom({2, 3, 4, 5}), cpu_top, gpu_top;
    FillGaussian(&cpu_bottom);
    gpu_bottom.CopyFrom(cpu_bottom);
    cpu_layer->Initialize({&cpu_bottom}, {&cpu_top});
    gpu_layer->Initialize({&gpu_bottom}, {&gpu_top});
    gpu_layer->blobs()[0]->CopyFrom(*cpu_layer->blobs()[0]);
    for (auto* layer : {cpu_layer.get(), gpu_layer.get()}) {
      float* diff = layer->blobs()[0]->mutable_cpu_diff();
      for (int i = 0; i < layer->blobs()[0]->count(); ++i) diff[i] = 0.5f + i;
    }
    cpu_layer->Forward({&cpu_bottom}, {&cpu_top});
    gpu_layer->Forward({&gpu_bottom}, {&gpu_top});
    FillGaussian(&cpu_top, 0.0f, 1.0f, 3);
    std::copy_n(cpu_top.cpu_data(), cpu_top.count(), cpu_top.mutable_cpu_diff());
    gpu_top.CopyFrom(cpu_top, /*copy_diff=*/true);
    for (int pass = 0; pass < 2; ++pass) {
      cpu_layer->Backward({&cpu_top}, {true}, {&cpu_bottom});
      gpu_layer->Backward({&gpu_top}, {true}, {&gpu_bottom});
    }
    const Tensor& expected = *cpu_layer->blobs()[0];
    const Tensor& actual = *gpu_layer->blobs()[0];
    for (int i = 0; i < expected.count(); ++i) {
      EXPECT_NEAR(expected.cpu_diff()[i], actual.cpu_diff()[i],
                  1e-4f * std::max(1.0f, std::fabs(expected.cpu_diff()[i])))
          << "slope " << i;
    }
  }
}

TEST(PReLUGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "channel_shared" : "per channel");
    Tensor bottom({2, 3, 2, 2});
    FillUniform(&bottom, 0.1f, 1.5f);
    float* x = bottom.mutable_cpu_data();
    for (int i = 0; i < bottom.count(); i += 2) x[i] = -x[i];  // both sides, off the kink at 0
    GpuGradientCheck(PReLUText(shared), &bottom);
  }
}

TEST(SigmoidGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("type: 'Sigmoid'", {2, 3, 4, 5});
}

TEST(SigmoidGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2, 2});
  FillGaussian(&bottom);
  GpuGradientCheck("type: 'Sigmoid'", &bottom);
}

TEST(TanHGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("type: 'TanH'", {2, 3, 4, 5});
}

TEST(TanHGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2, 2});
  FillGaussian(&bottom);
  GpuGradientCheck("type: 'TanH'", &bottom);
}

std::string DropoutText(const char* phase, float ratio, bool scale_train = true) {
  return fmt::format(
      "type: 'Dropout' phase: {} dropout_param {{ dropout_ratio: {} scale_train: {} }}", phase,
      ratio, scale_train ? "true" : "false");
}

TEST(DropoutGpuTest, TestPhaseMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (bool scale_train : {true, false}) {
    SCOPED_TRACE(scale_train ? "scale_train" : "no scale_train");
    CheckBothWays(DropoutText("TEST", 0.3f, scale_train), {2, 3, 4, 5});
  }
}

// TRAIN on the GPU draws its own mask, so it is checked by its properties: the kept fraction,
// the exact scaling of kept values, Backward through the same mask, and a reseeded context
// drawing the same mask again.
TEST(DropoutGpuTest, TrainMask) {
  CORTADO_REQUIRE_GPU();
  const float ratio = 0.3f;
  for (bool scale_train : {true, false}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(fmt::format("scale_train {} in place {}", scale_train, in_place));
      const float scale = scale_train ? 1.0f / (1.0f - ratio) : 1.0f;
      Context ctx(Device::Cuda(0), 1701);
      auto layer = CreateLayer(LayerParam(DropoutText("TRAIN", ratio, scale_train)), &ctx);
      Tensor input({4, 5, 30, 20}), bottom({4, 5, 30, 20}), separate_top;
      FillUniform(&input, 1.0f, 2.0f);  // never 0, so a 0 in the top means dropped
      Tensor* top = in_place ? &bottom : &separate_top;
      layer->Initialize({&bottom}, {top});
      const int n = bottom.count();

      auto forward = [&]() {
        bottom.CopyFrom(input);
        layer->Forward({&bottom}, {top});
        return std::vector<float>(top->cpu_data(), top->cpu_data() + n);
      };
      ctx.Seed(42);
      const std::vector<float> y = forward();
      int kept = 0;
      for (int i = 0; i < n; ++i) {
        if (y[i] != 0.0f) {
          ++kept;
          ASSERT_EQ(y[i], input.cpu_data()[i] * scale) << i;
        }
      }
      EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - ratio, 0.02);

      // Backward: dy * scale where kept, 0 where dropped.
      Tensor dy_values({4, 5, 30, 20});
      FillUniform(&dy_values, -1.0f, 1.0f, 5);
      std::copy_n(dy_values.cpu_data(), n, top->mutable_cpu_diff());
      layer->Backward({top}, {true}, {&bottom});
      for (int i = 0; i < n; ++i) {
        const float expected = y[i] != 0.0f ? dy_values.cpu_data()[i] * scale : 0.0f;
        ASSERT_EQ(bottom.cpu_diff()[i], expected) << i;
      }

      // Another draw differs; the same seed repeats the first.
      EXPECT_NE(forward(), y);
      ctx.Seed(42);
      EXPECT_EQ(forward(), y);
    }
  }
}

TEST(DropoutGpuTest, ZeroRatioKeepsEverything) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  CheckBothWays(DropoutText("TRAIN", 0.0f), {2, 3, 4, 5}, options);
}

TEST(DropoutGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  // The checker reseeds the context before every forward, so every pass draws the same mask.
  Tensor bottom({2, 3, 2, 2});
  FillGaussian(&bottom);
  GpuGradientCheck(DropoutText("TRAIN", 0.4f), &bottom);
}

TEST(SoftmaxGpuTest, MatchesCpuEveryAxis) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    const char* axis;
    std::vector<int> shape;
  };
  // Inner sizes 20 and 1 run one warp per position, 64 one thread per position; 1000 classes
  // spread over the lanes.
  const Case cases[] = {{"1", {2, 3, 4, 5}}, {"-1", {2, 3, 40}}, {"1", {2, 5, 8, 8}},
                        {"0", {3, 2, 4}},    {"1", {4, 1000}},   {"1", {2, 40, 33}}};
  for (const Case& c : cases) {
    const std::string text = std::string("type: 'Softmax' softmax_param { axis: ") + c.axis + " }";
    SCOPED_TRACE(text + " shape " + fmt::format("{}", fmt::join(c.shape, "x")));
    GpuCheckOptions options;
    options.fill_bottom = [](int, Tensor* t) { FillGaussian(t, 0.0f, 3.0f, 9); };
    CheckBothWays(text, c.shape, options);
  }
}

TEST(SoftmaxGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* axis : {"1", "-1"}) {
    SCOPED_TRACE(axis);
    Tensor bottom({2, 3, 2, 2});
    FillGaussian(&bottom);
    GpuGradientCheck(std::string("type: 'Softmax' softmax_param { axis: ") + axis + " }", &bottom);
  }
}

}  // namespace
}  // namespace cortado::testing
