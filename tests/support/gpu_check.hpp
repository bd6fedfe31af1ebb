// SPDX-License-Identifier: Apache-2.0
// GPU tests: skip without a CUDA device, and check that a layer computes on the GPU what it
// computes on the CPU.
//
// CheckGpuMatchesCpu builds the layer twice from one LayerParameter, once on a CPU context and
// once on a GPU context, gives both the same bottoms, parameters and top diffs, runs Forward and
// Backward on each, and compares tops, bottom diffs and parameter diffs element by element
// within `tolerance` (absolute, or relative to the larger magnitude when that exceeds 1).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/tensor.hpp"
#include "layers/layer.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {

inline bool GpuAvailable() { return Context::CudaDeviceCount() > 0; }

// First statement of every GPU test.
#define CORTADO_REQUIRE_GPU()                                                       \
  do {                                                                              \
    if (!::cortado::testing::GpuAvailable())                                        \
      GTEST_SKIP() << "no CUDA device (or a build without CUDA): GPU test skipped"; \
  } while (0)

struct GpuCheckOptions {
  float tolerance = 1e-4f;
  // Bottoms to propagate to (empty: all).
  std::vector<bool> propagate_down;
  // Fills bottom i (default: uniform in [-1, 1]); labels and the like need their own values.
  std::function<void(int, Tensor*)> fill_bottom;
  // Run with top == bottom (single-bottom layers that allow it).
  bool in_place = false;
  // Skip the backward pass (layers without one, such as Accuracy).
  bool forward_only = false;
  int64_t seed = 1701;
  // Let the GPU side use TF32 tensor cores (Context::set_allow_tf32).
  bool allow_tf32 = false;
  // The GPU side's mixed precision (Context::set_half_compute).
  Context::HalfType half = Context::HalfType::kNone;
  // With `half`: the GPU side's bottoms and tops keep their values in it (Tensor::set_home_type),
  // as a net's half blobs do; else they are float32 and the layer reads and writes their twins.
  bool half_homes = false;
  // With half_homes: the GPU side's 4-D bottoms and tops kept channels-last (Tensor::home_nhwc).
  bool nhwc_bottoms = false;
  bool nhwc_tops = false;
};

namespace detail {

inline void ExpectClose(const float* expected, const float* actual, int count, float tolerance,
                        const std::string& what) {
  int failures = 0;
  for (int i = 0; i < count && failures < 10; ++i) {
    const float scale = std::max({std::fabs(expected[i]), std::fabs(actual[i]), 1.0f});
    const bool close = std::fabs(expected[i] - actual[i]) <= tolerance * scale;
    if (!close || std::isnan(actual[i]) != std::isnan(expected[i])) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": CPU " << expected[i] << ", GPU " << actual[i];
    }
  }
}

}  // namespace detail

