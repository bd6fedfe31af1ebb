// SPDX-License-Identifier: Apache-2.0
// What rank 0 hands the others through a caller's rendezvous (Spark's allGather): nothing for tcp,
// the MPI port or NCCL id for those backends, and the errors for what does not fit.
#include <gtest/gtest.h>

#include <string>

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace cortado::comm {
namespace {

TEST(RootRendezvousTest, TcpNeedsNothingFromRankZero) {
  EXPECT_EQ(RootRendezvous("tcp"), "");
  CommOptions options;
  options.backend = "tcp";
  SetRootRendezvous("", &options);
  EXPECT_TRUE(options.mpi_port.empty());
  EXPECT_TRUE(options.nccl_id.empty());
  try {
    SetRootRendezvous("something", &options);
    FAIL() << "tcp took a rendezvous value";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "the tcp backend takes nothing from rank 0's rendezvous");
  }
}

TEST(RootRendezvousTest, AnUnknownBackendIsRefusedNamingTheKnownOnes) {
  try {
    RootRendezvous("carrier-pigeon");
    FAIL() << "an unknown backend was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("unknown communicator backend 'carrier-pigeon' (known: "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("tcp"), std::string::npos) << e.what();
  }
}

TEST(RootRendezvousTest, MpiAndNcclStoreWhatRankZeroGave) {
  CommOptions options;
  options.backend = "mpi";
  SetRootRendezvous("port-name", &options);
  EXPECT_EQ(options.mpi_port, "port-name");
  EXPECT_TRUE(options.nccl_id.empty());
  options = CommOptions();
  options.backend = "nccl";
  const std::string id("\0\1\2", 3);
  SetRootRendezvous(id, &options);
  EXPECT_EQ(options.nccl_id, id);
  EXPECT_TRUE(options.mpi_port.empty());
}

}  // namespace
}  // namespace cortado::comm
