// SPDX-License-Identifier: Apache-2.0
// BLAS-backed primitives: OpenBLAS through CBLAS; matrix products through oneDNN's sgemm where
// oneDNN is built in.
#include <cblas.h>

#include "core/config.hpp"
#include "core/error.hpp"
#include "math/math.hpp"

#if CORTADO_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace cortado::math {

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
#if CORTADO_WITH_ONEDNN
  // oneDNN's sgemm (row-major, like this function) picks kernels for the CPU it runs on: on
  // the shapes of inner products and im2col convolutions it took half of OpenBLAS 0.3.21's time
  // or less (bench/RESULTS.md, "Matrix products through oneDNN"). It takes no empty operands:
  // those are done here.
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // C = beta * C, and with beta 0 C is not read (BLAS's rule).
    if (beta == 0.0f) {
      Set(m * n, 0.0f, c);
    } else {
      Scale(m * n, beta, c);
    }
    return;
  }
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                          a, lda, b, ldb, beta, c, n);
  if (status != dnnl_success) {
    CORTADO_THROW(kInternal, "oneDNN's sgemm failed (status {}) on a {} x {} x {} product",
                  static_cast<int>(status), m, n, k);
  }
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
#endif
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
