// SPDX-License-Identifier: Apache-2.0
// Structural, arithmetic and data layers on the GPU: each against its CPU pass (the same tops,
// bottom diffs and parameter diffs), a gradient check on a GPU context where the layer has
// gradients, and a check that results are written on the device (a layer that fell back to the
// CPU pass would leave them on the host).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data/data_test_util.hpp"
#include "data/memory_data_layer.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {
namespace {

using Head = SyncedMemory::Head;

// Runs `param` once on a GPU context and expects every top it computes and every bottom diff
// and parameter diff it writes to be left on the device (tops and bottoms that share memory
// are skipped: nothing is computed for them).
void ExpectComputedOnDevice(const caffe::LayerParameter& param,
                            const std::vector<std::vector<int>>& bottom_shapes,
                            const GpuCheckOptions& options = {}) {
  Context ctx(Device::Cuda(0), options.seed);
  std::vector<std::unique_ptr<Tensor>> store;
  std::vector<Tensor*> bottom, top;
  for (size_t i = 0; i < bottom_shapes.size(); ++i) {
    store.push_back(std::make_unique<Tensor>(bottom_shapes[i]));
    Tensor* b = store.back().get();
    if (options.fill_bottom) {
      options.fill_bottom(static_cast<int>(i), b);
    } else {
      FillUniform(b, -1.0f, 1.0f, static_cast<unsigned>(i + 1));
    }
    b->gpu_data();
    bottom.push_back(b);
  }
  for (int i = 0; i < std::max(1, param.top_size()); ++i) {
    store.push_back(std::make_unique<Tensor>());
    top.push_back(store.back().get());
  }
  auto layer = CreateLayer(param, &ctx);
  layer->Initialize(bottom, top);
  layer->Forward(bottom, top);
  for (size_t t = 0; t < top.size(); ++t) {
    bool shared = false;
    for (Tensor* b : bottom) shared |= top[t]->data() == b->data();
    if (!shared) {
      EXPECT_EQ(top[t]->data()->head(), Head::kDevice) << param.type() << " top " << t;
    }
  }
  if (options.forward_only) return;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (Tensor* t : top) {
    float* diff = t->mutable_cpu_diff();
    for (int j = 0; j < t->count(); ++j) diff[j] = uniform(rng);
    t->gpu_diff();
  }
  std::vector<bool> propagate = options.propagate_down;
  if (propagate.empty()) propagate.assign(bottom.size(), true);
  layer->Backward(top, propagate, bottom);
  for (size_t i = 0; i < bottom.size(); ++i) {
    bool shared = false;
    for (Tensor* t : top) shared |= t->diff() == bottom[i]->diff();
    if (propagate[i] && !shared) {
      EXPECT_EQ(bottom[i]->diff()->head(), Head::kDevice) << param.type() << " bottom diff " << i;
    }
  }
  for (size_t i = 0; i < layer->blobs().size(); ++i) {
    if (layer->param_propagate_down(static_cast<int>(i))) {
      EXPECT_EQ(layer->blobs()[i]->diff()->head(), Head::kDevice) << param.type() << " param " << i;
    }
  }
}

// Both checks with the same options.
void CheckLayer(const std::string& text, const std::vector<std::vector<int>>& bottom_shapes,
                const GpuCheckOptions& options = {}) {
  SCOPED_TRACE(text);
  CheckGpuMatchesCpu(LayerParam(text), bottom_shapes, options);
  ExpectComputedOnDevice(LayerParam(text), bottom_shapes, options);
}

// Fills with values from a small set, so that ties are common.
void FillDiscrete(Tensor* t, unsigned seed, int levels = 3) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, levels - 1);
  float* data = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) data[i] = 0.5f * static_cast<float>(dist(rng));
}

// ---- Concat ----------------------------------------------------------------------------------

TEST(ConcatGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckLayer("type: 'Concat'", {{2, 3, 4, 5}, {2, 2, 4, 5}});
  CheckLayer("type: 'Concat' concat_param { axis: 0 }", {{2, 3, 4}, {1, 3, 4}, {3, 3, 4}});
  CheckLayer("type: 'Concat' concat_param { axis: -1 }", {{2, 3, 4}, {2, 3, 1}, {2, 3, 7}});
  CheckLayer("type: 'Concat' concat_param { concat_dim: 2 }", {{2, 3, 4, 5}, {2, 3, 6, 5}});
  CheckLayer("type: 'Concat'", {{2, 3, 4}});  // one bottom: the top shares it
}

