// SPDX-License-Identifier: Apache-2.0
// cortado_gemm_bench: math::Gemm (oneDNN's sgemm where oneDNN is built in) beside OpenBLAS's
// cblas_sgemm, in the same process, on the products of the benchmark nets' inner products and
// im2col convolutions. Prints the best of five runs of each (microseconds per product) and the
// ratio; the threads are OpenMP's (OMP_NUM_THREADS), for both libraries.
//
//   OMP_NUM_THREADS=2 build-ci/bench/cortado_gemm_bench
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "math/math.hpp"

namespace {

struct Shape {
  const char* name;
  bool trans_a;
  bool trans_b;
  int m;
  int n;
  int k;
  float beta;
};

// Each layer's three products: forward (y = x W^T + bias), weight gradient (dW += dy^T x) and
// input gradient (dx = dy W); im2col convolutions' forward, column gradient and weight gradient.
constexpr Shape kShapes[] = {
    {"LeNet ip1 (64 x 800 -> 500), forward", false, true, 64, 500, 800, 1},
    {"LeNet ip1, weight gradient", true, false, 500, 800, 64, 1},
    {"LeNet ip1, input gradient", false, false, 64, 800, 500, 0},
    {"LeNet ip2 (64 x 500 -> 10), forward", false, true, 64, 10, 500, 1},
    {"LeNet ip2, weight gradient", true, false, 10, 500, 64, 1},
    {"LeNet ip2, input gradient", false, false, 64, 500, 10, 0},
    {"CIFAR-10 ip1 (100 x 1024 -> 64), forward", false, true, 100, 64, 1024, 1},
    {"ResNet-50 fc (8 x 2048 -> 1000), forward", false, true, 8, 1000, 2048, 1},
    {"ResNet-50 fc, weight gradient", true, false, 1000, 2048, 8, 1},
    {"ResNet-50 fc, input gradient", false, false, 8, 2048, 1000, 0},
    {"im2col conv 64 x 3136 x 576, forward", false, false, 64, 3136, 576, 0},
    {"im2col conv 576 x 3136 x 64, columns", true, false, 576, 3136, 64, 0},
    {"im2col conv 64 x 576 x 3136, weights", false, true, 64, 576, 3136, 1},
    {"im2col conv 256 x 784 x 1152, forward", false, false, 256, 784, 1152, 0},
};

template <typename F>
double BestMicroseconds(F&& product) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 3; ++i) product();
    const int calls = 50;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) product();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count() / calls);
  }
  return best;
}

}  // namespace

int main() {
  std::mt19937 random(1);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::printf("| product | OpenBLAS cblas_sgemm us | math::Gemm us | ratio |\n");
  std::printf("| --- | --- | --- | --- |\n");
  for (const Shape& s : kShapes) {
    std::vector<float> a(static_cast<size_t>(s.m) * s.k);
    std::vector<float> b(static_cast<size_t>(s.k) * s.n);
    std::vector<float> c(static_cast<size_t>(s.m) * s.n);
    for (float& x : a) x = value(random);
    for (float& x : b) x = value(random);
    for (float& x : c) x = value(random);
    const int lda = s.trans_a ? s.m : s.k;
    const int ldb = s.trans_b ? s.k : s.n;
    const double blas = BestMicroseconds([&] {
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                  s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), lda,
                  b.data(), ldb, s.beta, c.data(), s.n);
    });
    const double ours = BestMicroseconds([&] {
      cortado::math::Gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), b.data(), s.beta,
                          c.data());
    });
    std::printf("| %s | %.1f | %.1f | %.2f |\n", s.name, blas, ours, ours / blas);
  }
  return 0;
}
