// SPDX-License-Identifier: Apache-2.0
#include "layers/im2col_layer.hpp"

#include <climits>
#include <cstdint>
#include <string>

#include "math/math.hpp"

namespace cortado {
namespace {

// One geometry value per spatial axis, by Caffe's Im2colLayer::LayerSetUp rules: the 2-D
// `what`_h / `what`_w pair when either is set (then both are taken), else the repeated `field`
// given once or once per axis, else `default_value` (-1: required). Values below `minimum`
// are refused.
std::vector<int> AxisValues(const std::string& layer, const char* field, const char* what,
                            const google::protobuf::RepeatedField<uint32_t>& values, bool has_hw,
                            uint32_t h, uint32_t w, int num_spatial_axes, int default_value,
                            int minimum) {
  std::vector<int> result;
  if (has_hw) {
    if (num_spatial_axes != 2) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: {}_h/{}_w can only be used for 2-D im2col; the bottom has {} spatial "
                    "axes",
                    layer, what, what, num_spatial_axes);
    }
    if (values.size() != 0) {
      CORTADO_THROW(kInvalidArgument, "{}: give either {} or {}_h/{}_w, not both", layer, field,
                    what, what);
    }
    result = {static_cast<int>(h), static_cast<int>(w)};
  } else if (values.size() == 0 && default_value >= 0) {
    result.assign(num_spatial_axes, default_value);
  } else if (values.size() == 1 || values.size() == num_spatial_axes) {
    for (int i = 0; i < num_spatial_axes; ++i) {
      result.push_back(static_cast<int>(values.Get(values.size() == 1 ? 0 : i)));
    }
  } else {
    CORTADO_THROW(kInvalidArgument,
                  "{}: {} must be given once or once per spatial axis ({}), got {} values", layer,
                  field, num_spatial_axes, values.size());
  }
  for (int v : result) {
    if (v < minimum) {
      CORTADO_THROW(kInvalidArgument, "{}: {} must be {}, got {}", layer, what,
                    minimum > 0 ? "positive" : "non-negative", fmt::join(result, " x "));
    }
  }
  return result;
}

}  // namespace

void Im2colLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.convolution_param();
  const std::string me = Describe();
  const Tensor& in = *bottom[0];
  if (p.axis() < -in.num_axes() || p.axis() >= in.num_axes()) {
    CORTADO_THROW(kInvalidArgument, "{}: convolution_param.axis {} is out of range for bottom {}",
                  me, p.axis(), in.ShapeString());
  }
  channel_axis_ = in.CanonicalAxisIndex(p.axis());
  num_spatial_axes_ = in.num_axes() - channel_axis_ - 1;
  if (num_spatial_axes_ < 1) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: needs at least one spatial axis after the channel axis {}; bottom {}", me,
                  channel_axis_, in.ShapeString());
  }
  force_nd_im2col_ = p.force_nd_im2col();
  kernel_shape_ =
      AxisValues(me, "kernel_size", "kernel", p.kernel_size(), p.has_kernel_h() || p.has_kernel_w(),
                 p.kernel_h(), p.kernel_w(), num_spatial_axes_, -1, 1);
  stride_ = AxisValues(me, "stride", "stride", p.stride(), p.has_stride_h() || p.has_stride_w(),
                       p.stride_h(), p.stride_w(), num_spatial_axes_, 1, 1);
  pad_ = AxisValues(me, "pad", "pad", p.pad(), p.has_pad_h() || p.has_pad_w(), p.pad_h(), p.pad_w(),
                    num_spatial_axes_, 0, 0);
  dilation_ =
      AxisValues(me, "dilation", "dilation", p.dilation(), false, 0, 0, num_spatial_axes_, 1, 1);
}