TEST(ConcatGpuTest, PartialPropagateDown) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {false, true, false};
  CheckLayer("type: 'Concat'", {{2, 3, 4}, {2, 5, 4}, {2, 1, 4}}, options);
}

TEST(ConcatGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor a({2, 3, 2}), b({1, 3, 2}), c({3, 3, 2}), top;
  FillGaussian(&a, 0, 1, 1);
  FillGaussian(&b, 0, 1, 2);
  FillGaussian(&c, 0, 1, 3);
  auto layer = CreateLayer(LayerParam("type: 'Concat' concat_param { axis: 0 }"), &ctx);
  GradientChecker().Check(layer.get(), {&a, &b, &c}, {&top});
}

// ---- Slice -----------------------------------------------------------------------------------

TEST(SliceGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckLayer(
      "type: 'Slice' top: 'a' top: 'b' top: 'c' slice_param { slice_point: 1 slice_point: 4 }",
      {{2, 6, 3, 4}});
  CheckLayer("type: 'Slice' top: 'a' top: 'b' slice_param { axis: -1 }", {{2, 3, 8}});
  CheckLayer("type: 'Slice' top: 'a' top: 'b' slice_param { slice_dim: 0 }", {{4, 3}});
  CheckLayer("type: 'Slice' top: 'a'", {{2, 3}});  // one top: it shares the bottom
}

TEST(SliceGpuTest, NoPropagateDown) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {false};
  CheckGpuMatchesCpu(LayerParam("type: 'Slice' top: 'a' top: 'b'"), {{2, 4, 3}}, options);
}

TEST(SliceGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 6, 3}), a, b, c;
  FillGaussian(&in);
  auto layer =
      CreateLayer(LayerParam("type: 'Slice' slice_param { slice_point: 2 slice_point: 3 }"), &ctx);
  GradientChecker().Check(layer.get(), {&in}, {&a, &b, &c});
}

// ---- Split -----------------------------------------------------------------------------------

TEST(SplitGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckLayer("type: 'Split' top: 'a' top: 'b' top: 'c'", {{2, 3, 4, 5}});
  CheckLayer("type: 'Split' top: 'a'", {{7}});
}

TEST(SplitGpuTest, TopsShareTheBottomsDeviceData) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 3}), a, b;
  FillGaussian(&in);
  auto layer = CreateLayer(LayerParam("type: 'Split'"), &ctx);
  layer->Initialize({&in}, {&a, &b});
  layer->Forward({&in}, {&a, &b});
  EXPECT_EQ(a.gpu_data(), in.gpu_data());
  EXPECT_EQ(b.gpu_data(), in.gpu_data());
}

TEST(SplitGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 3, 2}), a, b, c;
  FillGaussian(&in);
  auto layer = CreateLayer(LayerParam("type: 'Split'"), &ctx);
  GradientChecker().Check(layer.get(), {&in}, {&a, &b, &c});
}

// ---- Crop ------------------------------------------------------------------------------------

TEST(CropGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {true, false};
  CheckLayer("type: 'Crop' crop_param { offset: 1 offset: 2 }", {{2, 4, 5, 6}, {2, 4, 3, 3}},
             options);
  CheckLayer("type: 'Crop' crop_param { axis: 1 offset: 1 }", {{2, 4, 5, 6}, {2, 2, 3, 4}},
             options);
  CheckLayer("type: 'Crop' crop_param { axis: 0 }", {{3, 4, 5}, {2, 4, 2, 9}}, options);
  CheckLayer("type: 'Crop' crop_param { axis: -1 offset: 3 }", {{2, 3, 9}, {1, 1, 4}}, options);
}

TEST(CropGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 3, 4, 5}), ref({2, 3, 2, 3}), top;
  FillGaussian(&in);
  auto layer = CreateLayer(LayerParam("type: 'Crop' crop_param { offset: 1 offset: 2 }"), &ctx);
  GradientCheckOptions options;
  options.check_bottoms = {0};
  GradientChecker(options).Check(layer.get(), {&in, &ref}, {&top});
}

// ---- Eltwise ---------------------------------------------------------------------------------