inline void CheckGpuMatchesCpu(const caffe::LayerParameter& param,
                               const std::vector<std::vector<int>>& bottom_shapes,
                               const GpuCheckOptions& options = {}) {
  Context cpu(Device::Cpu(), options.seed);
  Context gpu(Device::Cuda(0), options.seed);
  gpu.set_allow_tf32(options.allow_tf32);
  gpu.set_half_compute(options.half);
  const int num_bottoms = static_cast<int>(bottom_shapes.size());
  std::vector<std::unique_ptr<Tensor>> cpu_bottom_store, gpu_bottom_store;
  std::vector<Tensor*> cpu_bottom, gpu_bottom;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int i = 0; i < num_bottoms; ++i) {
    cpu_bottom_store.push_back(std::make_unique<Tensor>(bottom_shapes[i]));
    gpu_bottom_store.push_back(std::make_unique<Tensor>(bottom_shapes[i]));
    if (options.half_homes) gpu_bottom_store.back()->set_home_type(options.half);
    if (options.half_homes && options.nhwc_bottoms && bottom_shapes[i].size() == 4) {
      gpu_bottom_store.back()->set_home_nhwc(true);
    }
    Tensor* c = cpu_bottom_store.back().get();
    if (options.fill_bottom) {
      options.fill_bottom(i, c);
    } else {
      float* data = c->mutable_cpu_data();
      for (int j = 0; j < c->count(); ++j) data[j] = uniform(rng);
    }
    gpu_bottom_store.back()->CopyFrom(*c);
    cpu_bottom.push_back(c);
    gpu_bottom.push_back(gpu_bottom_store.back().get());
  }
  // Tops: as many as the layer's parameter names, else one.
  const int num_tops = std::max(1, param.top_size());
  std::vector<std::unique_ptr<Tensor>> top_store;
  std::vector<Tensor*> cpu_top, gpu_top;
  if (options.in_place) {
    cpu_top = cpu_bottom;
    gpu_top = gpu_bottom;
  } else {
    for (int i = 0; i < num_tops; ++i) {
      top_store.push_back(std::make_unique<Tensor>());
      cpu_top.push_back(top_store.back().get());
      top_store.push_back(std::make_unique<Tensor>());
      if (options.half_homes) top_store.back()->set_home_type(options.half);
      // Channels-last before the layer's set-up, as a net's blobs are when it runs (a Split's
      // tops share the bottom's buffer: same layout); any 4-D shape until Reshape sets it.
      if (options.half_homes && options.nhwc_tops && bottom_shapes[0].size() == 4) {
        top_store.back()->Reshape(bottom_shapes[0]);
        top_store.back()->set_home_nhwc(true);
      }
      gpu_top.push_back(top_store.back().get());
    }
  }
  std::unique_ptr<Layer> cpu_layer = CreateLayer(param, &cpu);
  std::unique_ptr<Layer> gpu_layer = CreateLayer(param, &gpu);
  cpu_layer->Initialize(cpu_bottom, cpu_top);
  gpu_layer->Initialize(gpu_bottom, gpu_top);
  ASSERT_EQ(cpu_layer->blobs().size(), gpu_layer->blobs().size());
  for (size_t i = 0; i < cpu_layer->blobs().size(); ++i) {
    gpu_layer->blobs()[i]->CopyFrom(*cpu_layer->blobs()[i]);
  }
  cpu.Seed(options.seed);
  gpu.Seed(options.seed);
  const float cpu_loss = cpu_layer->Forward(cpu_bottom, cpu_top);
  const float gpu_loss = gpu_layer->Forward(gpu_bottom, gpu_top);
  EXPECT_NEAR(cpu_loss, gpu_loss, options.tolerance * std::max(1.0f, std::fabs(cpu_loss)))
      << param.type() << ": loss";
  for (size_t t = 0; t < cpu_top.size(); ++t) {
    ASSERT_EQ(cpu_top[t]->shape(), gpu_top[t]->shape()) << param.type() << ": top " << t;
    detail::ExpectClose(cpu_top[t]->cpu_data(), gpu_top[t]->cpu_data(), cpu_top[t]->count(),
                        options.tolerance, param.type() + ": top " + std::to_string(t));
  }
  if (options.forward_only) return;

  std::vector<bool> propagate = options.propagate_down;
  if (propagate.empty()) propagate.assign(num_bottoms, true);
  for (size_t t = 0; t < cpu_top.size(); ++t) {
    // Loss tops keep the loss weight Initialize put in their diff.
    if (cpu_layer->loss(static_cast<int>(t)) != 0.0f) continue;
    float* diff = cpu_top[t]->mutable_cpu_diff();
    for (int j = 0; j < cpu_top[t]->count(); ++j) diff[j] = uniform(rng);
    gpu_top[t]->CopyFrom(*cpu_top[t], /*copy_diff=*/true);
  }
  for (auto* layer : {cpu_layer.get(), gpu_layer.get()}) {
    for (auto& blob : layer->blobs()) std::fill_n(blob->mutable_cpu_diff(), blob->count(), 0.0f);
  }
  cpu_layer->Backward(cpu_top, propagate, cpu_bottom);
  gpu_layer->Backward(gpu_top, propagate, gpu_bottom);
  for (int i = 0; i < num_bottoms; ++i) {
    if (!propagate[i]) continue;
    detail::ExpectClose(cpu_bottom[i]->cpu_diff(), gpu_bottom[i]->cpu_diff(),
                        cpu_bottom[i]->count(), options.tolerance,
                        param.type() + ": bottom diff " + std::to_string(i));
  }
  for (size_t i = 0; i < cpu_layer->blobs().size(); ++i) {
    detail::ExpectClose(cpu_layer->blobs()[i]->cpu_diff(), gpu_layer->blobs()[i]->cpu_diff(),
                        cpu_layer->blobs()[i]->count(), options.tolerance,
                        param.type() + ": param diff " + std::to_string(i));
    // Layers that update blobs in Forward (BatchNorm's statistics) must agree on them too.
    detail::ExpectClose(cpu_layer->blobs()[i]->cpu_data(), gpu_layer->blobs()[i]->cpu_data(),
                        cpu_layer->blobs()[i]->count(), options.tolerance,
                        param.type() + ": param data " + std::to_string(i));
  }
}

// Runs CheckGpuMatchesCpu on a one-bottom layer with a separate top and in place.
inline void CheckBothWays(const std::string& text, const std::vector<int>& shape,
                          GpuCheckOptions options = {}) {
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "separate top");
    options.in_place = in_place;
    CheckGpuMatchesCpu(LayerParam(text), {shape}, options);
  }
}

// Gradient check of a one-bottom layer on a GPU context.
inline void GpuGradientCheck(const std::string& text, Tensor* bottom,
                             const GradientCheckOptions& options = {}) {
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam(text), &ctx);
  Tensor top;
  GradientChecker(options).Check(layer.get(), {bottom}, {&top});
}

}  // namespace cortado::testing
