// SPDX-License-Identifier: Apache-2.0
// PReLU on the GPU: the same rules as prelu_layer.cpp. Forward and the bottom gradient go one
// element per thread; the slope gradient is one block per channel (a fixed-order tree sum in
// double, so it repeats bit for bit), added to the slope diff as the CPU pass adds it.
#include "core/cuda.hpp"
#include "layers/prelu_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

constexpr int kSlopeThreads = 256;

__global__ void PReLUForward(int n, int channels, int dim, const float* x, const float* slope,
                             bool shared, float* y) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float a = slope[shared ? 0 : (i / dim) % channels];
    y[i] = fmaxf(x[i], 0.0f) + a * fminf(x[i], 0.0f);
  }
}

__global__ void PReLUBackward(int n, int channels, int dim, const float* x, const float* dy,
                              const float* slope, bool shared, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float a = slope[shared ? 0 : (i / dim) % channels];
    dx[i] = x[i] > 0.0f ? dy[i] : dy[i] * a;
  }
}

// Block c sums dy * x over x <= 0 in channel c. Per-channel slopes get the sum added here;
// a shared slope gets the per-channel sums in `sums`, added in channel order afterwards.
__global__ void PReLUSlopeSums(int num, int channels, int dim, const float* x, const float* dy,
                               bool shared, double* sums, float* slope_diff) {
  __shared__ double partial[kSlopeThreads];
  const int c = blockIdx.x;
  const int64_t per_channel = static_cast<int64_t>(num) * dim;
  double sum = 0.0;
  for (int64_t k = threadIdx.x; k < per_channel; k += blockDim.x) {
    const int64_t n = k / dim;
    const int64_t offset = (n * channels + c) * dim + k % dim;
    const float xi = x[offset];
    if (xi <= 0.0f) sum += dy[offset] * xi;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (shared) {
      sums[c] = partial[0];
    } else {
      slope_diff[c] += static_cast<float>(partial[0]);
    }
  }
}

__global__ void PReLUSharedSlopeAdd(int channels, const double* sums, float* slope_diff) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int c = 0; c < channels; ++c) slope_diff[0] += static_cast<float>(sums[c]);
  }
}

}  // namespace

void PReLULayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) {
    math::gpu::Copy(*ctx_, n, bottom[0]->gpu_data(), bottom_copy_.mutable_gpu_data());
  }
  PReLUForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->shape(1), bottom[0]->count(2), bottom[0]->gpu_data(), blobs_[0]->gpu_data(),
      channel_shared_, top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void PReLULayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  const float* x = bottom[0] == top[0] ? bottom_copy_.gpu_data() : bottom[0]->gpu_data();
  const float* dy = top[0]->gpu_diff();
  const int n = bottom[0]->count();
  const int channels = bottom[0]->shape(1);
  const int num = bottom[0]->shape(0);
  const int dim = bottom[0]->count(2);
  cudaStream_t stream = cuda::Stream(*ctx_);
  // The slope gradient goes first: in place, dx overwrites dy (the stream keeps the order).
  if (param_propagate_down(0) && channels > 0) {
    double* sums = nullptr;
    if (channel_shared_) {
      sums = static_cast<double*>(cuda::Get(*ctx_).Workspace(sizeof(double) * channels));
    }
    float* slope_diff = blobs_[0]->mutable_gpu_diff();
    PReLUSlopeSums<<<channels, kSlopeThreads, 0, stream>>>(num, channels, dim, x, dy,
                                                           channel_shared_, sums, slope_diff);
    CORTADO_CUDA_CHECK_LAUNCH();
    if (channel_shared_) {
      PReLUSharedSlopeAdd<<<1, 1, 0, stream>>>(channels, sums, slope_diff);
      CORTADO_CUDA_CHECK_LAUNCH();
    }
  }
  if (propagate_down[0]) {
    PReLUBackward<<<cuda::Blocks(n), cuda::kThreads, 0, stream>>>(
        n, channels, dim, x, dy, blobs_[0]->gpu_data(), channel_shared_,
        bottom[0]->mutable_gpu_diff());
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cortado
