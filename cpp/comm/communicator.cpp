// SPDX-License-Identifier: Apache-2.0
#include "comm/communicator.hpp"

#include <map>

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

const char* WireTypeName(WireType wire) {
  switch (wire) {
    case WireType::kBFloat16:
      return "bfloat16";
    case WireType::kFloat16:
      return "float16";
    default:
      return "float32";
  }
}

bool ParseWireType(const std::string& text, std::optional<WireType>* wire) {
  if (text == "auto") {
    wire->reset();
  } else if (text == "float32") {
    *wire = WireType::kFloat32;
  } else if (text == "bfloat16") {
    *wire = WireType::kBFloat16;
  } else if (text == "float16") {
    *wire = WireType::kFloat16;
  } else {
    return false;
  }
  return true;
}

std::string Communicator::Describe() const {
  return fmt::format("{}: rank {} of {}", backend(), rank(), size());
}

std::string Communicator::WaitingOn(double /*min_seconds*/) const { return {}; }

std::vector<std::string> CommunicatorBackends() { return CommunicatorRegistry::Get().Types(); }

namespace {

std::map<std::string, std::string (*)()>& RootRendezvousTable() {
  static std::map<std::string, std::string (*)()> table;
  return table;
}

}  // namespace

RootRendezvousRegisterer::RootRendezvousRegisterer(const char* backend, std::string (*prepare)()) {
  RootRendezvousTable().emplace(backend, prepare);
}

std::string RootRendezvous(const std::string& backend) {
  if (!CommunicatorRegistry::Get().Has(backend)) {
    CORTADO_THROW(kInvalidArgument, "unknown communicator backend '{}' (known: {})", backend,
                  fmt::join(CommunicatorBackends(), ", "));
  }
  const auto it = RootRendezvousTable().find(backend);
  return it == RootRendezvousTable().end() ? std::string() : it->second();
}

void SetRootRendezvous(const std::string& value, CommOptions* options) {
  if (options->backend == "mpi") {
    options->mpi_port = value;
  } else if (options->backend == "nccl") {
    options->nccl_id = value;
  } else if (!value.empty()) {
    CORTADO_THROW(kInvalidArgument, "the {} backend takes nothing from rank 0's rendezvous",
                  options->backend);
  }
}

}  // namespace cortado::comm