TEST(EltwiseGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  const std::vector<std::vector<int>> shapes = {{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}};
  CheckLayer("type: 'Eltwise'", shapes);
  CheckLayer("type: 'Eltwise' eltwise_param { operation: SUM coeff: 1 coeff: -0.5 coeff: 2 }",
             shapes);
  CheckLayer("type: 'Eltwise' eltwise_param { operation: PROD }", shapes);
  CheckLayer("type: 'Eltwise' eltwise_param { operation: MAX }", shapes);
  CheckLayer("type: 'Eltwise' eltwise_param { operation: MAX }", {{3, 7}, {3, 7}});
}

TEST(EltwiseGpuTest, UnstableProdMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.fill_bottom = [](int i, Tensor* t) { FillUniform(t, 0.5f, 1.5f, i + 1); };
  CheckLayer("type: 'Eltwise' eltwise_param { operation: PROD stable_prod_grad: false }",
             {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, options);
}

TEST(EltwiseGpuTest, MaxTiesMatchCpu) {
  CORTADO_REQUIRE_GPU();
  // Three levels over four bottoms: many ties, which go to bottom 1 between the first two and
  // to the earlier bottom after that.
  GpuCheckOptions options;
  options.fill_bottom = [](int i, Tensor* t) { FillDiscrete(t, i + 1); };
  CheckLayer("type: 'Eltwise' eltwise_param { operation: MAX }",
             {{4, 50}, {4, 50}, {4, 50}, {4, 50}}, options);
}

TEST(EltwiseGpuTest, PartialPropagateDown) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {true, false, true};
  for (const char* op : {"SUM", "PROD", "MAX"}) {
    CheckLayer(std::string("type: 'Eltwise' eltwise_param { operation: ") + op + " }",
               {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, options);
  }
}

void CheckEltwiseGradient(const std::string& eltwise_param, float step = 1e-2f) {
  SCOPED_TRACE(eltwise_param);
  Context ctx(Device::Cuda(0), 1701);
  Tensor a({2, 3, 2, 2}), b({2, 3, 2, 2}), c({2, 3, 2, 2}), top;
  FillUniform(&a, 0.5f, 1.5f, 1);
  FillUniform(&b, -1.5f, 1.5f, 2);
  FillUniform(&c, -1.5f, -0.5f, 3);
  // Keep a and b well apart so that MAX has no near-ties within the step.
  for (int i = 0; i < a.count(); ++i) {
    float& x = b.mutable_cpu_data()[i];
    if (std::fabs(x - a.cpu_data()[i]) < 0.1f) x += 0.2f;
  }
  auto layer =
      CreateLayer(LayerParam("type: 'Eltwise' eltwise_param { " + eltwise_param + " }"), &ctx);
  GradientCheckOptions options;
  options.step = step;
  GradientChecker(options).Check(layer.get(), {&a, &b, &c}, {&top});
}

TEST(EltwiseGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  CheckEltwiseGradient("operation: PROD");
  CheckEltwiseGradient("operation: PROD stable_prod_grad: false");
  CheckEltwiseGradient("operation: SUM coeff: 1 coeff: -0.5 coeff: 2");
  CheckEltwiseGradient("operation: MAX", 1e-3f);
}

// ---- Silence ---------------------------------------------------------------------------------

TEST(SilenceGpuTest, BackwardZeroesTheDiffsAskedFor) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor a({2, 3}), b({4});
  std::fill_n(a.mutable_cpu_diff(), a.count(), 5.0f);
  std::fill_n(b.mutable_cpu_diff(), b.count(), 7.0f);
  a.gpu_diff();
  b.gpu_diff();
  auto layer = CreateLayer(LayerParam("type: 'Silence'"), &ctx);
  layer->Initialize({&a, &b}, {});
  layer->Forward({&a, &b}, {});
  layer->Backward({}, {true, false}, {&a, &b});
  EXPECT_EQ(a.diff()->head(), Head::kDevice);
  for (int i = 0; i < a.count(); ++i) EXPECT_EQ(a.cpu_diff()[i], 0.0f);
  for (int i = 0; i < b.count(); ++i) EXPECT_EQ(b.cpu_diff()[i], 7.0f);
}

TEST(SilenceGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor a({2, 3});
  FillGaussian(&a);
  auto layer = CreateLayer(LayerParam("type: 'Silence'"), &ctx);
  GradientChecker().Check(layer.get(), {&a}, {});
}

// ---- Bias ------------------------------------------------------------------------------------

constexpr const char* kBias = "type: 'Bias' bias_param { filler { type: 'gaussian' } ";

