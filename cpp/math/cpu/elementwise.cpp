// SPDX-License-Identifier: Apache-2.0
// Element-wise primitives; loops are simple enough for the compiler to vectorise, and large
// ones are split across the OpenMP threads.
#include <cmath>
#include <cstring>

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

}  // namespace cortado::math
