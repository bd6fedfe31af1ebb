// SPDX-License-Identifier: Apache-2.0
// MVN on the GPU: one block per row. The block sums the row in double (a fixed-order tree, so
// a run repeats bit for bit), every thread reads the result, then writes its part of the row,
// with the same float arithmetic as mvn_layer.cpp. Rows are read completely before they are
// written, so it runs in place.
#include "core/cuda.hpp"
#include "layers/mvn_layer.hpp"

namespace cortado {
namespace {

constexpr int kRowThreads = 256;

// The sums of a and b over the block (blockDim.x == kRowThreads), returned to every thread.
__device__ double2 RowSum2(double a, double b) {
  __shared__ double2 warp_sums[kRowThreads / 32];
  __shared__ double2 total;
  for (int offset = 16; offset > 0; offset /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = make_double2(a, b);
  __syncthreads();
  if (warp == 0) {
    a = lane < kRowThreads / 32 ? warp_sums[lane].x : 0.0;
    b = lane < kRowThreads / 32 ? warp_sums[lane].y : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) {
      a += __shfl_down_sync(0xffffffffu, a, offset);
      b += __shfl_down_sync(0xffffffffu, b, offset);
    }
    if (lane == 0) total = make_double2(a, b);
  }
  __syncthreads();
  return total;
}

__global__ void MVNForward(int dim, const float* x, bool normalize, float eps, float* y,
                           float* sd) {
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * dim;
  const float* xr = x + offset;
  float* yr = y + offset;
  double sum = 0.0;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) sum += xr[j];
  const float mean = static_cast<float>(RowSum2(sum, 0.0).x / dim);
  if (!normalize) {
    for (int j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = xr[j] - mean;
    return;
  }
  double sumsq = 0.0;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    const float d = xr[j] - mean;
    sumsq += static_cast<double>(d) * d;
  }
  const float s = sqrtf(static_cast<float>(RowSum2(sumsq, 0.0).x / dim)) + eps;
  if (threadIdx.x == 0) sd[blockIdx.x] = s;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = (xr[j] - mean) / s;
}

__global__ void MVNBackward(int dim, const float* y, const float* dy, const float* sd,
                            bool normalize, float inv_dim, float* dx) {
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * dim;
  const float* yr = y + offset;
  const float* dyr = dy + offset;
  float* dxr = dx + offset;
  double sum_dy = 0.0, sum_dy_y = 0.0;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    sum_dy += dyr[j];
    sum_dy_y += static_cast<double>(dyr[j]) * yr[j];
  }
  const double2 sums = RowSum2(sum_dy, sum_dy_y);
  if (!normalize) {
    const float mean_dy = static_cast<float>(sums.x / dim);
    for (int j = threadIdx.x; j < dim; j += blockDim.x) dxr[j] = dyr[j] - mean_dy;
    return;
  }
  const float a = static_cast<float>(sums.y), b = static_cast<float>(sums.x);
  const float s = sd[blockIdx.x];
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    // No fused multiply-add, so the rounding is the CPU pass's.
    dxr[j] = (dyr[j] - __fmul_rn(__fadd_rn(__fmul_rn(yr[j], a), b), inv_dim)) / s;
  }
}

}  // namespace

void MVNLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (num_ == 0 || dim_ == 0) return;
  MVNForward<<<num_, kRowThreads, 0, cuda::Stream(*ctx_)>>>(
      dim_, bottom[0]->gpu_data(), param_.mvn_param().normalize_variance(),
      param_.mvn_param().eps(), top[0]->mutable_gpu_data(), std_.mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void MVNLayer::BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0] || num_ == 0 || dim_ == 0) return;
  MVNBackward<<<num_, kRowThreads, 0, cuda::Stream(*ctx_)>>>(
      dim_, top[0]->gpu_data(), top[0]->gpu_diff(), std_.gpu_data(),
      param_.mvn_param().normalize_variance(), static_cast<float>(1.0 / dim_),
      bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
