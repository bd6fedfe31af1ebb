// SPDX-License-Identifier: Apache-2.0
// Reading and writing model (.caffemodel, .caffemodel.h5) and solver-state (.solverstate,
// .solverstate.h5) files in either of Caffe's snapshot formats. The format of a file being
// read is told by its content (the HDF5 signature), not its name. Every write goes to a
// temporary file renamed into place. All HDF5 use of the solvers is in snapshot.cpp.
//
// Digests: a snapshot written to files ends with `<prefix>_iter_N.sha256`, the SHA-256 of its
// model and its state, one line per file as sha256sum writes them (64 lower-case hex digits, two
// spaces, the file name without its directory), so `sha256sum -c` checks it. The Spark side
// (scala-bridge/.../storage/Snapshots.scala) writes and reads the same file. Snapshots of both
// formats use this name: `<prefix>_iter_N.caffemodel.h5` and `.solverstate.h5` are listed in
// `<prefix>_iter_N.sha256` too. Caffe's snapshots, and Cortado's before the digests, have none.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proto/caffe.pb.h"

namespace cortado::snapshot {

// A model file in either format; for HDF5 only layer names and blobs are filled in.
caffe::NetParameter ReadModel(const std::string& path);
// `net` as produced by Net::ToProto (with diffs when write_diff). Returns the SHA-256 (hex) of
// the bytes handed to the file system for the binary format, "" for HDF5 (the library writes
// the file; only reading it back tells its bytes).
std::string WriteModel(const caffe::NetParameter& net, const std::string& path,
                       caffe::SolverParameter::SnapshotFormat format, bool write_diff);

caffe::SolverState ReadState(const std::string& path);
// As WriteModel.
std::string WriteState(const caffe::SolverState& state, const std::string& path,
                       caffe::SolverParameter::SnapshotFormat format);

// Throws kUnimplemented naming `what` when this build has no HDF5.
void RequireHdf5(const std::string& what);

// The SHA-256 (lower-case hex) of the file at `path`, read in pieces; kNotFound or kIo name it.
std::string FileSha256(const std::string& path);

// The digests file of a snapshot file: "<stem>.sha256" for "<stem>.caffemodel",
// "<stem>.caffemodel.h5", "<stem>.solverstate" or "<stem>.solverstate.h5" (in the same
// directory); "" for any other name.
std::string DigestsFileFor(const std::string& snapshot_file);

// A file just written and the SHA-256 (hex) of the bytes it was written from, "" when unknown.
struct WrittenFile {
  std::string path;
  std::string digest;
};

// Reads each file back and records its SHA-256 in `digests_file` (atomically, lines in the
// order given). A file whose bytes on disk differ from its known digest is kIo naming it, and
// then no digests file is written.
void WriteDigests(const std::string& digests_file, const std::vector<WrittenFile>& files);

// The digests a snapshot's .sha256 file records, by file name.
class Digests {
 public:
  // Reads `digests_file`; std::nullopt when it does not exist. Each non-empty line must be
  // "<64 hex digits>  <name>" (or " *<name>", sha256sum's binary mode), else kParse naming
  // file:line; a name other than one of this snapshot's files (<stem>.caffemodel[.h5],
  // <stem>.solverstate[.h5], where the digests file is <stem>.sha256) or listed twice is kIo
  // naming file:line.
  static std::optional<Digests> ReadIfPresent(const std::string& digests_file);

  // Throws kIo unless the file at `path` is listed (by its name) and its SHA-256 is the one
  // recorded; the message names the file, both digests, and says the snapshot was damaged.
  void Check(const std::string& path) const;

  const std::string& file() const { return file_; }
  // Lower-case hex digest by file name.
  const std::map<std::string, std::string>& digests() const { return digests_; }

 private:
  std::string file_;
  std::map<std::string, std::string> digests_;
};

// When `path` (a .caffemodel[.h5] or .solverstate[.h5]) has a digests file beside it, checks
// `path` against it (Digests::Check) and returns true; returns false when there is none.
bool CheckDigestIfPresent(const std::string& path);

}  // namespace cortado::snapshot
