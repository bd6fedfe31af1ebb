// SPDX-License-Identifier: Apache-2.0
// Caffe's HDF5 model and solver-state files (`snapshot_format: HDF5`).
//
// A model file (.caffemodel.h5) holds group "data" with one group per layer name and, inside
// it, one float dataset per parameter blob named "0", "1", ... with the blob's shape; with
// diffs, group "diff" mirrors it. A solver-state file (.solverstate.h5) holds the int datasets
// "iter" and "current_step", the string dataset "learned_net", and group "history" with
// datasets "0", "1", ... (one per learnable parameter). Writes go to a temporary file renamed
// into place. Errors name the file and the object inside it.
#pragma once

#include <string>

#include "proto/caffe.pb.h"

namespace cortado::io {

// True when this build reads and writes HDF5 (WITH_HDF5).
bool Hdf5Available();
// True when `path` starts with the HDF5 signature (whatever its extension).
bool IsHdf5File(const std::string& path);

// Writes the layers' names and blobs (data, and diff when present in the protos and write_diff)
// as float datasets; double_data is narrowed to float. As in Caffe, every layer gets a group,
// and of two layers with one name only the first is written. A layer name that HDF5 cannot hold
// (empty, "." or containing '/') is kInvalidArgument.
void WriteNetParameterHdf5(const caffe::NetParameter& net, const std::string& path,
                           bool write_diff = false);
// Reads a model file into a NetParameter holding only layer names and blobs (shapes set; data,
// and diff when the file has group "diff"), layers in name order as HDF5 lists them. Float,
// double and integer datasets are read as float. A blob index the file leaves out (Caffe skips
// parameters shared with an earlier layer) becomes an empty BlobProto with no shape; writing
// skips such placeholders again. Shapes are not checked here: Net::CopyTrainedLayersFrom does.
caffe::NetParameter ReadNetParameterHdf5(const std::string& path);

void WriteSolverStateHdf5(const caffe::SolverState& state, const std::string& path);
caffe::SolverState ReadSolverStateHdf5(const std::string& path);

}  // namespace cortado::io
