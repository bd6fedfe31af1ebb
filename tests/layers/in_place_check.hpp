// SPDX-License-Identifier: Apache-2.0
// Test helper for element-wise ("neuron") layers: checks that a layer run in place (top and
// bottom the same tensor, as Caffe nets write `bottom: "x" top: "x"`) gives the same top data,
// bottom diff and parameter diffs as the same layer run with separate tensors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "support/gradient_checker.hpp"

namespace cortado::testing {

struct LayerRun {
  std::vector<float> top_data;
  std::vector<float> bottom_diff;
  std::vector<std::vector<float>> param_diffs;
};

// Builds the layer from `layer_text` in a context seeded with 1701, runs Forward and Backward
// on `input` with top diff `top_diff`, either in place or not.
inline LayerRun RunNeuronLayer(const std::string& layer_text, const Tensor& input,
                               const std::vector<float>& top_diff, bool in_place) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(layer_text), &ctx);
  Tensor bottom(input.shape());
  bottom.CopyFrom(input);
  Tensor separate_top;
  Tensor* top = in_place ? &bottom : &separate_top;
  layer->Initialize({&bottom}, {top});
  layer->Forward({&bottom}, {top});
  LayerRun run;
  run.top_data.assign(top->cpu_data(), top->cpu_data() + top->count());
  std::copy(top_diff.begin(), top_diff.end(), top->mutable_cpu_diff());
  for (auto& p : layer->blobs()) std::fill_n(p->mutable_cpu_diff(), p->count(), 0.0f);
  layer->Backward({top}, {true}, {&bottom});
  run.bottom_diff.assign(bottom.cpu_diff(), bottom.cpu_diff() + bottom.count());
  for (auto& p : layer->blobs())
    run.param_diffs.emplace_back(p->cpu_diff(), p->cpu_diff() + p->count());
  return run;
}

inline void ExpectAllNear(const std::vector<float>& expected, const std::vector<float>& actual,
                          const char* what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(expected[i], actual[i], 1e-6f * std::max(1.0f, std::fabs(expected[i])))
        << what << " element " << i;
  }
}

// Expects the in-place run of `layer_text` to match the out-of-place one on `input`.
// `zero_gradient` says the layer's bottom diff is all zero by design (a constant output).
inline void ExpectInPlaceMatches(const std::string& layer_text, const Tensor& input,
                                 bool zero_gradient = false) {
  std::vector<float> top_diff(input.count());
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : top_diff) v = dist(rng);
  const LayerRun separate = RunNeuronLayer(layer_text, input, top_diff, false);
  const LayerRun in_place = RunNeuronLayer(layer_text, input, top_diff, true);
  ExpectAllNear(separate.top_data, in_place.top_data, "top data");
  ExpectAllNear(separate.bottom_diff, in_place.bottom_diff, "bottom diff");
  ASSERT_EQ(separate.param_diffs.size(), in_place.param_diffs.size());
  for (size_t i = 0; i < separate.param_diffs.size(); ++i) {
    ExpectAllNear(separate.param_diffs[i], in_place.param_diffs[i], "param diff");
  }
  // A layer that ignored its input would pass the comparisons above trivially.
  bool any_nonzero = false;
  for (float v : separate.bottom_diff) any_nonzero |= v != 0.0f;
  EXPECT_NE(any_nonzero, zero_gradient) << "bottom diff all zero: " << !any_nonzero;
}

// Fills `t` with uniform values in [-hi, -lo] U [lo, hi] (keeps inputs off a kink at 0).
inline void FillAwayFromZero(Tensor* t, float lo, float hi, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(lo, hi);
  std::bernoulli_distribution negative(0.5);
  float* data = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) data[i] = negative(rng) ? -mag(rng) : mag(rng);
}

// Copies `values` into `t` (hand-written test inputs).
inline void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int>(values.size()), t->count());
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

inline std::vector<float> Data(const Tensor& t) {
  return std::vector<float>(t.cpu_data(), t.cpu_data() + t.count());
}
inline std::vector<float> Diff(const Tensor& t) {
  return std::vector<float>(t.cpu_diff(), t.cpu_diff() + t.count());
}

}  // namespace cortado::testing