TEST(BiasGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckLayer(std::string(kBias) + "}", {{2, 3, 4, 5}});
  CheckLayer(std::string(kBias) + "axis: 1 num_axes: 2 }", {{2, 3, 4, 5}});
  CheckLayer(std::string(kBias) + "num_axes: 0 }", {{2, 3, 4}});
  CheckLayer(std::string(kBias) + "axis: -1 }", {{2, 3, 4}});
  CheckLayer("type: 'Bias'", {{2, 3, 4}, {3, 4}});
  CheckLayer("type: 'Bias' bias_param { axis: 0 }", {{2, 3, 4}, {2, 3, 4}});
  CheckLayer("type: 'Bias'", {{2, 3, 4}, {}});  // a scalar second bottom
}

TEST(BiasGpuTest, LargeSlicesMatchCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.tolerance = 1e-3f;
  CheckLayer(std::string(kBias) + "}", {{4, 16, 32, 32}}, options);  // 4096 terms per value
  CheckLayer(std::string(kBias) + "}", {{512, 64}}, options);        // strided sums
  CheckLayer(std::string(kBias) + "num_axes: 0 }", {{8, 3, 40, 40}}, options);
}

TEST(BiasGpuTest, InPlaceMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.in_place = true;
  CheckGpuMatchesCpu(LayerParam(std::string(kBias) + "}"), {{2, 3, 4, 5}}, options);
}

TEST(BiasGpuTest, SecondBottomWithoutPropagateDown) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {true, false};
  CheckLayer("type: 'Bias'", {{2, 3, 4}, {3}}, options);
  options.propagate_down = {false, true};
  CheckLayer("type: 'Bias'", {{2, 3, 4}, {3}}, options);
}

TEST(BiasGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  {
    Context ctx(Device::Cuda(0), 1701);
    Tensor in({2, 3, 4}), top;
    FillGaussian(&in);
    auto layer = CreateLayer(LayerParam(std::string(kBias) + "}"), &ctx);
    GradientChecker().Check(layer.get(), {&in}, {&top});
  }
  {
    Context ctx(Device::Cuda(0), 1701);
    Tensor in({2, 3, 4}), bias({3, 4}), top;
    FillGaussian(&in, 0, 1, 1);
    FillGaussian(&bias, 0, 1, 2);
    auto layer = CreateLayer(LayerParam("type: 'Bias'"), &ctx);
    GradientChecker().Check(layer.get(), {&in, &bias}, {&top});
  }
}

// ---- Scale -----------------------------------------------------------------------------------

constexpr const char* kScale =
    "type: 'Scale' scale_param { filler { type: 'gaussian' } bias_filler { type: 'gaussian' } ";

TEST(ScaleGpuTest, LearnedMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckLayer(std::string(kScale) + "}", {{2, 3, 4, 5}});
  CheckLayer(std::string(kScale) + "bias_term: true }", {{2, 3, 4, 5}});
  CheckLayer(std::string(kScale) + "axis: 1 num_axes: 2 bias_term: true }", {{2, 3, 4, 5}});
  CheckLayer(std::string(kScale) + "num_axes: 0 bias_term: true }", {{2, 3, 4}});
  CheckLayer(std::string(kScale) + "axis: -1 num_axes: -1 }", {{2, 3, 4}});
}

TEST(ScaleGpuTest, SecondBottomMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckLayer(std::string(kScale) + "}", {{2, 3, 2, 2}, {3, 2}});
  CheckLayer(std::string(kScale) + "bias_term: true }", {{2, 3, 2, 2}, {3}});
  CheckLayer(std::string(kScale) + "axis: 0 }", {{2, 3, 2, 2}, {2, 3, 2, 2}});
  CheckLayer(std::string(kScale) + "bias_term: true }", {{2, 3, 2, 2}, {}});
}

TEST(ScaleGpuTest, PartialPropagateDown) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {true, false};
  CheckLayer(std::string(kScale) + "bias_term: true }", {{2, 3, 4}, {3}}, options);
  options.propagate_down = {false, true};
  CheckLayer(std::string(kScale) + "bias_term: true }", {{2, 3, 4}, {3}}, options);
}

TEST(ScaleGpuTest, InPlaceMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.in_place = true;
  CheckGpuMatchesCpu(LayerParam(std::string(kScale) + "bias_term: true }"), {{2, 3, 4, 5}},
                     options);
  CheckGpuMatchesCpu(LayerParam(std::string(kScale) + "num_axes: 0 }"), {{2, 3, 4}}, options);
}

