// SPDX-License-Identifier: Apache-2.0
#include "layers/input_layer.hpp"

namespace cortado {

void InputLayer::Setup(const std::vector<Tensor*>& /*bottom*/, const std::vector<Tensor*>& top) {
  const auto& p = param_.input_param();
  const int num_top = static_cast<int>(top.size());
  const int num_shapes = p.shape_size();
  if (num_shapes != 0 && num_shapes != 1 && num_shapes != num_top) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: input_param must give no shape, one shape, or one per top ({} tops), "
                  "got {} shapes",
                  Describe(), num_top, num_shapes);
  }
  if (num_shapes == 0) return;
  for (int i = 0; i < num_top; ++i) {
    top[i]->Reshape(p.shape(num_shapes == 1 ? 0 : i));
  }
}

CORTADO_REGISTER_LAYER(Input, InputLayer);

}  // namespace cortado
