// SPDX-License-Identifier: Apache-2.0
// Two passes: up to kMaxPartials blocks each sum a grid-stride share of the elements into a
// partial (tree sums in shared memory), then one block sums the partials and writes the top.
#include <climits>
#include <cstdint>

#include "core/cuda.hpp"
#include "layers/loss_reduction.hpp"

namespace cortado {
namespace {

constexpr int kReduceThreads = 256;
constexpr int kMaxPartials = 512;

struct Partial {
  double loss;
  double count;
  int first_invalid;  // INT_MAX when none
};

// Tree-reduces the block's values into element 0 (blockDim.x == kReduceThreads).
__device__ void BlockReduce(double* loss, double* count, int* first_invalid) {
  __syncthreads();
  for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
    const int t = threadIdx.x;
    if (t < s) {
      loss[t] += loss[t + s];
      count[t] += count[t + s];
      first_invalid[t] = min(first_invalid[t], first_invalid[t + s]);
    }
    __syncthreads();
  }
}

__global__ void PartialSums(int n, const float* loss, bool square, const float* count,
                            Partial* partials) {
  __shared__ double s_loss[kReduceThreads];
  __shared__ double s_count[kReduceThreads];
  __shared__ int s_invalid[kReduceThreads];
  double l = 0.0, c = 0.0;
  int invalid = INT_MAX;
  CORTADO_KERNEL_LOOP(i, n) {
    const float v = loss[i];
    l += square ? v * v : v;
    if (count != nullptr) {
      const float k = count[i];
      if (k > 0.0f) {
        c += k;
      } else if (k < 0.0f && i < invalid) {
        invalid = static_cast<int>(i);
      }
    }
  }
  s_loss[threadIdx.x] = l;
  s_count[threadIdx.x] = c;
  s_invalid[threadIdx.x] = invalid;
  BlockReduce(s_loss, s_count, s_invalid);
  if (threadIdx.x == 0) partials[blockIdx.x] = Partial{s_loss[0], s_count[0], s_invalid[0]};
}

__global__ void FinishSums(int num_partials, const Partial* partials, bool count_normalizes,
                           float fixed_normalizer, float divisor, float* top, float* normalizer_out,
                           int* first_invalid) {
  __shared__ double s_loss[kReduceThreads];
  __shared__ double s_count[kReduceThreads];
  __shared__ int s_invalid[kReduceThreads];
  double l = 0.0, c = 0.0;
  int invalid = INT_MAX;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x) {
    l += partials[i].loss;
    c += partials[i].count;
    invalid = min(invalid, partials[i].first_invalid);
  }
  s_loss[threadIdx.x] = l;
  s_count[threadIdx.x] = c;
  s_invalid[threadIdx.x] = invalid;
  BlockReduce(s_loss, s_count, s_invalid);
  if (threadIdx.x == 0) {
    // As LossNormalizer: the count as a float, never below 1.
    const float normalizer =
        count_normalizes ? fmaxf(1.0f, static_cast<float>(s_count[0])) : fixed_normalizer;
    top[0] = static_cast<float>(s_loss[0]) / normalizer / divisor;
    if (normalizer_out != nullptr) normalizer_out[0] = normalizer;
    first_invalid[0] = s_invalid[0] == INT_MAX ? -1 : s_invalid[0];
  }
}

}  // namespace

const int* ReduceLossGpu(Context& ctx, const GpuLossReduction& r) {
  const int64_t blocks = (static_cast<int64_t>(r.n) + kReduceThreads - 1) / kReduceThreads;
  const int num_partials =
      static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxPartials ? kMaxPartials : blocks));
  auto* partials =
      static_cast<Partial*>(cuda::Get(ctx).Workspace(sizeof(Partial) * kMaxPartials + sizeof(int)));
  int* first_invalid = reinterpret_cast<int*>(partials + kMaxPartials);
  cudaStream_t stream = cuda::Stream(ctx);
  PartialSums<<<num_partials, kReduceThreads, 0, stream>>>(r.n, r.loss, r.square, r.count,
                                                           partials);
  CORTADO_CUDA_CHECK_LAUNCH();
  FinishSums<<<1, kReduceThreads, 0, stream>>>(num_partials, partials, r.count_normalizes,
                                               r.normalizer, r.divisor, r.top, r.normalizer_out,
                                               first_invalid);
  CORTADO_CUDA_CHECK_LAUNCH();
  return first_invalid;
}

int FirstInvalidIndex(Context& ctx, const int* first_invalid) {
  int index = -1;
  cudaStream_t stream = cuda::Stream(ctx);
  CORTADO_CUDA_CHECK(
      cudaMemcpyAsync(&index, first_invalid, sizeof(int), cudaMemcpyDeviceToHost, stream));
  CORTADO_CUDA_CHECK(cudaStreamSynchronize(stream));
  return index;
}

float ReadDeviceValue(Context& ctx, const float* value) {
  float host = 0.0f;
  cudaStream_t stream = cuda::Stream(ctx);
  CORTADO_CUDA_CHECK(cudaMemcpyAsync(&host, value, sizeof(float), cudaMemcpyDeviceToHost, stream));
  CORTADO_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace cortado