TEST(ScaleGpuTest, LargeSlicesMatchCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.tolerance = 1e-3f;
  CheckLayer(std::string(kScale) + "bias_term: true }", {{4, 16, 32, 32}}, options);
  CheckLayer(std::string(kScale) + "bias_term: true }", {{512, 64}}, options);
  CheckLayer(std::string(kScale) + "}", {{4, 16, 32, 32}, {16}}, options);
}

// ResNet-50 shapes (float4 and scalar paths, many blocks per slice), in place as in the net.
TEST(ScaleGpuTest, ResNetShapesMatchCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.tolerance = 1e-3f;
  for (const std::vector<int>& shape :
       std::vector<std::vector<int>>{{8, 64, 56, 56}, {32, 2048, 7, 7}, {16, 3, 45, 45}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    CheckLayer(std::string(kScale) + "bias_term: true }", {shape}, options);
    GpuCheckOptions in_place = options;
    in_place.in_place = true;
    CheckGpuMatchesCpu(LayerParam(std::string(kScale) + "bias_term: true }"), {shape}, in_place);
  }
  // Parameter gradients only, and the bottom gradient only.
  GpuCheckOptions no_bottom = options;
  no_bottom.propagate_down = {false};
  CheckLayer(std::string(kScale) + "bias_term: true }", {{8, 64, 56, 56}}, no_bottom);
  options.propagate_down = {true, false};
  CheckLayer(std::string(kScale) + "}", {{32, 2048, 7, 7}, {2048}}, options);
}

void CheckScaleGradient(const std::string& scale_param, const std::vector<int>& scale_shape,
                        bool second_bottom) {
  SCOPED_TRACE(scale_param);
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 3, 2, 2}), scale(scale_shape), top;
  FillGaussian(&in, 0, 1, 1);
  FillGaussian(&scale, 0, 1, 2);
  auto layer = CreateLayer(LayerParam(std::string(kScale) + scale_param + " }"), &ctx);
  std::vector<Tensor*> bottom = {&in};
  if (second_bottom) bottom.push_back(&scale);
  GradientChecker().Check(layer.get(), bottom, {&top});
}

TEST(ScaleGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  CheckScaleGradient("bias_term: true", {}, false);
  CheckScaleGradient("axis: 1 num_axes: 2 bias_term: true", {}, false);
  CheckScaleGradient("num_axes: 0 bias_term: true", {}, false);
  CheckScaleGradient("bias_term: true", {3}, true);
  CheckScaleGradient("axis: 0", {2, 3, 2, 2}, true);
  CheckScaleGradient("", {}, true);
}

// ---- Accuracy --------------------------------------------------------------------------------

// Scores with ties, and labels in [0, classes) (bottom 1), or `ignore` at every fifth position.
GpuCheckOptions AccuracyOptions(int classes, int ignore = -100) {
  GpuCheckOptions options;
  options.forward_only = true;
  options.fill_bottom = [classes, ignore](int i, Tensor* t) {
    if (i == 0) {
      FillDiscrete(t, 11, 5);
      return;
    }
    std::mt19937 rng(12);
    std::uniform_int_distribution<int> dist(0, classes - 1);
    float* data = t->mutable_cpu_data();
    for (int j = 0; j < t->count(); ++j) {
      data[j] = static_cast<float>(j % 5 == 4 && ignore != -100 ? ignore : dist(rng));
    }
  };
  return options;
}

TEST(AccuracyGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckLayer("type: 'Accuracy'", {{20, 6}, {20}}, AccuracyOptions(6));
  CheckLayer("type: 'Accuracy' accuracy_param { top_k: 3 }", {{20, 6}, {20}}, AccuracyOptions(6));
  CheckLayer("type: 'Accuracy' top: 'acc' top: 'per_class' accuracy_param { top_k: 2 }",
             {{30, 7}, {30}}, AccuracyOptions(7));
  CheckLayer("type: 'Accuracy' top: 'acc' top: 'per_class' accuracy_param { ignore_label: 2 }",
             {{30, 7}, {30}}, AccuracyOptions(7, 2));
  // Class axis 1 with positions on the axes after it.
  CheckLayer("type: 'Accuracy' top: 'acc' top: 'per_class'", {{2, 5, 3, 4}, {2, 3, 4}},
             AccuracyOptions(5));
  CheckLayer("type: 'Accuracy' accuracy_param { axis: 2 top_k: 2 }", {{3, 2, 6}, {3, 2}},
             AccuracyOptions(6));
  // Every label ignored: accuracy 0.
  CheckLayer("type: 'Accuracy' accuracy_param { ignore_label: 0 }", {{4, 1}, {4}},
             AccuracyOptions(1));
}

