// SPDX-License-Identifier: Apache-2.0
// Numerical gradient check for layers (after Caffe's GradientChecker).
//
// The objective is L = sum_t sum_i w_ti * top_t[i] with fixed random weights w, so the top
// diffs are w. For each checked input element x (bottom data, and parameter blobs), the
// analytic dL/dx from Backward is compared with the central difference
// (L(x + h) - L(x - h)) / 2h, with a tolerance relative to the larger magnitude.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/tensor.hpp"
#include "layers/layer.hpp"

namespace cortado::testing {

struct GradientCheckOptions {
  float step = 1e-2f;
  float threshold = 1e-3f;
  // Skip elements whose value lies within kink_range of +-kink (non-differentiable points).
  float kink = 0.0f;
  float kink_range = -1.0f;
  // Check every element of these bottoms (empty: all bottoms).
  std::vector<int> check_bottoms;
  bool check_params = true;
  // Re-seeds the layer's context before every forward (for layers that draw random numbers).
  int64_t seed = 1701;
};

class GradientChecker {
 public:
  explicit GradientChecker(GradientCheckOptions options = {}) : options_(std::move(options)) {}

  // Checks d(objective)/d(every element of the bottoms and params). Calls Initialize itself.
  void Check(Layer* layer, const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
    layer->Initialize(bottom, top);
    Reseed(layer);
    layer->Forward(bottom, top);
    // Fixed random objective weights.
    std::mt19937 rng(4242);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    weights_.clear();
    for (Tensor* t : top) {
      std::vector<float> w(t->count());
      for (float& v : w) v = dist(rng);
      weights_.push_back(std::move(w));
    }

    // Every bottom and param blob to check, with its analytic gradient.
    std::vector<Tensor*> inputs;
    std::vector<std::string> names;
    for (int i = 0; i < static_cast<int>(bottom.size()); ++i) {
      bool wanted = options_.check_bottoms.empty();
      for (int b : options_.check_bottoms) wanted |= (b == i);
      if (wanted) {
        inputs.push_back(bottom[i]);
        names.push_back("bottom " + std::to_string(i));
      }
    }
    if (options_.check_params) {
      for (size_t i = 0; i < layer->blobs().size(); ++i) {
        inputs.push_back(layer->blobs()[i].get());
        names.push_back("param " + std::to_string(i));
      }
    }
    std::vector<bool> propagate(bottom.size(), false);
    for (int i = 0; i < static_cast<int>(bottom.size()); ++i) {
      bool wanted = options_.check_bottoms.empty();
      for (int b : options_.check_bottoms) wanted |= (b == i);
      propagate[i] = wanted;
    }
    std::vector<std::vector<float>> analytic;
    {
      Reseed(layer);
      layer->Forward(bottom, top);
      // Zero first: a top may share its diff with a bottom (Reshape, Flatten).
      for (Tensor* b : bottom) Zero(b, true);
      for (auto& p : layer->blobs()) Zero(p.get(), true);
      SetTopDiffs(top);
      layer->Backward(top, propagate, bottom);
      for (Tensor* in : inputs) {
        analytic.emplace_back(in->cpu_diff(), in->cpu_diff() + in->count());
      }
    }

    for (size_t k = 0; k < inputs.size(); ++k) {
      Tensor* in = inputs[k];
      for (int i = 0; i < in->count(); ++i) {
        float* x = in->mutable_cpu_data();
        const float original = x[i];
        if (options_.kink_range > 0.0f &&
            std::fabs(std::fabs(original) - options_.kink) < options_.kink_range) {
          continue;
        }
        x[i] = original + options_.step;
        const double plus = Objective(layer, bottom, top);
        x = in->mutable_cpu_data();
        x[i] = original - options_.step;
        const double minus = Objective(layer, bottom, top);
        x = in->mutable_cpu_data();
        x[i] = original;
        const float numeric = static_cast<float>((plus - minus) / (2.0 * options_.step));
        const float computed = analytic[k][i];
        const float scale = std::max({std::fabs(numeric), std::fabs(computed), 1.0f});
        EXPECT_NEAR(computed, numeric, options_.threshold * scale)
            << layer->type() << " '" << layer->name() << "': " << names[k] << " element " << i
            << " (value " << original << ")";
      }
    }
    // Restore the forward state at the original inputs.
    Reseed(layer);
    layer->Forward(bottom, top);
  }

 private:
  void Reseed(Layer* layer) { layer->context()->Seed(options_.seed); }

  static void Zero(Tensor* t, bool diff) {
    float* p = diff ? t->mutable_cpu_diff() : t->mutable_cpu_data();
    std::fill(p, p + t->count(), 0.0f);
  }

  void SetTopDiffs(const std::vector<Tensor*>& top) {
    for (size_t t = 0; t < top.size(); ++t) {
      float* diff = top[t]->mutable_cpu_diff();
      for (int i = 0; i < top[t]->count(); ++i) diff[i] = weights_[t][i];
    }
  }

  double Objective(Layer* layer, const std::vector<Tensor*>& bottom,
                   const std::vector<Tensor*>& top) {
    Reseed(layer);
    layer->Forward(bottom, top);
    double sum = 0.0;
    for (size_t t = 0; t < top.size(); ++t) {
      const float* data = top[t]->cpu_data();
      for (int i = 0; i < top[t]->count(); ++i)
        sum += static_cast<double>(weights_[t][i]) * data[i];
    }
    return sum;
  }

  GradientCheckOptions options_;
  std::vector<std::vector<float>> weights_;
};

// Fills a tensor with values from a seeded gaussian (test inputs).
inline void FillGaussian(Tensor* t, float mean = 0.0f, float stddev = 1.0f, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  float* data = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) data[i] = dist(rng);
}

inline void FillUniform(Tensor* t, float lo, float hi, unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* data = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) data[i] = dist(rng);
}

// Builds a LayerParameter from prototxt text (test convenience); fails the test on bad text.
caffe::LayerParameter LayerParam(const std::string& text);
// The same for a NetParameter; bad text throws the parser's error (file "<test>").
caffe::NetParameter NetParam(const std::string& text);

}  // namespace cortado::testing
