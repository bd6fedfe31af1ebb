// SPDX-License-Identifier: Apache-2.0
// Element-wise primitives; loops are simple enough for the compiler to vectorise, and large
// ones are split across the OpenMP threads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "math/lane_sum.hpp"
#include "math/math.hpp"

namespace cortado::math {
namespace {

template <typename F>
void ForEach(int n, F f) {
#pragma omp parallel for if (n > kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) f(i);
}

}  // namespace

void Set(int n, float value, float* x) {
  if (value == 0.0f) {
    std::memset(x, 0, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  ForEach(n, [=](int i) { x[i] = value; });
}

void AddScalar(int n, float alpha, float* x) {
  ForEach(n, [=](int i) { x[i] += alpha; });
}

float Sum(int n, const float* x) {
  return static_cast<float>(LaneSum(n, [x](int i) { return x[i]; }));
}

void Add(int n, const float* a, const float* b, float* y) {
  ForEach(n, [=](int i) { y[i] = a[i] + b[i]; });
}
void Sub(int n, const float* a, const float* b, float* y) {
  ForEach(n, [=](int i) { y[i] = a[i] - b[i]; });
}
void Mul(int n, const float* a, const float* b, float* y) {
  ForEach(n, [=](int i) { y[i] = a[i] * b[i]; });
}
void Div(int n, const float* a, const float* b, float* y) {
  ForEach(n, [=](int i) { y[i] = a[i] / b[i]; });
}
void Sqr(int n, const float* a, float* y) {
  ForEach(n, [=](int i) { y[i] = a[i] * a[i]; });
}
void Sqrt(int n, const float* a, float* y) {
  ForEach(n, [=](int i) { y[i] = std::sqrt(a[i]); });
}
void Exp(int n, const float* a, float* y) {
  ForEach(n, [=](int i) { y[i] = std::exp(a[i]); });
}
void Log(int n, const float* a, float* y) {
  ForEach(n, [=](int i) { y[i] = std::log(a[i]); });
}
void Abs(int n, const float* a, float* y) {
  ForEach(n, [=](int i) { y[i] = std::fabs(a[i]); });
}
void Powx(int n, const float* a, float b, float* y) {
  ForEach(n, [=](int i) { y[i] = std::pow(a[i], b); });
}
void Sign(int n, const float* a, float* y) {
  ForEach(n, [=](int i) { y[i] = static_cast<float>((0.0f < a[i]) - (a[i] < 0.0f)); });
}

void SgdUpdateMany(const std::vector<SgdTensor>& tensors, float momentum, float diff_scale) {
  // Pieces of at most kPiece values, one parallel loop over all of them: one OpenMP region a
  // step, not one per parameter and pass.
  constexpr int kPiece = 1 << 14;
  std::vector<SgdTensor> pieces;
  for (const SgdTensor& t : tensors) {
    for (int at = 0; at < t.count; at += kPiece) {
      pieces.push_back({t.data + at, t.diff + at, t.history + at, std::min(kPiece, t.count - at),
                        t.rate, t.decay});
    }
  }
  const int count = static_cast<int>(pieces.size());
#pragma omp parallel for if (count * kPiece > kParallelThreshold) schedule(static)
  for (int k = 0; k < count; ++k) {
    const SgdTensor& piece = pieces[k];
    float* data = piece.data;
    float* diff = piece.diff;
    float* history = piece.history;
    const float rate = piece.rate;
    const float decay = piece.decay;
    for (int i = 0; i < piece.count; ++i) {
      float g = diff[i];
      if (diff_scale != 1.0f) g *= diff_scale;           // Solver::Normalize
      if (decay != 0.0f) g = decay * data[i] + g;        // Solver::Regularize (L2)
      const float h = rate * g + momentum * history[i];  // ComputeUpdateValue
      history[i] = h;
      diff[i] = h;
      data[i] = data[i] - h;  // Net::Update
    }
  }
}

}  // namespace cortado::math
