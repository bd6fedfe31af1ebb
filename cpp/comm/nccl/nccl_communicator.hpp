// SPDX-License-Identifier: Apache-2.0
// The `nccl` backend: NCCL between GPUs of different processes, one GPU per rank
// (CommOptions::device). Built only with NCCL (WITH_NCCL).
//
// Set-up: the ranks first form a tcp ring from CommOptions::peers (the bootstrap). Rank 0's
// ncclUniqueId comes from CommOptions::nccl_id when the caller's rendezvous carried it
// (NewNcclId on rank 0), else rank 0 draws one and broadcasts it over the bootstrap. The NCCL
// communicator is made non-blocking (ncclConfig_t::blocking = 0), so that set-up and every
// collective can be waited on with the timeout and Abort (ncclCommAbort) of the interface.
//
// Memory: AllReduce takes device memory on the rank's device (NCCL, on the backend's own stream,
// synchronised before it returns) or host memory (small control values: the bootstrap ring).
// Broadcast, AllGather and Barrier work on host memory, over the bootstrap.
#pragma once

#include <string>

namespace cortado::comm {

// A fresh ncclUniqueId, as bytes, for CommOptions::nccl_id (rank 0 draws it; the caller's
// rendezvous hands it to every rank).
std::string NewNcclId();

}  // namespace cortado::comm
