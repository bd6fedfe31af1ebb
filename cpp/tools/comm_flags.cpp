// SPDX-License-Identifier: Apache-2.0
#include "tools/comm_flags.hpp"

#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "core/logging.hpp"

extern char** environ;

namespace cortado::tools {
namespace {

int ParseInt(const std::string& what, const std::string& text) {
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  CORTADO_THROW(kInvalidArgument, "{} must be an integer, got '{}'", what, text);
}

double ParsePositive(const Flags& flags, const std::string& name, const char* what) {
  const std::string& text = flags.Get(name);
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value > 0) return value;
  } catch (const std::exception&) {
  }
  CORTADO_THROW(kInvalidArgument, "--{} must be {}, got '{}'", name, what, text);
}

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

}  // namespace

std::vector<FlagSpec> CommFlagSpecs() {
  return {
      {"comm", "",
       "how the processes of a job exchange gradients: tcp, ucx (RDMA where present), mpi or "
       "nccl (default: mpi under mpirun, else tcp)"},
      {"world", "", "the number of processes of the job (not under mpirun)"},
      {"rank", "", "this process's rank, 0 to world - 1 (not under mpirun)"},
      {"peers", "", "tcp, ucx: host:port of every rank, in rank order, comma-separated"},
      {"token", "", "the job's token: ranks with another are refused (default: from --peers)"},
      {"comm_timeout", "120", "seconds a collective may wait for a silent peer"},
      {"connect_timeout", "60", "seconds to wait for every rank to join"},
      {"allreduce", "auto",
       "tcp: how a buffer is summed: ring, doubling (recursive doubling: log2 N steps of the "
       "whole buffer), halving (recursive halving then doubling: 2 log2 N steps, the ring's "
       "bytes) or auto (the one modelled fastest for the buffer and N)"},
      {"hierarchical", "true",
       "tcp: where ranks share hosts (their --peers hosts), sum within each host first, then "
       "between one rank per host"},
      {"latency_kb", "32",
       "tcp, with --allreduce=auto: a step's fixed cost in KB of the link's rate (its latency "
       "times its rate; about 3 on 1 Gbit/s, 32 on 10 Gbit/s)"},
      {"bucket_mb", "25", "the size of a gradient bucket, in MB"},
      {"overlap", "true", "exchange gradient buckets while backward runs"},
      {"overlap_gpu", "false",
       "on a GPU too, through host memory (tcp, ucx, mpi); not yet run on a GPU"},
      {"exchange_precision", "auto",
       "what gradients travel as between processes: float32, bfloat16 or float16 (half the "
       "bytes; tcp only), or auto: the compute precision (--precision on a GPU), else float32"},
  };
}

comm::CommOptions CommOptionsFromFlags(const Flags& flags,
                                       const std::map<std::string, std::string>& env) {
  comm::CommOptions options;
  options.timeout_s = ParsePositive(flags, "comm_timeout", "a positive number of seconds");
  options.connect_timeout_s =
      ParsePositive(flags, "connect_timeout", "a positive number of seconds");
  const auto launcher = env.find("OMPI_COMM_WORLD_SIZE");
  const bool under_mpirun =
      launcher != env.end() && ParseInt("OMPI_COMM_WORLD_SIZE", launcher->second) > 1;
  if (under_mpirun) {
    options.backend = flags.IsSet("comm") ? flags.Get("comm") : "mpi";
    options.world_size = ParseInt("OMPI_COMM_WORLD_SIZE", launcher->second);
    const auto rank = env.find("OMPI_COMM_WORLD_RANK");
    if (rank == env.end()) {
      CORTADO_THROW(kInvalidArgument,
                    "mpirun set OMPI_COMM_WORLD_SIZE but not OMPI_COMM_WORLD_RANK");
    }
    options.rank = ParseInt("OMPI_COMM_WORLD_RANK", rank->second);
    if (flags.IsSet("world") && ParseInt("--world", flags.Get("world")) != options.world_size) {
      CORTADO_THROW(kInvalidArgument, "--world={} but mpirun started {} processes",
                    flags.Get("world"), options.world_size);
    }
    if (flags.IsSet("rank") && ParseInt("--rank", flags.Get("rank")) != options.rank) {
      CORTADO_THROW(kInvalidArgument, "--rank={} but mpirun made this process rank {}",
                    flags.Get("rank"), options.rank);
    }
  } else {
    options.backend = flags.IsSet("comm") ? flags.Get("comm") : "tcp";
    options.world_size = flags.IsSet("world") ? ParseInt("--world", flags.Get("world")) : 1;
    if (options.world_size < 1) {
      CORTADO_THROW(kInvalidArgument, "--world must be at least 1, got {}", options.world_size);
    }
    if (options.world_size > 1 && !flags.IsSet("rank")) {
      CORTADO_THROW(kInvalidArgument, "--world={} needs --rank (0 to {}) for this process",
                    options.world_size, options.world_size - 1);
    }
    options.rank = flags.IsSet("rank") ? ParseInt("--rank", flags.Get("rank")) : 0;
    if (options.rank < 0 || options.rank >= options.world_size) {
      CORTADO_THROW(kInvalidArgument, "--rank={} is outside the world of --world={} (0 to {})",
                    options.rank, options.world_size, options.world_size - 1);
    }
  }
  options.peers = SplitList(flags.Get("peers"));
  if (options.world_size > 1 && (options.backend == "tcp" || options.backend == "ucx") &&
      static_cast<int>(options.peers.size()) != options.world_size) {
    CORTADO_THROW(kInvalidArgument,
                  "--peers names {} address{} but the world has {} ranks: give host:port of every "
                  "rank, in rank order",
                  options.peers.size(), options.peers.size() == 1 ? "" : "es", options.world_size);
  }
  options.token = flags.IsSet("token") ? flags.Get("token") : "cortado:" + flags.Get("peers");
  options.allreduce_algorithm = flags.Get("allreduce");
  if (options.allreduce_algorithm != "auto" && options.allreduce_algorithm != "ring" &&
      options.allreduce_algorithm != "doubling" && options.allreduce_algorithm != "halving") {
    CORTADO_THROW(kInvalidArgument, "--allreduce must be auto, ring, doubling or halving, got '{}'",
                  options.allreduce_algorithm);
  }
  options.hierarchical = flags.GetBool("hierarchical");
  const double latency_kb = ParsePositive(flags, "latency_kb", "a positive number of KB");
  options.latency_bytes = static_cast<size_t>(latency_kb * 1024);
  return options;
}

std::shared_ptr<comm::Communicator> CommunicatorFromFlags(const Flags& flags, int device) {
  comm::CommOptions options = CommOptionsFromFlags(flags, Environment());
  options.device = device;
  if (options.world_size == 1) return nullptr;
  return comm::CreateCommunicator(options);
}

ExchangeOptions ExchangeOptionsFromFlags(const Flags& flags) {
  ExchangeOptions options;
  const double mb = ParsePositive(flags, "bucket_mb", "a positive number of MB");
  options.bucket_bytes = static_cast<size_t>(mb * (1 << 20));
  options.overlap = flags.GetBool("overlap");
  options.overlap_gpu = flags.GetBool("overlap_gpu");
  const std::string wire = flags.Get("exchange_precision");
  if (!comm::ParseWireType(wire, &options.wire)) {
    CORTADO_THROW(kInvalidArgument,
                  "--exchange_precision must be auto, float32, bfloat16 or float16, got '{}'",
                  wire);
  }
  return options;
}

}  // namespace cortado::tools
