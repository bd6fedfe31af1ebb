// SPDX-License-Identifier: Apache-2.0
// The GPU half of BaseConvolutionLayer: Caffe's im2col + GEMM method, one image at a time,
// with the column matrix in the context's CUDA workspace. Used by Convolution and
// Deconvolution on every engine value.
#include "core/cuda.hpp"
#include "layers/base_conv_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

// top[n, c, s] += bias[c].
__global__ void AddBias(int64_t count, int spatial, int channels, const float* bias, float* top) {
  CORTADO_KERNEL_LOOP(i, count) top[i] += bias[(i / spatial) % channels];
}

// One block per channel c: bias_diff[c] += the sum of top_diff[n, c, :] over every image n.
// Each thread sums a fixed subset and the block adds the partial sums in a fixed tree, so the
// result repeats bit for bit.
__global__ void SumBiasDiff(int num, int spatial, int channels, const float* top_diff,
                            float* bias_diff) {
  __shared__ float partial[cuda::kThreads];
  const int c = blockIdx.x;
  const int64_t per_channel = static_cast<int64_t>(num) * spatial;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
    const int64_t n = j / spatial;
    sum += top_diff[(n * channels + c) * spatial + (j - n * spatial)];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) bias_diff[c] += partial[0];
}

}  // namespace

const float* BaseConvolutionLayer::ColumnsGpu(const float* input) {
  if (is_1x1_) return input;
  const size_t floats = static_cast<size_t>(kernel_dim_) * group_ * conv_out_spatial_dim_;
  float* columns = static_cast<float*>(cuda::Get(*ctx_).Workspace(sizeof(float) * floats));
  if (num_spatial_axes_ == 2 && !force_nd_im2col_) {
    math::gpu::Im2col(*ctx_, input, conv_in_channels_, conv_input_shape_[1], conv_input_shape_[2],
                      kernel_shape_[0], kernel_shape_[1], pad_[0], pad_[1], stride_[0], stride_[1],
                      dilation_[0], dilation_[1], columns);
  } else {
    math::gpu::Im2colNd(*ctx_, input, num_spatial_axes_, conv_input_shape_.data(),
                        col_shape_.data(), kernel_shape_.data(), pad_.data(), stride_.data(),
                        dilation_.data(), columns);
  }
  return columns;
}

void BaseConvolutionLayer::ForwardGemmGpu(const float* columns, const float* weights,
                                          float* output) {
  const int m = conv_out_channels_ / group_;
  const int k = kernel_dim_;
  const int n = conv_out_spatial_dim_;
  for (int g = 0; g < group_; ++g) {
    math::gpu::Gemm(*ctx_, false, false, m, n, k, 1.0f, weights + static_cast<size_t>(g) * m * k,
                    columns + static_cast<size_t>(g) * k * n, 0.0f,
                    output + static_cast<size_t>(g) * m * n);
  }
}

void BaseConvolutionLayer::BackwardGemmGpu(const float* output, const float* weights,
                                           float* input) {
  const int m = conv_out_channels_ / group_;
  const int k = kernel_dim_;
  const int n = conv_out_spatial_dim_;
  // A 1x1 convolution's columns are the image: the product goes straight into it.
  float* columns = input;
  if (!is_1x1_) {
    const size_t floats = static_cast<size_t>(k) * group_ * n;
    columns = static_cast<float*>(cuda::Get(*ctx_).Workspace(sizeof(float) * floats));
  }
  for (int g = 0; g < group_; ++g) {
    math::gpu::Gemm(*ctx_, true, false, k, n, m, 1.0f, weights + static_cast<size_t>(g) * m * k,
                    output + static_cast<size_t>(g) * m * n, 0.0f,
                    columns + static_cast<size_t>(g) * k * n);
  }
  if (is_1x1_) return;
  // Col2im overwrites the image (a gather over the columns, no atomics).
  if (num_spatial_axes_ == 2 && !force_nd_im2col_) {
    math::gpu::Col2im(*ctx_, columns, conv_in_channels_, conv_input_shape_[1], conv_input_shape_[2],
                      kernel_shape_[0], kernel_shape_[1], pad_[0], pad_[1], stride_[0], stride_[1],
                      dilation_[0], dilation_[1], input);
  } else {
    math::gpu::Col2imNd(*ctx_, columns, num_spatial_axes_, conv_input_shape_.data(),
                        col_shape_.data(), kernel_shape_.data(), pad_.data(), stride_.data(),
                        dilation_.data(), input);
  }
}

void BaseConvolutionLayer::WeightGemmGpu(const float* columns, const float* output,
                                         float* weight_diff) {
  const int m = conv_out_channels_ / group_;
  const int k = kernel_dim_;
  const int n = conv_out_spatial_dim_;
  for (int g = 0; g < group_; ++g) {
    math::gpu::Gemm(*ctx_, false, true, m, k, n, 1.0f, output + static_cast<size_t>(g) * m * n,
                    columns + static_cast<size_t>(g) * k * n, 1.0f,
                    weight_diff + static_cast<size_t>(g) * m * k);
  }
}

void BaseConvolutionLayer::ForwardBiasGpu(const float* bias, float* top) {
  const int64_t count = static_cast<int64_t>(num_) * num_output_ * out_spatial_dim_;
  AddBias<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(count, out_spatial_dim_,
                                                                           num_output_, bias, top);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void BaseConvolutionLayer::BackwardBiasGpu(const float* top_diff, float* bias_diff) {
  SumBiasDiff<<<num_output_, cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      num_, out_spatial_dim_, num_output_, top_diff, bias_diff);
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
