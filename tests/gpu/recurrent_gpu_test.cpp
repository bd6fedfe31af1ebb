// SPDX-License-Identifier: Apache-2.0
// The recurrent layers (LSTMUnit, LSTM, RNN) on the GPU against the CPU, including parameter
// gradients, the state carried between Forwards, and gradient checks on the GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "layers/recurrent_layer.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {
namespace {

void SetValues(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

// Bottom `cont_index` gets `cont`; the others uniform values in [-1, 1].
std::function<void(int, Tensor*)> FillWithCont(int cont_index, std::vector<float> cont) {
  return [cont_index, cont](int i, Tensor* t) {
    if (i == cont_index) {
      SetValues(t, cont);
    } else {
      FillUniform(t, -1.0f, 1.0f, 11 + i);
    }
  };
}

std::string RecurrentText(const char* type, bool expose_hidden, int num_tops) {
  std::string tops;
  for (int i = 0; i < num_tops; ++i) tops += fmt::format(" top: 't{}'", i);
  return fmt::format(
      "name: 'r' type: '{}'{} recurrent_param {{ num_output: 4 expose_hidden: {} "
      "weight_filler {{ type: 'uniform' min: -0.5 max: 0.5 }} "
      "bias_filler {{ type: 'uniform' min: -0.3 max: 0.3 }} }}",
      type, tops, expose_hidden ? "true" : "false");
}

// T = 5, N = 3, x 5 x 3 x 6: streams start at t = 0 and stream 2 again at t = 3.
const std::vector<float> kCont = {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1};
const std::vector<float> kContOn = std::vector<float>(15, 1.0f);

TEST(LSTMUnitGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {true, true, false};
  options.fill_bottom = FillWithCont(2, {1.0f, 0.0f, 0.5f, 1.0f});
  CheckGpuMatchesCpu(LayerParam("name: 'unit' type: 'LSTMUnit' top: 'c' top: 'h'"),
                     {{1, 4, 5}, {1, 4, 20}, {1, 4}}, options);
}

TEST(LSTMUnitGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam("name: 'unit' type: 'LSTMUnit'"), &ctx);
  Tensor c_prev({1, 3, 2}), x({1, 3, 8}), cont({1, 3}), c, h;
  FillGaussian(&c_prev, 0.0f, 1.0f, 3);
  FillGaussian(&x, 0.0f, 1.0f, 4);
  SetValues(&cont, {1.0f, 0.0f, 0.5f});
  GradientCheckOptions options;
  options.check_bottoms = {0, 1};
  GradientChecker(options).Check(layer.get(), {&c_prev, &x, &cont}, {&c, &h});
}

void CheckRecurrentMatchesCpu(const char* type, int num_states) {
  GpuCheckOptions options;
  options.tolerance = 2e-4f;
  SCOPED_TRACE(type);
  {
    SCOPED_TRACE("x and cont");
    options.propagate_down = {true, false};
    options.fill_bottom = FillWithCont(1, kCont);
    CheckGpuMatchesCpu(LayerParam(RecurrentText(type, false, 1)), {{5, 3, 6}, {5, 3}}, options);
  }
  {
    SCOPED_TRACE("static input and exposed states");
    std::vector<std::vector<int>> shapes = {{5, 3, 6}, {5, 3}, {3, 2, 2}};
    for (int s = 0; s < num_states; ++s) shapes.push_back({1, 3, 4});
    options.propagate_down.assign(shapes.size(), true);
    options.propagate_down[1] = false;
    options.fill_bottom = FillWithCont(1, kContOn);
    CheckGpuMatchesCpu(LayerParam(RecurrentText(type, true, 1 + num_states)), shapes, options);
  }
}

TEST(LSTMGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckRecurrentMatchesCpu("LSTM", 2);
}

TEST(RNNGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckRecurrentMatchesCpu("RNN", 1);
}

// Three Forwards on each device (the last after Reset), carrying the state between them.
void CheckCarryOverMatchesCpu(const char* type) {
  SCOPED_TRACE(type);
  Context cpu(Device::Cpu(), 1701);
  Context gpu(Device::Cuda(0), 1701);
  const caffe::LayerParameter param = LayerParam(RecurrentText(type, false, 1));
  auto cpu_layer = CreateLayer(param, &cpu);
  auto gpu_layer = CreateLayer(param, &gpu);
  Tensor x({5, 3, 6}), cont({5, 3}), cpu_top, gpu_x({5, 3, 6}), gpu_cont({5, 3}), gpu_top;
  cpu_layer->Initialize({&x, &cont}, {&cpu_top});
  gpu_layer->Initialize({&gpu_x, &gpu_cont}, {&gpu_top});
  for (size_t i = 0; i < cpu_layer->blobs().size(); ++i) {
    gpu_layer->blobs()[i]->CopyFrom(*cpu_layer->blobs()[i]);
  }
  for (int pass = 0; pass < 3; ++pass) {
    SCOPED_TRACE(pass);
    FillUniform(&x, -1.0f, 1.0f, 20 + pass);
    SetValues(&cont, pass == 0 ? kCont : kContOn);
    gpu_x.CopyFrom(x);
    gpu_cont.CopyFrom(cont);
    if (pass == 2) {
      static_cast<RecurrentLayer*>(cpu_layer.get())->Reset();
      static_cast<RecurrentLayer*>(gpu_layer.get())->Reset();
    }
    cpu_layer->Forward({&x, &cont}, {&cpu_top});
    gpu_layer->Forward({&gpu_x, &gpu_cont}, {&gpu_top});
    ASSERT_EQ(cpu_top.shape(), gpu_top.shape());
    for (int i = 0; i < cpu_top.count(); ++i) {
      EXPECT_NEAR(cpu_top.cpu_data()[i], gpu_top.cpu_data()[i], 2e-4f) << i;
    }
  }
}

TEST(LSTMGpuTest, CarryOverMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckCarryOverMatchesCpu("LSTM");
}

TEST(RNNGpuTest, CarryOverMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckCarryOverMatchesCpu("RNN");
}

// Gradient check on the GPU with a static input and exposed states (every bottom but cont, and
// every parameter).
void GpuRecurrentGradientCheck(const char* type, int num_states) {
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam(RecurrentText(type, true, 0)), &ctx);
  std::vector<std::unique_ptr<Tensor>> store;
  auto add = [&](const std::vector<int>& shape) {
    store.push_back(std::make_unique<Tensor>(shape));
    return store.back().get();
  };
  std::vector<Tensor*> bottom = {add({3, 2, 3}), add({3, 2}), add({2, 2})};
  for (int s = 0; s < num_states; ++s) bottom.push_back(add({1, 2, 4}));
  std::vector<Tensor*> top;
  for (int t = 0; t < 1 + num_states; ++t) top.push_back(add({}));
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (i != 1) FillGaussian(bottom[i], 0.0f, 1.0f, 30 + static_cast<unsigned>(i));
  }
  SetValues(bottom[1], {1, 1, 1, 0, 1, 1});
  GradientCheckOptions options;
  for (int i = 0; i < static_cast<int>(bottom.size()); ++i) {
    if (i != 1) options.check_bottoms.push_back(i);
  }
  GradientChecker(options).Check(layer.get(), bottom, top);
}

TEST(LSTMGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  GpuRecurrentGradientCheck("LSTM", 2);
}

TEST(RNNGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  GpuRecurrentGradientCheck("RNN", 1);
}

}  // namespace
}  // namespace cortado::testing
