// SPDX-License-Identifier: Apache-2.0
// .solverstate files: parsing (binary, or HDF5 by content) and restoring a solver from them, with
// the checks of the history's length and shapes. The state's learned_net is not followed: the
// weights come from the solver's own net, so that inputs reach the state checks.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/context.hpp"
#include "fuzz/fixed_net.hpp"
#include "fuzz/fuzz_util.hpp"
#include "io/hdf5_io.hpp"
#include "io/proto_io.hpp"
#include "solvers/solver.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cortado::fuzz::SetUpOnce();
  static cortado::Context ctx(cortado::Device::Cpu(), 1);
  static const std::unique_ptr<cortado::Solver> solver = [] {
    caffe::SolverParameter param;
    cortado::io::ReadProtoFromTextString(cortado::fuzz::kFixedNet, "fixed",
                                         param.mutable_net_param());
    param.set_type("Adam");  // two history blobs per parameter
    param.set_base_lr(0.01f);
    param.set_lr_policy("fixed");
    param.set_max_iter(10);
    param.set_snapshot_prefix("/nonexistent/fuzz");
    return cortado::CreateSolver(param, &ctx);
  }();
  static const caffe::NetParameter weights = [] {
    caffe::NetParameter w;
    solver->net()->ToProto(&w, false);
    return w;
  }();
  static cortado::fuzz::InputFile file("state.solverstate");
  const std::string& path = file.Write(data, size);
  cortado::fuzz::ExpectErrorsOnly([&] {
    caffe::SolverState state;
    if (cortado::io::IsHdf5File(path)) {
      state = cortado::io::ReadSolverStateHdf5(path);
    } else {
      cortado::io::ReadProtoFromBinaryFile(path, &state);
    }
    solver->Restore(state, weights, path, "fixed weights");
  });
  return 0;
}