TEST(AccuracyGpuTest, LabelOutOfRangeThrows) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor score({4, 3}), label({4}), acc;
  FillGaussian(&score);
  const float labels[] = {0, 2, 3, 1};
  std::copy(labels, labels + 4, label.mutable_cpu_data());
  auto layer = CreateLayer(LayerParam("name: 'acc' type: 'Accuracy'"), &ctx);
  layer->Initialize({&score, &label}, {&acc});
  try {
    layer->Forward({&score, &label}, {&acc});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("label value 3 at position 2"), std::string::npos) << msg;
  }
}

// ---- ArgMax ----------------------------------------------------------------------------------

TEST(ArgMaxGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.forward_only = true;
  CheckLayer("type: 'ArgMax'", {{10, 20}}, options);
  CheckLayer("type: 'ArgMax' argmax_param { top_k: 3 out_max_val: true }", {{10, 4, 5}}, options);
  CheckLayer("type: 'ArgMax' argmax_param { top_k: 5 }", {{3, 1000}}, options);
  CheckLayer("type: 'ArgMax' argmax_param { axis: 1 top_k: 2 }", {{2, 6, 3, 4}}, options);
  CheckLayer("type: 'ArgMax' argmax_param { axis: 1 out_max_val: true }", {{2, 6, 3, 4}}, options);
  CheckLayer("type: 'ArgMax' argmax_param { axis: -1 top_k: 4 out_max_val: true }", {{2, 3, 9}},
             options);
  CheckLayer("type: 'ArgMax' argmax_param { axis: 0 top_k: 2 }", {{5, 7}}, options);
  CheckLayer("type: 'ArgMax'", {{2, 3, 4, 5, 2}}, options);
}

TEST(ArgMaxGpuTest, TiesMatchCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.forward_only = true;
  options.fill_bottom = [](int, Tensor* t) { FillDiscrete(t, 5); };
  CheckLayer("type: 'ArgMax' argmax_param { top_k: 4 out_max_val: true }", {{6, 40}}, options);
  CheckLayer("type: 'ArgMax' argmax_param { axis: 1 top_k: 3 }", {{2, 8, 3, 5}}, options);
  CheckLayer("type: 'ArgMax' argmax_param { top_k: 100 }", {{2, 100}}, options);
}

// ---- Flatten and Reshape ---------------------------------------------------------------------

TEST(FlattenGpuTest, SharesTheBottomOnTheDevice) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 3, 4, 5}), top;
  FillGaussian(&in);
  auto layer = CreateLayer(LayerParam("type: 'Flatten'"), &ctx);
  layer->Initialize({&in}, {&top});
  layer->Forward({&in}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 60}));
  EXPECT_EQ(top.gpu_data(), in.gpu_data());
  EXPECT_EQ(top.gpu_diff(), in.gpu_diff());
  CheckGpuMatchesCpu(LayerParam("type: 'Flatten' flatten_param { axis: 1 end_axis: 2 }"),
                     {{2, 3, 4, 5}});
}

TEST(FlattenGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 3, 2, 2}), top;
  FillGaussian(&in);
  auto layer = CreateLayer(LayerParam("type: 'Flatten'"), &ctx);
  GradientChecker().Check(layer.get(), {&in}, {&top});
}

TEST(ReshapeGpuTest, SharesTheBottomOnTheDevice) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 3, 4}), top;
  FillGaussian(&in);
  auto layer =
      CreateLayer(LayerParam("type: 'Reshape' reshape_param { shape { dim: 0 dim: -1 } }"), &ctx);
  layer->Initialize({&in}, {&top});
  layer->Forward({&in}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 12}));
  EXPECT_EQ(top.gpu_data(), in.gpu_data());
  EXPECT_EQ(top.gpu_diff(), in.gpu_diff());
  CheckGpuMatchesCpu(LayerParam("type: 'Reshape' reshape_param { shape { dim: 4 dim: -1 } }"),
                     {{2, 3, 4}});
}

