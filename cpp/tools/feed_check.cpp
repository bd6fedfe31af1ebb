// SPDX-License-Identifier: Apache-2.0
#include "tools/feed_check.hpp"

#include "core/error.hpp"
#include "data/feed_data_layer.hpp"
#include "net/net.hpp"

namespace cortado::tools {

void RefuseFeedLayers(const Net& net, const std::string& command) {
  for (size_t i = 0; i < net.layers().size(); ++i) {
    if (FeedOf(*net.layers()[i]) == nullptr) continue;
    CORTADO_THROW(kInvalidArgument,
                  "net '{}': layer '{}' ({}) is fed from Spark (Cortado.train, CortadoOnSpark), "
                  "and {} has nothing to feed it with: give the net an Input, Data or HDF5Data "
                  "layer instead",
                  net.name(), net.layer_names()[i], net.layers()[i]->type(), command);
  }
}

}  // namespace cortado::tools
