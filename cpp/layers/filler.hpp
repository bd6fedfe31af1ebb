// SPDX-License-Identifier: Apache-2.0
// Weight initialisers (Caffe's fillers), chosen by FillerParameter.type:
// constant, uniform, gaussian (with `sparse`), positive_unitball, xavier, msra, bilinear.
#pragma once

#include "core/context.hpp"
#include "core/tensor.hpp"
#include "proto/caffe.pb.h"

namespace cortado {

// Fills `tensor` as `param` says, drawing from `rng`. Throws kInvalidArgument for an unknown
// type or a shape the filler cannot handle (bilinear needs 4-D square kernels).
void Fill(const caffe::FillerParameter& param, Rng& rng, Tensor* tensor);

}  // namespace cortado