TEST(ReshapeGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor in({2, 6}), top;
  FillGaussian(&in);
  auto layer =
      CreateLayer(LayerParam("type: 'Reshape' reshape_param { shape { dim: 3 dim: 4 } }"), &ctx);
  GradientChecker().Check(layer.get(), {&in}, {&top});
}

// ---- Input and DummyData ---------------------------------------------------------------------

TEST(InputGpuTest, ForwardLeavesTheTopsAlone) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor a, b;
  auto layer = CreateLayer(
      LayerParam("type: 'Input' input_param { shape { dim: 2 dim: 3 } shape { dim: 4 } }"), &ctx);
  layer->Initialize({}, {&a, &b});
  ASSERT_EQ(a.shape(), (std::vector<int>{2, 3}));
  ASSERT_EQ(b.shape(), (std::vector<int>{4}));
  FillGaussian(&a, 0, 1, 3);
  const std::vector<float> before(a.cpu_data(), a.cpu_data() + a.count());
  a.gpu_data();
  layer->Forward({}, {&a, &b});
  layer->Backward({&a, &b}, {}, {});
  EXPECT_EQ(std::vector<float>(a.cpu_data(), a.cpu_data() + a.count()), before);
}

TEST(DummyDataGpuTest, ConstantMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.forward_only = true;
  CheckGpuMatchesCpu(LayerParam("type: 'DummyData' top: 'a' top: 'b' dummy_data_param { "
                                "shape { dim: 2 dim: 3 } shape { dim: 5 } "
                                "data_filler { type: 'constant' value: 1.5 } "
                                "data_filler { type: 'constant' value: -2 } }"),
                     {}, options);
}

TEST(DummyDataGpuTest, UniformAndGaussianAreDrawnOnTheDevice) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor u, g, c;
  auto layer = CreateLayer(LayerParam("type: 'DummyData' dummy_data_param { "
                                      "shape { dim: 100 dim: 100 } "
                                      "data_filler { type: 'uniform' min: 2 max: 3 } "
                                      "data_filler { type: 'gaussian' mean: -1 std: 0.5 } "
                                      "data_filler { type: 'constant' value: 4 } }"),
                           &ctx);
  layer->Initialize({}, {&u, &g, &c});
  ctx.Seed(7);
  layer->Forward({}, {&u, &g, &c});
  EXPECT_EQ(u.data()->head(), Head::kDevice);
  EXPECT_EQ(g.data()->head(), Head::kDevice);
  const int n = u.count();
  double u_sum = 0, g_sum = 0, g_sq = 0;
  for (int i = 0; i < n; ++i) {
    const float x = u.cpu_data()[i];
    ASSERT_GE(x, 2.0f);
    ASSERT_LE(x, 3.0f);
    u_sum += x;
    g_sum += g.cpu_data()[i];
    g_sq += (g.cpu_data()[i] + 1.0) * (g.cpu_data()[i] + 1.0);
    ASSERT_EQ(c.cpu_data()[i], 4.0f);
  }
  EXPECT_NEAR(u_sum / n, 2.5, 0.02);
  EXPECT_NEAR(g_sum / n, -1.0, 0.02);
  EXPECT_NEAR(std::sqrt(g_sq / n), 0.5, 0.02);
  // The same seed gives the same tops; the next Forward gives new ones.
  const std::vector<float> first(u.cpu_data(), u.cpu_data() + n);
  layer->Forward({}, {&u, &g, &c});
  EXPECT_NE(std::vector<float>(u.cpu_data(), u.cpu_data() + n), first);
  ctx.Seed(7);
  layer->Forward({}, {&u, &g, &c});
  EXPECT_EQ(std::vector<float>(u.cpu_data(), u.cpu_data() + n), first);
}

TEST(DummyDataGpuTest, OtherFillersRunOnTheHost) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  Tensor x;
  auto layer = CreateLayer(LayerParam("type: 'DummyData' dummy_data_param { "
                                      "shape { dim: 10 dim: 30 } data_filler { type: 'xavier' } }"),
                           &ctx);
  layer->Initialize({}, {&x});
  layer->Forward({}, {&x});
  const float limit = std::sqrt(3.0f / 30.0f);
  bool any_nonzero = false;
  for (int i = 0; i < x.count(); ++i) {
    ASSERT_LE(std::fabs(x.cpu_data()[i]), limit);
    any_nonzero |= x.cpu_data()[i] != 0.0f;
  }
  EXPECT_TRUE(any_nonzero);
}

