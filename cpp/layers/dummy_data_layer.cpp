// SPDX-License-Identifier: Apache-2.0
#include "layers/dummy_data_layer.hpp"

#include <cstdint>
#include <utility>

#include "layers/filler.hpp"

namespace cortado {

void DummyDataLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                           const std::vector<Tensor*>& top) {
  const auto& p = param_.dummy_data_param();
  const int num_top = static_cast<int>(top.size());
  const int num_fillers = p.data_filler_size();
  if (num_fillers != 0 && num_fillers != 1 && num_fillers != num_top) {
    CORTADO_THROW(kInvalidArgument, "{}: needs 0, 1 or one data_filler per top ({} tops), got {}",
                  Describe(), num_top, num_fillers);
  }
  const bool legacy = p.num_size() + p.channels_size() + p.height_size() + p.width_size() > 0;
  if (legacy) {
    if (p.shape_size() != 0) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: give either shape or num/channels/height/width, not both", Describe());
    }
    const std::pair<const char*, int> sizes[] = {{"num", p.num_size()},
                                                 {"channels", p.channels_size()},
                                                 {"height", p.height_size()},
                                                 {"width", p.width_size()}};
    for (const auto& [field, size] : sizes) {
      if (size != 1 && size != num_top) {
        CORTADO_THROW(kInvalidArgument, "{}: give '{}' once or once per top ({} tops), got {}",
                      Describe(), field, num_top, size);
      }
    }
  } else if (p.shape_size() != 1 && p.shape_size() != num_top) {
    CORTADO_THROW(kInvalidArgument, "{}: give 'shape' once or once per top ({} tops), got {}",
                  Describe(), num_top, p.shape_size());
  }

  fillers_.clear();
  if (num_fillers == 0) {
    caffe::FillerParameter zero;
    zero.set_type("constant");
    zero.set_value(0.0f);
    fillers_.push_back(zero);
  } else {
    fillers_.assign(p.data_filler().begin(), p.data_filler().end());
  }
  refill_.clear();
  for (const auto& filler : fillers_) refill_.push_back(filler.type() != "constant");

  for (int i = 0; i < num_top; ++i) {
    if (legacy) {
      auto pick = [&](const google::protobuf::RepeatedField<uint32_t>& values) {
        return static_cast<int>(values.Get(values.size() == 1 ? 0 : i));
      };
      top[i]->Reshape(pick(p.num()), pick(p.channels()), pick(p.height()), pick(p.width()));
    } else {
      top[i]->Reshape(p.shape(p.shape_size() == 1 ? 0 : i));
    }
  }
  // Constant tops are filled here once; the others at every Forward.
  for (int i = 0; i < num_top; ++i) {
    const int f = fillers_.size() == 1 ? 0 : i;
    if (!refill_[f]) Fill(fillers_[f], ctx_->rng(), top[i]);
  }
}

void DummyDataLayer::ForwardCpu(const std::vector<Tensor*>& /*bottom*/,
                                const std::vector<Tensor*>& top) {
  for (size_t i = 0; i < top.size(); ++i) {
    const size_t f = fillers_.size() == 1 ? 0 : i;
    if (refill_[f]) Fill(fillers_[f], ctx_->rng(), top[i]);
  }
}

CORTADO_REGISTER_LAYER(DummyData, DummyDataLayer);

}  // namespace cortado
