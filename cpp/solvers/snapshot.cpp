// SPDX-License-Identifier: Apache-2.0
#include "solvers/snapshot.hpp"

#include "core/error.hpp"
#include "io/hdf5_io.hpp"
#include "io/proto_io.hpp"

namespace cortado::snapshot {

void RequireHdf5(const std::string& what) {
  if (!io::Hdf5Available()) {
    CORTADO_THROW(kUnimplemented, "{}: this build has no HDF5 support (WITH_HDF5=OFF)", what);
  }
}

caffe::NetParameter ReadModel(const std::string& path) {
  if (io::IsHdf5File(path)) {
    RequireHdf5(path);
    return io::ReadNetParameterHdf5(path);
  }
  return io::ReadNetParameterFromBinaryFile(path);
}

void WriteModel(const caffe::NetParameter& net, const std::string& path,
                caffe::SolverParameter::SnapshotFormat format, bool write_diff) {
  if (format == caffe::SolverParameter::HDF5) {
    RequireHdf5(path);
    io::WriteNetParameterHdf5(net, path, write_diff);
  } else {
    // Net::ToProto already left the diffs out unless asked for.
    io::WriteProtoToBinaryFile(net, path);
  }
}

caffe::SolverState ReadState(const std::string& path) {
  caffe::SolverState state;
  if (io::IsHdf5File(path)) {
    RequireHdf5(path);
    return io::ReadSolverStateHdf5(path);
  }
  io::ReadProtoFromBinaryFile(path, &state);
  return state;
}

void WriteState(const caffe::SolverState& state, const std::string& path,
                caffe::SolverParameter::SnapshotFormat format) {
  if (format == caffe::SolverParameter::HDF5) {
    RequireHdf5(path);
    io::WriteSolverStateHdf5(state, path);
  } else {
    io::WriteProtoToBinaryFile(state, path);
  }
}

}  // namespace cortado::snapshot
