// SPDX-License-Identifier: Apache-2.0
// Embed on the GPU: the same rules as embed_layer.cpp. Forward checks the indices first (the
// first bad position comes back to the host, the pass's only round trip, so that Forward throws
// the CPU pass's error) and then writes one output element per thread. Backward adds each
// position's top diff into its weight row with atomicAdd (positions may share an index) and
// sums the bias gradient with one thread per output column.
#include <climits>

#include "core/cuda.hpp"
#include "layers/embed_layer.hpp"

namespace cortado {
namespace {

__device__ bool ValidIndex(float value, int k) {
  return value >= 0.0f && value < static_cast<float>(k) && floorf(value) == value;
}

__global__ void FindBadIndex(int m, int k, const float* x, int* bad_position) {
  CORTADO_KERNEL_LOOP(i, m) {
    if (!ValidIndex(x[i], k)) atomicMin(bad_position, static_cast<int>(i));
  }
}

// y[i, d] = W[x[i], d] (+ b[d]); the indices were checked.
__global__ void EmbedForward(int64_t count, int n, const float* x, const float* w, const float* b,
                             float* y) {
  CORTADO_KERNEL_LOOP(j, count) {
    const int64_t i = j / n;
    const int d = static_cast<int>(j - i * n);
    const float value = w[static_cast<int64_t>(x[i]) * n + d];
    y[j] = b != nullptr ? value + b[d] : value;
  }
}

// dW[x[i], d] += dy[i, d]; an invalid index (the bottom changed since Forward) is skipped.
__global__ void EmbedWeightBackward(int64_t count, int n, int k, const float* x, const float* dy,
                                    float* dw) {
  CORTADO_KERNEL_LOOP(j, count) {
    const int64_t i = j / n;
    const int d = static_cast<int>(j - i * n);
    if (!ValidIndex(x[i], k)) continue;
    atomicAdd(dw + static_cast<int64_t>(x[i]) * n + d, dy[j]);
  }
}

// db[d] += sum over i of dy[i, d], rows in order (as the CPU pass adds them).
__global__ void EmbedBiasBackward(int m, int n, const float* dy, float* db) {
  CORTADO_KERNEL_LOOP(d, n) {
    float sum = db[d];
    for (int64_t i = 0; i < m; ++i) sum += dy[i * n + d];
    db[d] = sum;
  }
}

}  // namespace

void EmbedLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (m_ == 0) return;
  cuda::Resources& res = cuda::Get(*ctx_);
  const float* x = bottom[0]->gpu_data();
  int* bad = static_cast<int*>(res.Workspace(sizeof(int)));
  const int none = INT_MAX;
  CORTADO_CUDA_CHECK(cudaMemcpyAsync(bad, &none, sizeof(int), cudaMemcpyHostToDevice, res.stream));
  FindBadIndex<<<cuda::Blocks(m_), cuda::kThreads, 0, res.stream>>>(m_, k_, x, bad);
  CORTADO_CUDA_CHECK_LAUNCH();
  int bad_position = INT_MAX;
  CORTADO_CUDA_CHECK(
      cudaMemcpyAsync(&bad_position, bad, sizeof(int), cudaMemcpyDeviceToHost, res.stream));
  CORTADO_CUDA_CHECK(cudaStreamSynchronize(res.stream));
  if (bad_position != INT_MAX) {
    float value = 0.0f;
    CORTADO_CUDA_CHECK(cudaMemcpyAsync(&value, x + bad_position, sizeof(float),
                                       cudaMemcpyDeviceToHost, res.stream));
    CORTADO_CUDA_CHECK(cudaStreamSynchronize(res.stream));
    ThrowBadIndex(value, bad_position);
  }
  const int64_t count = static_cast<int64_t>(m_) * n_;
  EmbedForward<<<cuda::Blocks(count), cuda::kThreads, 0, res.stream>>>(
      count, n_, x, blobs_[0]->gpu_data(), bias_term_ ? blobs_[1]->gpu_data() : nullptr,
      top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void EmbedLayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  RefuseBottomGradient(propagate_down);
  if (m_ == 0) return;
  cudaStream_t stream = cuda::Stream(*ctx_);
  const float* dy = top[0]->gpu_diff();
  if (param_propagate_down(0)) {
    const int64_t count = static_cast<int64_t>(m_) * n_;
    EmbedWeightBackward<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
        count, n_, k_, bottom[0]->gpu_data(), dy, blobs_[0]->mutable_gpu_diff());
    CORTADO_CUDA_CHECK_LAUNCH();
  }
  if (bias_term_ && param_propagate_down(1)) {
    EmbedBiasBackward<<<cuda::Blocks(n_), cuda::kThreads, 0, stream>>>(
        m_, n_, dy, blobs_[1]->mutable_gpu_diff());
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cortado
