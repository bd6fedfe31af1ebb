// SPDX-License-Identifier: Apache-2.0
// BLAS-backed primitives (OpenBLAS through CBLAS).
#include <cblas.h>

#include "math/math.hpp"

namespace cortado::math {

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  int lda = trans_a ? m : k;
  int ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
}

void Gemv(bool trans_a, int m, int n, float alpha, const float* a, const float* x, float beta,
          float* y) {
  cblas_sgemv(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, m, n, alpha, a, n, x, 1, beta, y,
              1);
}

void Axpy(int n, float alpha, const float* x, float* y) { cblas_saxpy(n, alpha, x, 1, y, 1); }

void Axpby(int n, float alpha, const float* x, float beta, float* y) {
  cblas_sscal(n, beta, y, 1);
  cblas_saxpy(n, alpha, x, 1, y, 1);
}

void Scale(int n, float alpha, float* x) { cblas_sscal(n, alpha, x, 1); }

void Scale(int n, float alpha, const float* x, float* y) {
  if (x != y) cblas_scopy(n, x, 1, y, 1);
  cblas_sscal(n, alpha, y, 1);
}

void Copy(int n, const float* x, float* y) {
  if (x != y && n > 0) cblas_scopy(n, x, 1, y, 1);
}

float Dot(int n, const float* x, const float* y) { return cblas_sdot(n, x, 1, y, 1); }

float StridedDot(int n, const float* x, int incx, const float* y, int incy) {
  return cblas_sdot(n, x, incx, y, incy);
}

float Asum(int n, const float* x) { return cblas_sasum(n, x, 1); }

}  // namespace cortado::math
