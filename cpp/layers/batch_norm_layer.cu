// SPDX-License-Identifier: Apache-2.0
// BatchNorm on the GPU, as batch_norm_layer.cpp computes it: per-channel statistics by one
// block per channel (sums in double, added in a fixed tree so results repeat bit for bit), the
// running statistics updated on the device, then element-wise normalisation. No host reads.
#include "core/cuda.hpp"
#include "layers/batch_norm_layer.hpp"

namespace cortado {
namespace {

// The sum of every thread's `value` in the block (blockDim.x a power of two), in a fixed order.
__device__ double BlockSum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();  // shared is reused by the next call
  return total;
}

// Element j in [0, num * spatial) of channel c.
__device__ int64_t ChannelElement(int64_t j, int c, int channels, int spatial) {
  const int64_t n = j / spatial;
  return (n * channels + c) * spatial + (j - n * spatial);
}

// Block c: the batch mean and variance of channel c (two passes, as the CPU code), its std,
// and the running sums: mean_sum = f * mean_sum + mean, var_sum = f * var_sum + m / (m - 1) *
// var, and (block 0) norm = f * norm + 1.
__global__ void BatchStatistics(int num, int channels, int spatial, const float* x, float fraction,
                                float bias_correction, float eps, float* mean, float* std_dev,
                                float* mean_sum, float* var_sum, float* norm) {
  __shared__ double shared[cuda::kThreads];
  const int c = blockIdx.x;
  const int64_t m = static_cast<int64_t>(num) * spatial;
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    sum += x[ChannelElement(j, c, channels, spatial)];
  }
  const float channel_mean = static_cast<float>(BlockSum(sum, shared) / m);
  double squares = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const float d = x[ChannelElement(j, c, channels, spatial)] - channel_mean;
    squares += static_cast<double>(d * d);
  }
  const float variance = static_cast<float>(BlockSum(squares, shared) / m);
  if (threadIdx.x == 0) {
    mean[c] = channel_mean;
    std_dev[c] = sqrtf(variance + eps);
    mean_sum[c] = fraction * mean_sum[c] + channel_mean;
    var_sum[c] = fraction * var_sum[c] + bias_correction * variance;
    if (c == 0) norm[0] = norm[0] * fraction + 1.0f;
  }
}

// The stored statistics: mean_sum / norm and var_sum / norm (all zero while norm is 0).
__global__ void GlobalStatistics(int channels, const float* mean_sum, const float* var_sum,
                                 const float* norm, float eps, float* mean, float* std_dev) {
  CORTADO_KERNEL_LOOP(c, channels) {
    const float factor = norm[0] == 0.0f ? 0.0f : 1.0f / norm[0];
    mean[c] = factor * mean_sum[c];
    std_dev[c] = sqrtf(factor * var_sum[c] + eps);
  }
}

// x_norm = top = (x - mean) / std (divided, as the CPU code, to round alike). May be in place.
__global__ void Normalize(int64_t count, int channels, int spatial, const float* x,
                          const float* mean, const float* std_dev, float* x_norm, float* top) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int c = static_cast<int>((i / spatial) % channels);
    const float value = (x[i] - mean[c]) / std_dev[c];
    x_norm[i] = value;
    top[i] = value;
  }
}

// Block c: mean(dy) and mean(dy * y) over channel c.
__global__ void GradientMeans(int num, int channels, int spatial, const float* dy, const float* y,
                              float* mean_dy, float* mean_dyy) {
  __shared__ double shared[cuda::kThreads];
  const int c = blockIdx.x;
  const int64_t m = static_cast<int64_t>(num) * spatial;
  double sum_dy = 0.0, sum_dyy = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const int64_t at = ChannelElement(j, c, channels, spatial);
    sum_dy += dy[at];
    sum_dyy += static_cast<double>(dy[at] * y[at]);
  }
  sum_dy = BlockSum(sum_dy, shared);
  sum_dyy = BlockSum(sum_dyy, shared);
  if (threadIdx.x == 0) {
    mean_dy[c] = static_cast<float>(sum_dy / m);
    mean_dyy[c] = static_cast<float>(sum_dyy / m);
  }
}

// dx = (dy - mean(dy) - mean(dy * y) * y) / std; may be in place (dx == dy).
__global__ void BatchBackward(int64_t count, int channels, int spatial, const float* dy,
                              const float* y, const float* mean_dy, const float* mean_dyy,
                              const float* std_dev, float* dx) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int c = static_cast<int>((i / spatial) % channels);
    dx[i] = (dy[i] - mean_dy[c] - mean_dyy[c] * y[i]) / std_dev[c];
  }
}

// With the stored statistics, which are constants: dx = dy / std.
__global__ void GlobalBackward(int64_t count, int channels, int spatial, const float* dy,
                               const float* std_dev, float* dx) {
  CORTADO_KERNEL_LOOP(i, count) {
    dx[i] = dy[i] / std_dev[static_cast<int>((i / spatial) % channels)];
  }
}

}  // namespace

void BatchNormLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  gpu_stats_.Reshape(std::vector<int>{4, channels_});
  float* mean = gpu_stats_.mutable_gpu_data();
  float* std_dev = mean + channels_;
  const cudaStream_t stream = cuda::Stream(*ctx_);
  const float* x = bottom[0]->gpu_data();
  if (use_global_stats_) {
    GlobalStatistics<<<cuda::Blocks(channels_), cuda::kThreads, 0, stream>>>(
        channels_, blobs_[0]->gpu_data(), blobs_[1]->gpu_data(), blobs_[2]->gpu_data(), eps_, mean,
        std_dev);
  } else {
    const int m = num_ * spatial_dim_;
    const float bias_correction = m > 1 ? static_cast<float>(m) / (m - 1) : 1.0f;
    BatchStatistics<<<channels_, cuda::kThreads, 0, stream>>>(
        num_, channels_, spatial_dim_, x, moving_average_fraction_, bias_correction, eps_, mean,
        std_dev, blobs_[0]->mutable_gpu_data(), blobs_[1]->mutable_gpu_data(),
        blobs_[2]->mutable_gpu_data());
  }
  CORTADO_CUDA_CHECK_LAUNCH();
  const int64_t count = bottom[0]->count();
  Normalize<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
      count, channels_, spatial_dim_, x, mean, std_dev, x_norm_.mutable_gpu_data(),
      top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void BatchNormLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const float* dy = top[0]->gpu_diff();
  float* dx = bottom[0]->mutable_gpu_diff();
  float* stats = gpu_stats_.mutable_gpu_data();
  const float* std_dev = stats + channels_;
  const int64_t count = bottom[0]->count();
  const cudaStream_t stream = cuda::Stream(*ctx_);
  if (use_global_stats_) {
    GlobalBackward<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
        count, channels_, spatial_dim_, dy, std_dev, dx);
    CORTADO_CUDA_CHECK_LAUNCH();
    return;
  }
  float* mean_dy = stats + 2 * channels_;
  float* mean_dyy = stats + 3 * channels_;
  const float* y = x_norm_.gpu_data();
  GradientMeans<<<channels_, cuda::kThreads, 0, stream>>>(num_, channels_, spatial_dim_, dy, y,
                                                          mean_dy, mean_dyy);
  CORTADO_CUDA_CHECK_LAUNCH();
  BatchBackward<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
      count, channels_, spatial_dim_, dy, y, mean_dy, mean_dyy, std_dev, dx);
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
