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

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "proto/caffe.pb.h"

namespace cortado::io {

// True when this build reads and writes HDF5 (WITH_HDF5).
bool Hdf5Available();
// Held by every use of the HDF5 library in the process (the functions below and the HDF5Data
// layer), so that ProbeHdf5File's fork never copies the library's own lock taken by another
// thread (the child would wait on it forever).
std::recursive_mutex& Hdf5Mutex();
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

// Opens `path` with the HDF5 library in a child process and walks the metadata of every object
// in it, before this process trusts the library with the file: libhdf5 1.10 itself crashes on
// some damaged files. When `read` is given, the child first runs it (the caller's own reading;
// its errors are ignored there), so that the library meets the file in the child along the very
// path it will take here: where it crashes depends on what it read before. Returns when the
// child survives (whether or not the library could read the file: the caller's own reading
// reports that); throws kIo naming the file when the child dies by a signal or has not finished
// within `timeout_s`. The child also looks up `names` (and the names the readers above look up)
// at the root. The readers above (with their whole reading as `read`) and the HDF5Data layer
// (with its set-up's) call it before they open a file. CORTADO_HDF5_PROBE=0 skips it.
void ProbeHdf5File(const std::string& path, const std::vector<std::string>& names,
                   double timeout_s = 60, const std::function<void()>& read = nullptr);

}  // namespace cortado::io
