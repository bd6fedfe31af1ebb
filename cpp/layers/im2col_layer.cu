// SPDX-License-Identifier: Apache-2.0
// Im2col on the GPU: one image at a time through the device im2col/col2im kernels of
// math/gpu.hpp (the ones the convolution layers use), as Caffe's Im2colLayer::Forward_gpu does.
#include "core/cuda.hpp"
#include "layers/im2col_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

constexpr int kMaxGpuSpatialAxes = 6;  // math::gpu::Im2colNd's limit

}  // namespace

void Im2colLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (!Use2d() && num_spatial_axes_ > kMaxGpuSpatialAxes) {
    CORTADO_THROW(kInvalidArgument, "{}: the GPU pass handles at most {} spatial axes, bottom {}",
                  Describe(), kMaxGpuSpatialAxes, bottom[0]->ShapeString());
  }
  const float* x = bottom[0]->gpu_data();
  float* y = top[0]->mutable_gpu_data();
  for (int n = 0; n < num_; ++n) {
    const float* image = x + static_cast<size_t>(n) * bottom_dim_;
    float* columns = y + static_cast<size_t>(n) * top_dim_;
    if (Use2d()) {
      math::gpu::Im2col(*ctx_, image, image_shape_[0], image_shape_[1], image_shape_[2],
                        kernel_shape_[0], kernel_shape_[1], pad_[0], pad_[1], stride_[0],
                        stride_[1], dilation_[0], dilation_[1], columns);
    } else {
      math::gpu::Im2colNd(*ctx_, image, num_spatial_axes_, image_shape_.data(),
                          column_shape_.data(), kernel_shape_.data(), pad_.data(), stride_.data(),
                          dilation_.data(), columns);
    }
  }
}

void Im2colLayer::BackwardGpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  if (!Use2d() && num_spatial_axes_ > kMaxGpuSpatialAxes) {
    CORTADO_THROW(kInvalidArgument, "{}: the GPU pass handles at most {} spatial axes, bottom {}",
                  Describe(), kMaxGpuSpatialAxes, bottom[0]->ShapeString());
  }
  const float* dy = top[0]->gpu_diff();
  float* dx = bottom[0]->mutable_gpu_diff();
  // The device Col2im overwrites each image.
  for (int n = 0; n < num_; ++n) {
    const float* columns = dy + static_cast<size_t>(n) * top_dim_;
    float* image = dx + static_cast<size_t>(n) * bottom_dim_;
    if (Use2d()) {
      math::gpu::Col2im(*ctx_, columns, image_shape_[0], image_shape_[1], image_shape_[2],
                        kernel_shape_[0], kernel_shape_[1], pad_[0], pad_[1], stride_[0],
                        stride_[1], dilation_[0], dilation_[1], image);
    } else {
      math::gpu::Col2imNd(*ctx_, columns, num_spatial_axes_, image_shape_.data(),
                          column_shape_.data(), kernel_shape_.data(), pad_.data(), stride_.data(),
                          dilation_.data(), image);
    }
  }
}

}  // namespace cortado