void Im2colLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (bottom[0] == top[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: cannot run in place", Describe());
  }
  if (in.num_axes() != channel_axis_ + 1 + num_spatial_axes_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: was set up for {} spatial axes after channel axis {}; bottom is now {}",
                  Describe(), num_spatial_axes_, channel_axis_, in.ShapeString());
  }
  std::vector<int> top_shape = in.shape();
  int64_t top_count = in.count(0, channel_axis_);
  int64_t column_rows = in.shape(channel_axis_);
  for (int i = 0; i < num_spatial_axes_; ++i) column_rows *= kernel_shape_[i];
  if (column_rows > INT_MAX) {
    CORTADO_THROW(kInvalidArgument, "{}: {} channels x kernel {} exceed INT_MAX column rows",
                  Describe(), in.shape(channel_axis_), fmt::join(kernel_shape_, "x"));
  }
  top_shape[channel_axis_] = static_cast<int>(column_rows);
  top_count *= column_rows;
  for (int i = 0; i < num_spatial_axes_; ++i) {
    const int axis = channel_axis_ + 1 + i;
    const int64_t extent = int64_t{dilation_[i]} * (kernel_shape_[i] - 1) + 1;
    const int64_t out = (in.shape(axis) + 2 * int64_t{pad_[i]} - extent) / stride_[i] + 1;
    if (in.shape(axis) + 2 * int64_t{pad_[i]} < extent || out > INT_MAX) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: spatial axis {} of bottom {} (pad {}) is smaller than the dilated kernel "
                    "extent {} (kernel {}, dilation {})",
                    Describe(), axis, in.ShapeString(), pad_[i], extent, kernel_shape_[i],
                    dilation_[i]);
    }
    top_shape[axis] = static_cast<int>(out);
    top_count *= out;
  }
  if (top_count > INT_MAX) {
    CORTADO_THROW(kInvalidArgument, "{}: top [{}] for bottom {} exceeds INT_MAX elements",
                  Describe(), fmt::join(top_shape, " "), in.ShapeString());
  }
  top[0]->Reshape(top_shape);
  num_ = in.count(0, channel_axis_);
  bottom_dim_ = in.count(channel_axis_);
  top_dim_ = top[0]->count(channel_axis_);
  image_shape_.assign(in.shape().begin() + channel_axis_, in.shape().end());
  column_shape_.assign(top_shape.begin() + channel_axis_, top_shape.end());
}

void Im2colLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  for (int n = 0; n < num_; ++n) {
    const float* image = x + static_cast<size_t>(n) * bottom_dim_;
    float* columns = y + static_cast<size_t>(n) * top_dim_;
    if (Use2d()) {
      math::Im2col(image, image_shape_[0], image_shape_[1], image_shape_[2], kernel_shape_[0],
                   kernel_shape_[1], pad_[0], pad_[1], stride_[0], stride_[1], dilation_[0],
                   dilation_[1], columns);
    } else {
      math::Im2colNd(image, num_spatial_axes_, image_shape_.data(), column_shape_.data(),
                     kernel_shape_.data(), pad_.data(), stride_.data(), dilation_.data(), columns);
    }
  }
}

void Im2colLayer::BackwardCpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  // Col2im overwrites each image (it zeroes it first).
  for (int n = 0; n < num_; ++n) {
    const float* columns = dy + static_cast<size_t>(n) * top_dim_;
    float* image = dx + static_cast<size_t>(n) * bottom_dim_;
    if (Use2d()) {
      math::Col2im(columns, image_shape_[0], image_shape_[1], image_shape_[2], kernel_shape_[0],
                   kernel_shape_[1], pad_[0], pad_[1], stride_[0], stride_[1], dilation_[0],
                   dilation_[1], image);
    } else {
      math::Col2imNd(columns, num_spatial_axes_, image_shape_.data(), column_shape_.data(),
                     kernel_shape_.data(), pad_.data(), stride_.data(), dilation_.data(), image);
    }
  }
}

CORTADO_REGISTER_LAYER(Im2col, Im2colLayer);

}  // namespace cortado
