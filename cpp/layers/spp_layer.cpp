// SPDX-License-Identifier: Apache-2.0
// The level parameters follow Caffe's SPPLayer::GetPoolingParam (src/caffe/layers/spp_layer.cpp);
// the structure (Split, Pooling + Flatten per level, Concat) follows its LayerSetUp.
#include "layers/spp_layer.hpp"

#include <string>

namespace cortado {
namespace {

// Levels beyond this would need more bins than any side has pixels (and 2^level overflows).
constexpr int kMaxPyramidHeight = 30;

caffe::LayerParameter InternalParam(const caffe::LayerParameter& outer, const std::string& suffix,
                                    const char* type) {
  caffe::LayerParameter param;
  param.set_name(outer.name() + "/" + suffix);
  param.set_type(type);
  param.set_phase(outer.phase());
  return param;
}

}  // namespace

caffe::PoolingParameter SPPLayer::LevelPooling(int level, int bottom_h, int bottom_w,
                                               caffe::SPPParameter::PoolMethod pool) {
  const int bins = 1 << level;
  // The smallest kernel whose `bins` windows cover the side, and the padding that centres them:
  // kernel * bins - side pixels of padding are needed, (that + 1) / 2 go on each side.
  const int kernel_h = (bottom_h + bins - 1) / bins;
  const int kernel_w = (bottom_w + bins - 1) / bins;
  caffe::PoolingParameter p;
  p.set_kernel_h(kernel_h);
  p.set_kernel_w(kernel_w);
  p.set_stride_h(kernel_h);
  p.set_stride_w(kernel_w);
  p.set_pad_h((kernel_h * bins - bottom_h + 1) / 2);
  p.set_pad_w((kernel_w * bins - bottom_w + 1) / 2);
  switch (pool) {
    case caffe::SPPParameter::AVE:
      p.set_pool(caffe::PoolingParameter::AVE);
      break;
    case caffe::SPPParameter::STOCHASTIC:
      p.set_pool(caffe::PoolingParameter::STOCHASTIC);
      break;
    default:
      p.set_pool(caffe::PoolingParameter::MAX);
      break;
  }
  return p;
}

void SPPLayer::CheckBottom(const Tensor& bottom) const {
  if (bottom.num_axes() != 4 || bottom.shape(2) <= 0 || bottom.shape(3) <= 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the bottom must be 4-D (num, channels, height, width) with a positive "
                  "height and width, got shape {}",
                  Describe(), bottom.ShapeString());
  }
}

void SPPLayer::BuildPooling(int level, const std::vector<Tensor*>& bottom,
                            const std::vector<Tensor*>& top) {
  caffe::LayerParameter param = InternalParam(param_, "pool" + std::to_string(level), "Pooling");
  *param.mutable_pooling_param() =
      LevelPooling(level, bottom[0]->shape(2), bottom[0]->shape(3), param_.spp_param().pool());
  WithContext(fmt::format("{}: pyramid level {}", Describe(), level), [&] {
    pooling_[level] = CreateLayer(param, ctx_);
    pooling_[level]->Initialize(bottom, top);
  });
}

void SPPLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const caffe::SPPParameter& p = param_.spp_param();
  if (p.pyramid_height() == 0 || p.pyramid_height() > kMaxPyramidHeight) {
    CORTADO_THROW(kInvalidArgument, "{}: spp_param.pyramid_height must be in [1, {}], got {}",
                  Describe(), kMaxPyramidHeight, p.pyramid_height());
  }
  if (bottom[0] == top[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: cannot run in place (top and bottom are one tensor)",
                  Describe());
  }
  CheckBottom(*bottom[0]);
  pyramid_height_ = static_cast<int>(p.pyramid_height());
  bottom_shape_ = bottom[0]->shape();
  split_.reset();
  pooling_.clear();
  flatten_.clear();
  concat_.reset();
  split_tops_.clear();
  pooled_.clear();
  flattened_.clear();
  pooling_.resize(pyramid_height_);
  if (pyramid_height_ == 1) {
    // One level: its Pooling writes the top itself, which stays [N, C, 1, 1] (as in Caffe).
    BuildPooling(0, bottom, top);
    return;
  }
  std::vector<Tensor*> split_tops, flattened;
  for (int level = 0; level < pyramid_height_; ++level) {
    split_tops_.push_back(std::make_unique<Tensor>());
    pooled_.push_back(std::make_unique<Tensor>());
    flattened_.push_back(std::make_unique<Tensor>());
    split_tops.push_back(split_tops_.back().get());
    flattened.push_back(flattened_.back().get());
  }
  split_ = CreateLayer(InternalParam(param_, "split", "Split"), ctx_);
  split_->Initialize(bottom, split_tops);
  for (int level = 0; level < pyramid_height_; ++level) {
    BuildPooling(level, {split_tops_[level].get()}, {pooled_[level].get()});
    flatten_.push_back(
        CreateLayer(InternalParam(param_, "flatten" + std::to_string(level), "Flatten"), ctx_));
    flatten_[level]->Initialize({pooled_[level].get()}, {flattened_[level].get()});
  }
  concat_ = CreateLayer(InternalParam(param_, "concat", "Concat"), ctx_);
  concat_->Initialize(flattened, top);
}

void SPPLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  CheckBottom(*bottom[0]);
  // A new height or width changes every level's kernel and padding: rebuild the Pooling layers
  // (as Caffe does). The other internal layers follow their bottoms.
  const bool new_size =
      bottom[0]->shape(2) != bottom_shape_[2] || bottom[0]->shape(3) != bottom_shape_[3];
  bottom_shape_ = bottom[0]->shape();
  if (pyramid_height_ == 1) {
    if (new_size) {
      BuildPooling(0, bottom, top);
    } else {
      pooling_[0]->Reshape(bottom, top);
    }
    return;
  }
  std::vector<Tensor*> split_tops, flattened;
  for (int level = 0; level < pyramid_height_; ++level) {
    split_tops.push_back(split_tops_[level].get());
    flattened.push_back(flattened_[level].get());
  }
  split_->Reshape(bottom, split_tops);
  for (int level = 0; level < pyramid_height_; ++level) {
    if (new_size) {
      BuildPooling(level, {split_tops[level]}, {pooled_[level].get()});
    } else {
      pooling_[level]->Reshape({split_tops[level]}, {pooled_[level].get()});
    }
    flatten_[level]->Reshape({pooled_[level].get()}, {flattened[level]});
  }
  concat_->Reshape(flattened, top);
}

void SPPLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (pyramid_height_ == 1) {
    pooling_[0]->Forward(bottom, top);
    return;
  }
  std::vector<Tensor*> split_tops, flattened;
  for (int level = 0; level < pyramid_height_; ++level) {
    split_tops.push_back(split_tops_[level].get());
    flattened.push_back(flattened_[level].get());
  }
  split_->Forward(bottom, split_tops);
  for (int level = 0; level < pyramid_height_; ++level) {
    pooling_[level]->Forward({split_tops[level]}, {pooled_[level].get()});
    flatten_[level]->Forward({pooled_[level].get()}, {flattened[level]});
  }
  concat_->Forward(flattened, top);
}

void SPPLayer::BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  if (pyramid_height_ == 1) {
    pooling_[0]->Backward(top, propagate_down, bottom);
    return;
  }
  std::vector<Tensor*> split_tops, flattened;
  for (int level = 0; level < pyramid_height_; ++level) {
    split_tops.push_back(split_tops_[level].get());
    flattened.push_back(flattened_[level].get());
  }
  concat_->Backward(top, std::vector<bool>(pyramid_height_, true), flattened);
  for (int level = 0; level < pyramid_height_; ++level) {
    flatten_[level]->Backward({flattened[level]}, {true}, {pooled_[level].get()});
    pooling_[level]->Backward({pooled_[level].get()}, {true}, {split_tops[level]});
  }
  split_->Backward(split_tops, {true}, bottom);
}

CORTADO_REGISTER_LAYER(SPP, SPPLayer);

}  // namespace cortado
