// SPDX-License-Identifier: Apache-2.0
#include "solvers/snapshot.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "io/hdf5_io.hpp"
#include "io/proto_io.hpp"

namespace cortado::snapshot {
namespace {

namespace fs = std::filesystem;

// Longest first, so that ".caffemodel.h5" is not taken for a name ending in ".h5".
constexpr const char* kSnapshotSuffixes[] = {".caffemodel.h5", ".solverstate.h5", ".caffemodel",
                                             ".solverstate"};

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string FileName(const std::string& path) { return fs::path(path).filename().string(); }

// Serialises `message`, writes it atomically and returns the SHA-256 (hex) of its bytes.
std::string WriteBinary(const google::protobuf::Message& message, const std::string& path) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    CORTADO_THROW(kInternal, "cannot serialise {} for '{}' (over 2 GiB?)",
                  message.GetDescriptor()->name(), path);
  }
  io::WriteFileAtomic(path, bytes);
  return ToHex(Sha256(bytes));
}

bool IsHexDigest(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string Lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

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

std::string WriteModel(const caffe::NetParameter& net, const std::string& path,
                       caffe::SolverParameter::SnapshotFormat format, bool write_diff) {
  if (format == caffe::SolverParameter::HDF5) {
    RequireHdf5(path);
    io::WriteNetParameterHdf5(net, path, write_diff);
    return "";
  }
  // Net::ToProto already left the diffs out unless asked for.
  return WriteBinary(net, path);
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

std::string WriteState(const caffe::SolverState& state, const std::string& path,
                       caffe::SolverParameter::SnapshotFormat format) {
  if (format == caffe::SolverParameter::HDF5) {
    RequireHdf5(path);
    io::WriteSolverStateHdf5(state, path);
    return "";
  }
  return WriteBinary(state, path);
}

std::string FileSha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) CORTADO_THROW(kNotFound, "cannot open '{}': {}", path, std::strerror(errno));
  Sha256Hasher hasher;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hasher.Update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) CORTADO_THROW(kIo, "error reading '{}'", path);
  return ToHex(hasher.Final());
}

std::string DigestsFileFor(const std::string& snapshot_file) {
  for (const char* suffix : kSnapshotSuffixes) {
    if (EndsWith(snapshot_file, suffix)) {
      return snapshot_file.substr(0, snapshot_file.size() - std::strlen(suffix)) + ".sha256";
    }
  }
  return "";
}

void WriteDigests(const std::string& digests_file, const std::vector<WrittenFile>& files) {
  std::string lines;
  for (const WrittenFile& file : files) {
    // What is recorded is what a reader will find: the file as read back.
    const std::string on_disk = FileSha256(file.path);
    if (!file.digest.empty() && on_disk != file.digest) {
      CORTADO_THROW(kIo,
                    "'{}' reads back other bytes than were written (SHA-256 {} written, {} read)",
                    file.path, file.digest, on_disk);
    }
    // sha256sum's text format, which Snapshots.scala writes and reads too.
    lines += on_disk + "  " + FileName(file.path) + "\n";
  }
  io::WriteFileAtomic(digests_file, lines);
}

std::optional<Digests> Digests::ReadIfPresent(const std::string& digests_file) {
  std::error_code ec;
  if (!fs::exists(digests_file, ec)) return std::nullopt;
  const std::string text = io::ReadFile(digests_file);
  std::string stem = FileName(digests_file);
  if (EndsWith(stem, ".sha256")) stem.resize(stem.size() - std::strlen(".sha256"));
  std::set<std::string> names;
  for (const char* suffix : kSnapshotSuffixes) names.insert(stem + suffix);

  Digests digests;
  digests.file_ = digests_file;
  size_t start = 0;
  for (int line_number = 1; start < text.size(); ++line_number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    // "<digest>  <name>", or "<digest> *<name>" from sha256sum --binary.
    if (line.size() < 67 || !IsHexDigest(line.substr(0, 64)) || line[64] != ' ' ||
        (line[65] != ' ' && line[65] != '*')) {
      CORTADO_THROW(kParse,
                    "{}:{}: not a line of sha256sum's format (64 hex digits, two spaces, a file "
                    "name): '{}'",
                    digests_file, line_number, line);
    }
    const std::string name = line.substr(66);
    if (names.count(name) == 0) {
      CORTADO_THROW(kIo,
                    "{}:{}: lists '{}', which is not a file of this snapshot ({}.caffemodel[.h5] "
                    "or {}.solverstate[.h5])",
                    digests_file, line_number, name, stem, stem);
    }
    if (!digests.digests_.emplace(name, Lower(line.substr(0, 64))).second) {
      CORTADO_THROW(kIo, "{}:{}: lists '{}' a second time", digests_file, line_number, name);
    }
  }
  return digests;
}

void Digests::Check(const std::string& path) const {
  const std::string name = FileName(path);
  const auto recorded = digests_.find(name);
  if (recorded == digests_.end()) {
    std::string listed;
    for (const auto& entry : digests_) listed += (listed.empty() ? "" : ", ") + entry.first;
    CORTADO_THROW(kIo, "{} does not list '{}' (it lists {}): the snapshot is incomplete", file_,
                  name, listed.empty() ? "nothing" : listed);
  }
  const std::string actual = FileSha256(path);
  if (actual != recorded->second) {
    CORTADO_THROW(kIo,
                  "{} does not match the SHA-256 recorded in {} (expected {}, found {}): the "
                  "snapshot was damaged after it was written; resume from the previous snapshot "
                  "instead",
                  path, file_, recorded->second, actual);
  }
}

bool CheckDigestIfPresent(const std::string& path) {
  const std::string digests_file = DigestsFileFor(path);
  if (digests_file.empty()) return false;
  const std::optional<Digests> digests = Digests::ReadIfPresent(digests_file);
  if (!digests) return false;
  digests->Check(path);
  return true;
}

}  // namespace cortado::snapshot
