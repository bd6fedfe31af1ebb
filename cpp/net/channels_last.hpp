// SPDX-License-Identifier: Apache-2.0
// Mixed precision with channels-last blobs: which of a net's 16-bit blobs to keep in NHWC
// (Tensor::set_home_nhwc). A pure function of the net's graph, so that it is tested without a
// GPU; Net::KeepHalfTensors applies it (half_tensors.cpp).
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.hpp"
#include "layers/layer.hpp"

namespace cortado {

// One layer as the choice sees it: how its passes take NHWC blobs (Layer::NhwcTensors; a layer
// fused into another counts as kSame, its host computes it in place), whether it is a
// convolution (the layers NHWC is for: tensor cores read it, and the copies into it go), and
// the blobs it reads or writes.
struct LayoutUser {
  Layer::NhwcUse use = Layer::NhwcUse::kNo;
  bool convolution = false;
  std::vector<int> blobs;
};

// Blobs joined by a kSame layer, or that share a data buffer (`group_of_blob`, one id per
// buffer), form one set; a set is kept in NHWC when every blob in it may be (`may_be_nhwc`: a
// 16-bit 4-D blob whose planes have more than one position), no kNo layer touches it, and a
// convolution does. Returns, per blob, whether it is kept in NHWC.
std::vector<bool> ChannelsLastBlobs(const std::vector<bool>& may_be_nhwc,
                                    const std::vector<int>& group_of_blob,
                                    const std::vector<LayoutUser>& layers);

// The same choice serves channel blocks on the CPU (blocked_tensors.cpp). Its inputs from a net:
// one group id per blob, alike for blobs that share a data buffer (a Split's tops and its
// bottom, a Flatten's top and bottom)...
std::vector<int> DataBufferGroups(const std::vector<std::shared_ptr<Tensor>>& blobs);
// ...and each layer as a LayoutUser, its use given by `use_of` (a fused layer's passes are its
// host's: kSame), a convolution being a "Convolution" layer whose use is kEach.
std::vector<LayoutUser> LayoutUsers(const std::vector<std::unique_ptr<Layer>>& layers,
                                    const std::vector<std::vector<int>>& bottom_ids,
                                    const std::vector<std::vector<int>>& top_ids,
                                    Layer::NhwcUse (Layer::*use_of)() const);

}  // namespace cortado
