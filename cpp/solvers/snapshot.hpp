// SPDX-License-Identifier: Apache-2.0
// Reading and writing model (.caffemodel, .caffemodel.h5) and solver-state (.solverstate,
// .solverstate.h5) files in either of Caffe's snapshot formats. The format of a file being
// read is told by its content (the HDF5 signature), not its name. Every write goes to a
// temporary file renamed into place. All HDF5 use of the solvers is in snapshot.cpp.
#pragma once

#include <string>

#include "proto/caffe.pb.h"

namespace cortado::snapshot {

// A model file in either format; for HDF5 only layer names and blobs are filled in.
caffe::NetParameter ReadModel(const std::string& path);
// `net` as produced by Net::ToProto (with diffs when write_diff).
void WriteModel(const caffe::NetParameter& net, const std::string& path,
                caffe::SolverParameter::SnapshotFormat format, bool write_diff);

caffe::SolverState ReadState(const std::string& path);
void WriteState(const caffe::SolverState& state, const std::string& path,
                caffe::SolverParameter::SnapshotFormat format);

// Throws kUnimplemented naming `what` when this build has no HDF5.
void RequireHdf5(const std::string& what);

}  // namespace cortado::snapshot