// ---- Data layers -----------------------------------------------------------------------------

TEST(MemoryDataGpuTest, CopiesBatchesToTheDevice) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  auto layer = CreateLayer(LayerParam("type: 'MemoryData' top: 'data' top: 'label' "
                                      "memory_data_param { batch_size: 2 channels: 1 height: 2 "
                                      "width: 3 }"),
                           &ctx);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  std::vector<float> values(4 * 6), labels(4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>(10 + i);
  static_cast<MemoryDataLayer*>(layer.get())->Reset(values.data(), labels.data(), 4);
  // Batches of samples (0 1), (2 3), then (0 1) again.
  for (int batch : {0, 1, 0}) {
    layer->Forward({}, {&data, &label});
    EXPECT_EQ(data.data()->head(), Head::kDevice);
    EXPECT_EQ(label.data()->head(), Head::kDevice);
    ASSERT_EQ(data.shape(), (std::vector<int>{2, 1, 2, 3}));
    ASSERT_EQ(label.shape(), (std::vector<int>{2}));
    for (int i = 0; i < 12; ++i) EXPECT_EQ(data.cpu_data()[i], values[batch * 12 + i]);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(label.cpu_data()[i], labels[batch * 2 + i]);
  }
}

TEST(DataGpuTest, LmdbBatchesReachTheDeviceAsOnTheCpu) {
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  const std::string db = dir / "db";
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < 5; ++i) {
    caffe::Datum datum;
    datum.set_channels(2);
    datum.set_height(3);
    datum.set_width(4);
    datum.set_label(i);
    std::string bytes(24, '\0');
    for (int j = 0; j < 24; ++j) bytes[j] = static_cast<char>(i * 30 + j);
    datum.set_data(bytes);
    char key[16];
    std::snprintf(key, sizeof(key), "%08d", i);
    records.emplace_back(key, datum.SerializeAsString());
  }
  WriteLmdb(db, records);
  const std::string text =
      "type: 'Data' top: 'data' top: 'label' data_param { source: '" + db +
      "' backend: LMDB batch_size: 2 } transform_param { scale: 0.5 mirror: true crop_size: 2 }";
  Context cpu(Device::Cpu(), 1701), gpu(Device::Cuda(0), 1701);
  auto cpu_layer = CreateLayer(LayerParam(text), &cpu);
  auto gpu_layer = CreateLayer(LayerParam(text), &gpu);
  Tensor cpu_data, cpu_label, gpu_data, gpu_label;
  cpu_layer->Initialize({}, {&cpu_data, &cpu_label});
  gpu_layer->Initialize({}, {&gpu_data, &gpu_label});
  // Batches (0 1), (2 3), (4 0), (1 2), (3 4), (0 1): the staging memory is reused.
  for (int batch = 0; batch < 6; ++batch) {
    SCOPED_TRACE(batch);
    cpu_layer->Forward({}, {&cpu_data, &cpu_label});
    gpu_layer->Forward({}, {&gpu_data, &gpu_label});
    EXPECT_EQ(gpu_data.data()->head(), Head::kDevice);
    EXPECT_EQ(gpu_label.data()->head(), Head::kDevice);
    ASSERT_EQ(gpu_data.shape(), (std::vector<int>{2, 2, 2, 2}));
    ASSERT_EQ(gpu_data.shape(), cpu_data.shape());
    EXPECT_EQ(std::vector<float>(gpu_data.cpu_data(), gpu_data.cpu_data() + gpu_data.count()),
              std::vector<float>(cpu_data.cpu_data(), cpu_data.cpu_data() + cpu_data.count()));
    const float expected_labels[] = {static_cast<float>((2 * batch) % 5),
                                     static_cast<float>((2 * batch + 1) % 5)};
    EXPECT_EQ(gpu_label.cpu_data()[0], expected_labels[0]);
    EXPECT_EQ(gpu_label.cpu_data()[1], expected_labels[1]);
  }
  gpu_layer->Backward({&gpu_data, &gpu_label}, {}, {});
  // Seek restarts the stream; the device copy follows it.
  gpu_layer->Seek(1);
  gpu_layer->Forward({}, {&gpu_data, &gpu_label});
  EXPECT_EQ(gpu_label.cpu_data()[0], 2.0f);
  EXPECT_EQ(gpu_label.cpu_data()[1], 3.0f);
}

}  // namespace
}  // namespace cortado::testing
