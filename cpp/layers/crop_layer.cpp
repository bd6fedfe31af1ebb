// SPDX-License-Identifier: Apache-2.0
#include "layers/crop_layer.hpp"

#include <cstring>

#include "math/math.hpp"

namespace cortado {
namespace {

// Copies between a tensor of shape big_shape and the window of it that starts at `offsets`
// and has shape small_shape (which is stored densely): from the window when src_is_big,
// into it otherwise. The last axis is contiguous in both, so each row is one memcpy.
void CopyWindow(const std::vector<int>& big_shape, const std::vector<int>& small_shape,
                const std::vector<int>& offsets, bool src_is_big, const float* src, float* dst) {
  const int num_axes = static_cast<int>(big_shape.size());
  const int row = num_axes == 0 ? 1 : small_shape[num_axes - 1];
  int rows = 1;
  for (int i = 0; i + 1 < num_axes; ++i) rows *= small_shape[i];
  std::vector<int> index(num_axes, 0);  // index of the current row's start in the window
  for (int r = 0; r < rows; ++r) {
    size_t big_offset = 0;
    for (int i = 0; i < num_axes; ++i)
      big_offset = big_offset * big_shape[i] + index[i] + offsets[i];
    const size_t small_offset = static_cast<size_t>(r) * row;
    if (src_is_big) {
      std::memcpy(dst + small_offset, src + big_offset, sizeof(float) * row);
    } else {
      std::memcpy(dst + big_offset, src + small_offset, sizeof(float) * row);
    }
    for (int i = num_axes - 2; i >= 0; --i) {  // odometer over all but the last axis
      if (++index[i] < small_shape[i]) break;
      index[i] = 0;
    }
  }
}

}  // namespace

void CropLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.crop_param();
  const int n = bottom[0]->num_axes();
  if (p.axis() < -n || p.axis() >= n) {
    CORTADO_THROW(kInvalidArgument, "{}: axis {} is out of range for bottom 0 of shape {}",
                  Describe(), p.axis(), bottom[0]->ShapeString());
  }
  start_axis_ = p.axis() < 0 ? p.axis() + n : p.axis();
  if (p.offset_size() > 1 && start_axis_ + p.offset_size() != n) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: {} offsets given but axes {}..{} of bottom 0 (shape {}) make {} cropped "
                  "axes; give one offset or one per cropped axis",
                  Describe(), p.offset_size(), start_axis_, n - 1, bottom[0]->ShapeString(),
                  n - start_axis_);
  }
}

void CropLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const auto& p = param_.crop_param();
  const Tensor& in = *bottom[0];
  const Tensor& ref = *bottom[1];
  const int n = in.num_axes();
  if (ref.num_axes() < n) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bottom 1 (shape {}) has fewer axes than bottom 0 (shape {})", Describe(),
                  ref.ShapeString(), in.ShapeString());
  }
  offsets_.assign(n, 0);
  std::vector<int> shape = in.shape();
  for (int i = start_axis_; i < n; ++i) {
    int offset = 0;
    if (p.offset_size() == 1) {
      offset = static_cast<int>(p.offset(0));
    } else if (p.offset_size() > 1) {
      offset = static_cast<int>(p.offset(i - start_axis_));
    }
    if (offset < 0 || in.shape(i) - offset < ref.shape(i)) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: cannot crop axis {} of bottom 0 (shape {}) to size {} of bottom 1 "
                    "(shape {}) at offset {}",
                    Describe(), i, in.ShapeString(), ref.shape(i), ref.ShapeString(), offset);
    }
    shape[i] = ref.shape(i);
    offsets_[i] = offset;
  }
  top[0]->Reshape(shape);
}

void CropLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (top[0]->count() == 0) return;
  CopyWindow(bottom[0]->shape(), top[0]->shape(), offsets_, true, bottom[0]->cpu_data(),
             top[0]->mutable_cpu_data());
}

void CropLayer::BackwardCpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  float* diff = bottom[0]->mutable_cpu_diff();
  math::Set(bottom[0]->count(), 0.0f, diff);
  if (top[0]->count() == 0) return;
  CopyWindow(bottom[0]->shape(), top[0]->shape(), offsets_, false, top[0]->cpu_diff(), diff);
}

CORTADO_REGISTER_LAYER(Crop, CropLayer);

}  // namespace cortado
