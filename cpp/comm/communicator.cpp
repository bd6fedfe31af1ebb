// SPDX-License-Identifier: Apache-2.0
#include "comm/communicator.hpp"

#include "comm/registry.hpp"
#include "core/error.hpp"

namespace cortado::comm {

std::unique_ptr<Communicator> CreateCommunicator(const CommOptions& options) {
  if (options.world_size < 1) {
    CORTADO_THROW(kInvalidArgument, "the world size must be at least 1, not {}",
                  options.world_size);
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    CORTADO_THROW(kInvalidArgument, "rank {} is outside a world of {} ranks (0 to {})",
                  options.rank, options.world_size, options.world_size - 1);
  }
  return CommunicatorRegistry::Get().Create(options.backend, "communicator backend", options);
}

std::vector<std::string> CommunicatorBackends() { return CommunicatorRegistry::Get().Types(); }

}  // namespace cortado::comm
