// SPDX-License-Identifier: Apache-2.0
// The communicator backends by name; each backend's .cpp ends with
// CORTADO_REGISTER_COMMUNICATOR(name, factory), factory: (const CommOptions&) -> unique_ptr.
#pragma once

#include "comm/communicator.hpp"
#include "core/registry.hpp"

namespace cortado::comm {

using CommunicatorRegistry = Registry<Communicator, const CommOptions&>;

}  // namespace cortado::comm

#define CORTADO_REGISTER_COMMUNICATOR(name, factory)                      \
  static const ::cortado::Registerer<::cortado::comm::Communicator,       \
                                     const ::cortado::comm::CommOptions&> \
      cortado_communicator_registerer_##name(#name, factory)

// A backend whose rank 0 prepares something for the rendezvous (see RootRendezvous).
#define CORTADO_REGISTER_ROOT_RENDEZVOUS(name, prepare)                                        \
  static const ::cortado::comm::RootRendezvousRegisterer cortado_root_rendezvous_##name(#name, \
                                                                                        prepare)
