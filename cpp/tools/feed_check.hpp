// SPDX-License-Identifier: Apache-2.0
// The command line has nothing to fill a feed layer with (CoSData, or MemoryData with
// source_class: the Spark path pushes their batches): a net with one would wait forever for its
// first batch, so the commands refuse it up front.
#pragma once

#include <string>

namespace cortado {
class Net;
}  // namespace cortado

namespace cortado::tools {

// kInvalidArgument naming the first feed layer of `net` and what to use instead; `command` is
// "cortado time", "cortado test" or "cortado train".
void RefuseFeedLayers(const Net& net, const std::string& command);

}  // namespace cortado::tools
