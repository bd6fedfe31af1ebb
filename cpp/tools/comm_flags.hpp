// SPDX-License-Identifier: Apache-2.0
// The flags that make `cortado train` one rank of a job of several processes
// (docs/distributed.md):
//   under mpirun            nothing: the mpi backend, rank and size from the launcher;
//   --world=N --rank=R --peers=h0:p0,h1:p1,...   the tcp ring (or --comm=mpi through
//                           ompi-server, --comm=nccl with GPUs);
// and the tuning ones (--token, --comm_timeout, --connect_timeout, --bucket_mb, --overlap,
// --exchange_precision).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "parallel/gradient_exchange.hpp"
#include "tools/flags.hpp"

namespace cortado::tools {

std::vector<FlagSpec> CommFlagSpecs();

// The communicator the flags and the environment (`env`: the launcher's variables, e.g.
// OMPI_COMM_WORLD_SIZE) ask for; null for a single process. Contradictions (a rank outside the
// world, peers that do not match it, --rank beside mpirun's) are kInvalidArgument naming the
// flags. Blocks until every rank has joined.
comm::CommOptions CommOptionsFromFlags(const Flags& flags,
                                       const std::map<std::string, std::string>& env);
// `device`: the CUDA device of this rank's first replica (the nccl backend's GPU).
std::shared_ptr<comm::Communicator> CommunicatorFromFlags(const Flags& flags, int device);
ExchangeOptions ExchangeOptionsFromFlags(const Flags& flags);

}  // namespace cortado::tools
