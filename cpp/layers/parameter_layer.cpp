// SPDX-License-Identifier: Apache-2.0
#include "layers/parameter_layer.hpp"

#include <climits>
#include <cstdint>

#include "math/math.hpp"

namespace cortado {

void ParameterLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                           const std::vector<Tensor*>& /*top*/) {
  const caffe::BlobShape& shape = param_.parameter_param().shape();
  shape_.clear();
  int64_t count = 1;
  for (int i = 0; i < shape.dim_size(); ++i) {
    const int64_t dim = shape.dim(i);
    count *= dim < 0 ? 0 : dim;
    if (dim < 0 || dim > INT_MAX || count > INT_MAX) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: parameter_param.shape [{}] has a negative dimension or more than "
                    "INT_MAX elements",
                    Describe(), fmt::join(shape.dim(), " "));
    }
    shape_.push_back(static_cast<int>(dim));
  }
  if (blobs_.empty()) {
    blobs_.push_back(std::make_shared<Tensor>(shape_));
    math::Set(blobs_[0]->count(), 0.0f, blobs_[0]->mutable_cpu_data());
  } else if (blobs_.size() != 1 || blobs_[0]->shape() != shape_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: expects one blob of shape [{}], got {} blob(s), the first {}", Describe(),
                  fmt::join(shape_, " "), blobs_.size(), blobs_[0]->ShapeString());
  }
}

void ParameterLayer::Reshape(const std::vector<Tensor*>& /*bottom*/,
                             const std::vector<Tensor*>& top) {
  if (blobs_[0]->shape() != shape_) {
    CORTADO_THROW(kInvalidArgument, "{}: blob has shape {} but parameter_param.shape is [{}]",
                  Describe(), blobs_[0]->ShapeString(), fmt::join(shape_, " "));
  }
  top[0]->Reshape(shape_);
}

void ParameterLayer::ForwardCpu(const std::vector<Tensor*>& /*bottom*/,
                                const std::vector<Tensor*>& top) {
  math::Copy(blobs_[0]->count(), blobs_[0]->cpu_data(), top[0]->mutable_cpu_data());
}

void ParameterLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& /*propagate_down*/,
                                 const std::vector<Tensor*>& /*bottom*/) {
  if (!param_propagate_down(0)) return;
  math::Axpy(blobs_[0]->count(), 1.0f, top[0]->cpu_diff(), blobs_[0]->mutable_cpu_diff());
}

CORTADO_REGISTER_LAYER(Parameter, ParameterLayer);

}  // namespace cortado
