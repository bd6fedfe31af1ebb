// SPDX-License-Identifier: Apache-2.0
// Caffe's HDF5 layout, written and read with the HDF5 C API (no H5LT, so only libhdf5 is
// needed). The layout follows BVLC Caffe: Net::ToHDF5 and Net::CopyTrainedLayersFromHDF5 in
// src/caffe/net.cpp, SGDSolver::SnapshotSolverStateToHDF5 and RestoreSolverStateFromHDF5 in
// src/caffe/solvers/sgd_solver.cpp, and the dataset helpers in src/caffe/util/hdf5.cpp.
#include "io/hdf5_io.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/logging.hpp"

#if CORTADO_WITH_HDF5
#include <hdf5.h>
#endif

namespace cortado::io {

bool IsHdf5File(const std::string& path) {
  // The format specification's signature; a file may also carry a user block first (the
  // signature then sits at 512, 1024, ...), which neither Caffe nor Cortado writes.
  static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  std::ifstream in(path, std::ios::binary);
  char head[sizeof(kSignature)] = {};
  if (!in.read(head, sizeof(head))) return false;
  return std::memcmp(head, kSignature, sizeof(kSignature)) == 0;
}

#if CORTADO_WITH_HDF5

namespace {

// ---- handles -------------------------------------------------------------------------------

// Owns one HDF5 identifier and closes it with `CloseFn`. Move-only.
template <herr_t (*CloseFn)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() {
    // A failed close here is on an error path already being reported: nothing to add.
    if (id_ >= 0) (void)CloseFn(id_);
  }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      if (id_ >= 0) CloseFn(id_);
      id_ = std::exchange(other.id_, -1);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and returns HDF5's status (closing a file flushes it, so that status matters).
  herr_t Close() { return id_ >= 0 ? CloseFn(std::exchange(id_, -1)) : 0; }

 private:
  hid_t id_ = -1;
};

using FileHandle = Handle<H5Fclose>;
using GroupHandle = Handle<H5Gclose>;
using DatasetHandle = Handle<H5Dclose>;
using DataspaceHandle = Handle<H5Sclose>;
using TypeHandle = Handle<H5Tclose>;
using PropertyListHandle = Handle<H5Pclose>;

// ---- errors --------------------------------------------------------------------------------

// HDF5's own account of the failure on this thread's error stack: the outermost description
// (what the API call could not do) and the innermost (why), e.g. "unable to open file: file
// signature not found". Clears the stack.
std::string TakeHdf5Error() {
  struct Collected {
    std::string outer;
    std::string inner;
  } collected;
  auto visit = [](unsigned, const H5E_error2_t* entry, void* data) -> herr_t {
    auto* out = static_cast<Collected*>(data);
    const char* desc = entry->desc != nullptr ? entry->desc : "";
    if (out->inner.empty()) out->inner = desc;  // walking upward: the innermost comes first
    out->outer = desc;
    return 0;
  };
  // Best effort: this runs while reporting another failure, and has nothing to report to.
  (void)H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &collected);
  (void)H5Eclear2(H5E_DEFAULT);
  if (collected.outer == collected.inner) return collected.outer;
  if (collected.outer.empty()) return collected.inner;
  if (collected.inner.empty()) return collected.outer;
  return collected.outer + ": " + collected.inner;
}

// Where an operation happens: the file as the caller named it. Errors read
// "<file>: <object>: <what> (HDF5: <reason>)".
class Site {
 public:
  explicit Site(const std::string& path) : path_(path) {
    // Report through cortado::Error only; HDF5 would otherwise print its stack to stderr.
    // The setting is per thread in a thread-safe HDF5, so set it on every entry.
    // Should it ever fail, HDF5 would merely print as well; the errors still reach the caller.
    (void)H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }

  const std::string& path() const { return path_; }

  [[noreturn]] void Fail(ErrorCode code, const std::string& object, const std::string& what) const {
    std::string message = object.empty() ? fmt::format("{}: {}", path_, what)
                                         : fmt::format("{}: {}: {}", path_, object, what);
    const std::string reason = TakeHdf5Error();
    if (!reason.empty()) message += fmt::format(" (HDF5: {})", reason);
    throw Error(code, message, __FILE__, __LINE__);
  }

  // Returns `id` when valid, or fails with `what`.
  hid_t Check(hid_t id, ErrorCode code, const std::string& object, const char* what) const {
    if (id < 0) Fail(code, object, what);
    return id;
  }
  void Check(herr_t status, const std::string& object, const char* what) const {
    if (status < 0) Fail(ErrorCode::kIo, object, what);
  }

 private:
  const std::string& path_;
};

std::string Join(const std::string& parent, const std::string& name) {
  return parent == "/" ? "/" + name : parent + "/" + name;
}

// HDF5 splits link names at '/', and "." names the group itself.
void CheckLinkName(const Site& site, const std::string& name, const char* what) {
  if (name.empty() || name == "." || name.find('/') != std::string::npos) {
    site.Fail(ErrorCode::kInvalidArgument, "",
              fmt::format("{} '{}' cannot name an HDF5 group (empty, '.' or containing '/'); "
                          "use snapshot_format: BINARYPROTO",
                          what, name));
  }
}

// ---- links and groups ----------------------------------------------------------------------

bool LinkExists(const Site& site, hid_t loc, const std::string& object, const std::string& name) {
  const htri_t exists = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (exists < 0) site.Fail(ErrorCode::kParse, "link " + Join(object, name), "cannot look up");
  return exists > 0;
}

GroupHandle OpenGroup(const Site& site, hid_t loc, const std::string& parent,
                      const std::string& name) {
  const std::string object = "group " + Join(parent, name);
  if (!LinkExists(site, loc, parent, name)) site.Fail(ErrorCode::kParse, object, "not found");
  return GroupHandle(site.Check(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), ErrorCode::kParse, object,
                                "cannot open"));
}

// A creation property list (`list_class`: H5P_FILE_CREATE, H5P_GROUP_CREATE or
// H5P_DATASET_CREATE) that stores no modification times in object headers, so that the same
// weights always give the same file bytes (snapshots of a resumed run compare equal).
PropertyListHandle NoTimesList(const Site& site, hid_t list_class, const std::string& object) {
  PropertyListHandle list(
      site.Check(H5Pcreate(list_class), ErrorCode::kIo, object, "cannot make a property list"));
  site.Check(H5Pset_obj_track_times(list.get(), 0), object, "cannot turn off time tracking");
  return list;
}

GroupHandle CreateGroup(const Site& site, hid_t loc, const std::string& parent,
                        const std::string& name) {
  const std::string object = "group " + Join(parent, name);
  PropertyListHandle gcpl = NoTimesList(site, H5P_GROUP_CREATE, object);
  return GroupHandle(site.Check(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                                ErrorCode::kIo, object, "cannot create"));
}

// The names of the links in a group, in name order (Caffe's iteration order).
std::vector<std::string> LinkNames(const Site& site, hid_t group, const std::string& object) {
  H5G_info_t info;
  site.Check(H5Gget_info(group, &info), "group " + object, "cannot list");
  std::vector<std::string> names;
  names.reserve(info.nlinks);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size =
        H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (size < 0) site.Fail(ErrorCode::kParse, "group " + object, "cannot read a link name");
    std::string name(static_cast<size_t>(size) + 1, '\0');
    if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                           H5P_DEFAULT) < 0) {
      site.Fail(ErrorCode::kParse, "group " + object, "cannot read a link name");
    }
    name.resize(static_cast<size_t>(size));
    names.push_back(std::move(name));
  }
  return names;
}

// No Caffe layer has anywhere near this many parameter blobs; a larger index is a corrupt file,
// not a reason to allocate placeholders.
constexpr int kMaxBlobIndex = 4096;

// Maps the datasets "0", "1", ... of a blob group to their indices. Any other name is an error.
std::map<int, std::string> BlobIndices(const Site& site, hid_t group, const std::string& object) {
  std::map<int, std::string> indices;
  for (const std::string& name : LinkNames(site, group, object)) {
    const bool digits = !name.empty() && name.size() <= 4 &&
                        name.find_first_not_of("0123456789") == std::string::npos &&
                        (name == "0" || name[0] != '0');
    const int index = digits ? std::stoi(name) : -1;
    if (index < 0 || index >= kMaxBlobIndex) {
      site.Fail(ErrorCode::kParse, "dataset " + Join(object, name),
                fmt::format("not a blob index (expected 0 to {})", kMaxBlobIndex - 1));
    }
    indices.emplace(index, name);
  }
  return indices;
}

// ---- datasets ------------------------------------------------------------------------------

DataspaceHandle CreateSpace(const Site& site, const std::vector<hsize_t>& dims,
                            const std::string& object) {
  // A 0-axis blob (a scalar) gets a scalar dataspace, as H5Screate_simple(0, ...) gives.
  const hid_t id = dims.empty()
                       ? H5Screate(H5S_SCALAR)
                       : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  return DataspaceHandle(site.Check(id, ErrorCode::kIo, object, "cannot create the dataspace"));
}

// Writes `count` floats with shape `dims` as H5T_NATIVE_FLOAT, as Caffe's float build does.
void WriteFloats(const Site& site, hid_t loc, const std::string& parent, const std::string& name,
                 const std::vector<hsize_t>& dims, const float* values, size_t count) {
  const std::string object = "dataset " + Join(parent, name);
  DataspaceHandle space = CreateSpace(site, dims, object);
  PropertyListHandle dcpl = NoTimesList(site, H5P_DATASET_CREATE, object);
  DatasetHandle dataset(site.Check(H5Dcreate2(loc, name.c_str(), H5T_NATIVE_FLOAT, space.get(),
                                              H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                   ErrorCode::kIo, object, "cannot create"));
  if (count > 0) {
    site.Check(H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values),
               object, "cannot write");
  }
  site.Check(dataset.Close(), object, "cannot close");
}

// Caffe's hdf5_save_int: a 1-axis dataset of one native int.
void WriteInt(const Site& site, hid_t loc, const std::string& name, int value) {
  const std::string object = "dataset " + Join("/", name);
  DataspaceHandle space = CreateSpace(site, {1}, object);
  PropertyListHandle dcpl = NoTimesList(site, H5P_DATASET_CREATE, object);
  DatasetHandle dataset(site.Check(H5Dcreate2(loc, name.c_str(), H5T_NATIVE_INT, space.get(),
                                              H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                   ErrorCode::kIo, object, "cannot create"));
  site.Check(H5Dwrite(dataset.get(), H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), object,
             "cannot write");
  site.Check(dataset.Close(), object, "cannot close");
}

// What H5LTmake_dataset_string writes (Caffe's hdf5_save_string): a scalar dataset of one
// fixed-length, NUL-terminated ASCII string of size strlen + 1.
void WriteString(const Site& site, hid_t loc, const std::string& name, const std::string& value) {
  const std::string object = "dataset " + Join("/", name);
  TypeHandle type(site.Check(H5Tcopy(H5T_C_S1), ErrorCode::kIo, object, "cannot make its type"));
  site.Check(H5Tset_size(type.get(), value.size() + 1), object, "cannot size its type");
  site.Check(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), object, "cannot set its padding");
  DataspaceHandle space = CreateSpace(site, {}, object);
  PropertyListHandle dcpl = NoTimesList(site, H5P_DATASET_CREATE, object);
  DatasetHandle dataset(site.Check(
      H5Dcreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
      ErrorCode::kIo, object, "cannot create"));
  site.Check(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, value.c_str()),
             object, "cannot write");
  site.Check(dataset.Close(), object, "cannot close");
}

// An open dataset with its extent, for reading.
struct OpenDataset {
  DatasetHandle dataset;
  TypeHandle type;
  H5T_class_t type_class;
  std::vector<hsize_t> dims;  // empty for a scalar
  size_t count;               // number of elements
};

OpenDataset Open(const Site& site, hid_t loc, const std::string& parent, const std::string& name) {
  const std::string object = "dataset " + Join(parent, name);
  if (!LinkExists(site, loc, parent, name)) site.Fail(ErrorCode::kParse, object, "not found");
  OpenDataset out;
  out.dataset = DatasetHandle(site.Check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT),
                                         ErrorCode::kParse, object, "cannot open"));
  out.type = TypeHandle(
      site.Check(H5Dget_type(out.dataset.get()), ErrorCode::kParse, object, "cannot read type"));
  out.type_class = H5Tget_class(out.type.get());
  if (out.type_class == H5T_NO_CLASS) site.Fail(ErrorCode::kParse, object, "cannot read type");
  DataspaceHandle space(site.Check(H5Dget_space(out.dataset.get()), ErrorCode::kParse, object,
                                   "cannot read its dataspace"));
  const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
  if (space_class != H5S_SCALAR && space_class != H5S_SIMPLE) {
    site.Fail(ErrorCode::kParse, object, "has no extent (a null dataspace)");
  }
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) site.Fail(ErrorCode::kParse, object, "cannot read its rank");
  out.dims.resize(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), out.dims.data(), nullptr) < 0) {
    site.Fail(ErrorCode::kParse, object, "cannot read its dimensions");
  }
  // Blobs are indexed with int and protobuf's repeated fields hold at most INT_MAX values.
  unsigned long long count = 1;
  for (hsize_t dim : out.dims) {
    if (dim > static_cast<hsize_t>(INT_MAX) || (dim > 0 && count > INT_MAX / dim)) {
      site.Fail(
          ErrorCode::kParse, object,
          fmt::format("has dimensions {} (over {} elements)", fmt::join(out.dims, " x "), INT_MAX));
    }
    count *= dim;
  }
  // Datasets are read whole, and the library converts them through buffers of the file's
  // element size: numbers of more than 8 bytes are no numbers Caffe writes, and a dataset larger
  // than the memory tensors may use cannot be loaded.
  const size_t element = H5Tget_size(out.type.get());
  if ((out.type_class == H5T_FLOAT || out.type_class == H5T_INTEGER) &&
      (element == 0 || element > 8)) {
    site.Fail(ErrorCode::kParse, object,
              fmt::format("holds numbers of {} bytes; expected 1 to 8", element));
  }
  const unsigned long long bytes = count * std::max<size_t>(element, sizeof(float));
  if (bytes > HostMemoryLimit()) {
    site.Fail(ErrorCode::kParse, object,
              fmt::format("has dimensions {} ({} bytes), more than the {} bytes of memory this "
                          "process may use",
                          fmt::join(out.dims, " x "), bytes, HostMemoryLimit()));
  }
  out.count = static_cast<size_t>(count);
  return out;
}

// Reads a numeric dataset as floats (HDF5 converts double and integer data), setting the
// blob's shape from the dataset's when `shape` is non-null.
void ReadFloats(const Site& site, hid_t loc, const std::string& parent, const std::string& name,
                caffe::BlobShape* shape, google::protobuf::RepeatedField<float>* values) {
  const std::string object = "dataset " + Join(parent, name);
  OpenDataset in = Open(site, loc, parent, name);
  if (in.type_class != H5T_FLOAT && in.type_class != H5T_INTEGER) {
    site.Fail(ErrorCode::kParse, object,
              fmt::format("holds non-numeric data (HDF5 type class {}); expected float or double",
                          static_cast<int>(in.type_class)));
  }
  if (shape != nullptr) {
    shape->Clear();
    for (hsize_t dim : in.dims) shape->add_dim(static_cast<int64_t>(dim));
  }
  values->Resize(static_cast<int>(in.count), 0.0f);
  if (in.count > 0) {
    site.Check(H5Dread(in.dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                       values->mutable_data()),
               object, "cannot read");
  }
}

// Caffe's hdf5_load_int: one number.
int ReadInt(const Site& site, hid_t loc, const std::string& name) {
  const std::string object = "dataset " + Join("/", name);
  OpenDataset in = Open(site, loc, "/", name);
  if (in.type_class != H5T_INTEGER && in.type_class != H5T_FLOAT) {
    site.Fail(ErrorCode::kParse, object, "does not hold a number");
  }
  if (in.count != 1) {
    site.Fail(ErrorCode::kParse, object, fmt::format("holds {} values; expected one", in.count));
  }
  int value = 0;
  site.Check(H5Dread(in.dataset.get(), H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value),
             object, "cannot read");
  return value;
}

// Caffe's hdf5_load_string; also accepts the variable-length strings h5py writes.
std::string ReadString(const Site& site, hid_t loc, const std::string& name) {
  const std::string object = "dataset " + Join("/", name);
  OpenDataset in = Open(site, loc, "/", name);
  if (in.type_class != H5T_STRING) site.Fail(ErrorCode::kParse, object, "does not hold a string");
  if (in.count != 1) {
    site.Fail(ErrorCode::kParse, object, fmt::format("holds {} strings; expected one", in.count));
  }
  const htri_t variable = H5Tis_variable_str(in.type.get());
  if (variable < 0) site.Fail(ErrorCode::kParse, object, "cannot read its string type");
  if (variable > 0) {
    TypeHandle memory(site.Check(H5Tcopy(H5T_C_S1), ErrorCode::kIo, object, "cannot read"));
    site.Check(H5Tset_size(memory.get(), H5T_VARIABLE), object, "cannot read");
    char* text = nullptr;
    site.Check(H5Dread(in.dataset.get(), memory.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &text),
               object, "cannot read");
    std::string value = text != nullptr ? text : "";
    if (text != nullptr) (void)H5free_memory(text);  // the value is already copied
    return value;
  }
  const size_t size = H5Tget_size(in.type.get());
  if (size == 0) site.Fail(ErrorCode::kParse, object, "cannot read its string size");
  std::string buffer(size, '\0');
  site.Check(H5Dread(in.dataset.get(), in.type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()),
             object, "cannot read");
  buffer.resize(::strnlen(buffer.c_str(), size));
  return buffer;
}

// ---- files ---------------------------------------------------------------------------------

// Removes a temporary file unless Keep() was called.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void Keep() { path_.clear(); }

 private:
  std::string path_;
};

// Creates "<path>.tmp.<pid>", lets `body` fill it, closes and syncs it, and renames it to
// `path` (the convention of io::WriteFileAtomic). On any failure the temporary is removed.
template <typename Body>
void WriteHdf5Atomic(const Site& site, Body&& body) {
  const std::string& path = site.path();
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  TempFileGuard guard(temp);
  PropertyListHandle fcpl = NoTimesList(site, H5P_FILE_CREATE, "");  // for the root group
  FileHandle file(H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT));
  if (!file.valid()) site.Fail(ErrorCode::kIo, "", fmt::format("cannot create '{}'", temp));
  body(file.get());
  // Every object `body` opened is closed by now, so this really closes (and flushes) the file.
  site.Check(file.Close(), "", "cannot close the file (flush failed)");
  const int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    site.Fail(ErrorCode::kIo, "", fmt::format("cannot flush '{}': {}", temp, std::strerror(err)));
  }
  ::close(fd);
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    site.Fail(ErrorCode::kIo, "",
              fmt::format("cannot rename '{}' into place: {}", temp, std::strerror(err)));
  }
  guard.Keep();
}

void CheckReadable(const Site& site) {
  if (::access(site.path().c_str(), R_OK) != 0) {
    const int err = errno;
    site.Fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "",
              fmt::format("cannot open: {}", std::strerror(err)));
  }
}

// Opens a file that CheckReadable has passed (ReadProbed checks it once, before the child).
FileHandle OpenForReading(const Site& site) {
  const std::string& path = site.path();
  FileHandle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) {
    site.Fail(ErrorCode::kParse, "",
              IsHdf5File(path) ? "cannot open as HDF5 (truncated or corrupt?)"
                               : "not an HDF5 file (no HDF5 signature)");
  }
  return file;
}

// ---- blobs ---------------------------------------------------------------------------------

// The blob's dimensions: its shape, or the legacy (num, channels, height, width).
std::vector<hsize_t> BlobDims(const Site& site, const caffe::BlobProto& blob,
                              const std::string& object) {
  std::vector<long long> dims;
  if (blob.has_num() || blob.has_channels() || blob.has_height() || blob.has_width()) {
    dims = {blob.num(), blob.channels(), blob.height(), blob.width()};
  } else {
    for (int64_t dim : blob.shape().dim()) dims.push_back(dim);
  }
  std::vector<hsize_t> out;
  for (long long dim : dims) {
    if (dim < 0) {
      site.Fail(ErrorCode::kInvalidArgument, object,
                fmt::format("blob has a negative dimension ({})", fmt::join(dims, " ")));
    }
    out.push_back(static_cast<hsize_t>(dim));
  }
  return out;
}

// The floats to store for a blob (its `floats`, or its `doubles` narrowed, as Cortado computes
// in float), checked against the element count of its shape. Empty when it has none.
std::vector<float> BlobValues(const Site& site,
                              const google::protobuf::RepeatedField<float>& floats,
                              const google::protobuf::RepeatedField<double>& doubles, size_t count,
                              const std::string& object, const char* what) {
  std::vector<float> values;
  if (!floats.empty()) {
    values.assign(floats.begin(), floats.end());
  } else {
    values.assign(doubles.begin(), doubles.end());
  }
  if (!values.empty() && values.size() != count) {
    site.Fail(ErrorCode::kInvalidArgument, object,
              fmt::format("blob holds {} {} values but its shape has {} elements", values.size(),
                          what, count));
  }
  return values;
}

size_t ElementCount(const std::vector<hsize_t>& dims) {
  size_t count = 1;
  for (hsize_t dim : dims) count *= static_cast<size_t>(dim);
  return count;
}

// A blob with no shape and no values: the placeholder ReadNetParameterHdf5 puts where a Caffe
// file leaves out a parameter shared with an earlier layer. Writing skips it likewise.
bool IsPlaceholder(const caffe::BlobProto& blob) {
  return !blob.has_shape() && !blob.has_num() && !blob.has_channels() && !blob.has_height() &&
         !blob.has_width() && blob.data_size() == 0 && blob.double_data_size() == 0 &&
         blob.diff_size() == 0 && blob.double_diff_size() == 0;
}

// Writes blob `index` of a layer (or the solver history) into `group` at `parent`/<index>:
// its data, or its diff when `diff`. Skips blobs that have no values to write.
void WriteBlob(const Site& site, hid_t group, const std::string& parent, int index,
               const caffe::BlobProto& blob, bool diff) {
  if (IsPlaceholder(blob)) return;
  const std::string name = std::to_string(index);
  const std::string object = "dataset " + Join(parent, name);
  const std::vector<hsize_t> dims = BlobDims(site, blob, object);
  const size_t count = ElementCount(dims);
  const std::vector<float> values =
      diff ? BlobValues(site, blob.diff(), blob.double_diff(), count, object, "diff")
           : BlobValues(site, blob.data(), blob.double_data(), count, object, "data");
  if (values.empty() && count > 0) {
    if (diff) return;  // this blob carries no diff
    site.Fail(ErrorCode::kInvalidArgument, object,
              fmt::format("blob of {} elements holds no data", count));
  }
  WriteFloats(site, group, parent, name, dims, values.data(), values.size());
}

// Reads the blob datasets of `group` into `layer`'s blobs: data, or diff when `diff`. Indices
// left out (shared parameters in Caffe's files) become placeholders.
void ReadLayerBlobs(const Site& site, hid_t group, const std::string& object, bool diff,
                    caffe::LayerParameter* layer) {
  for (const auto& [index, name] : BlobIndices(site, group, object)) {
    while (layer->blobs_size() <= index) layer->add_blobs();
    caffe::BlobProto* blob = layer->mutable_blobs(index);
    if (!diff) {
      ReadFloats(site, group, object, name, blob->mutable_shape(), blob->mutable_data());
      continue;
    }
    caffe::BlobShape shape;
    ReadFloats(site, group, object, name, &shape, blob->mutable_diff());
    if (!blob->has_shape()) {
      *blob->mutable_shape() = shape;
    } else if (blob->shape().SerializeAsString() != shape.SerializeAsString()) {
      site.Fail(ErrorCode::kParse, "dataset " + Join(object, name),
                fmt::format("diff has shape ({}) but the data has ({})",
                            fmt::join(shape.dim(), " "), fmt::join(blob->shape().dim(), " ")));
    }
  }
}

// Visits every object of the file (H5Ovisit reaches each through its group's links, reading the
// same symbol tables, heaps and B-trees the readers read) and touches each dataset's dataspace
// and type, and each group's link count and names in name order, as LinkNames reads them (the
// count walks a group's B-tree by another path than the iteration). Runs in the probe's child.
herr_t ProbeObject(hid_t root, const char* name, const H5O_info_t* info, void* /*data*/) {
  H5Lexists(root, name, H5P_DEFAULT);  // the lookup the readers make, as well as the iteration
  if (info->type == H5O_TYPE_GROUP) {
    const hid_t group = H5Gopen2(root, name, H5P_DEFAULT);
    if (group >= 0) {
      H5G_info_t group_info;
      if (H5Gget_info(group, &group_info) >= 0) {
        for (hsize_t i = 0; i < group_info.nlinks; ++i) {
          if (H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0,
                                 H5P_DEFAULT) < 0) {
            break;
          }
        }
      }
      H5Gclose(group);
    }
  }
  if (info->type == H5O_TYPE_DATASET) {
    const hid_t dataset = H5Dopen2(root, name, H5P_DEFAULT);
    if (dataset >= 0) {
      const hid_t space = H5Dget_space(dataset);
      if (space >= 0) {
        hsize_t dims[H5S_MAX_RANK];
        H5Sget_simple_extent_dims(space, dims, nullptr);
        H5Sclose(space);
      }
      const hid_t type = H5Dget_type(dataset);
      if (type >= 0) H5Tclose(type);
      H5Dclose(dataset);
    }
  }
  return 0;
}

// How long the child of ProbeHdf5File may take over a model or state file (it reads it whole).
constexpr double kProbeTimeoutS = 120;

constexpr int kProbeReadable = 0;
constexpr int kProbeLibraryError = 3;

[[noreturn]] void ProbeInChild(const std::string& path, const std::vector<std::string>& names,
                               const std::function<void()>& read) {
  // The parent's handlers (a JVM's among them) must not run here: a crash ends the child.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (read) {
    try {
      read();
    } catch (...) {  // the caller's own reading reports it
    }
  }
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) ::_exit(kProbeLibraryError);
  // The names the callers look up at the root, whether or not the file has them (a lookup
  // walks the damaged structures too).
  for (const std::string& name : names) H5Lexists(file, name.c_str(), H5P_DEFAULT);
  for (const char* name : {"data", "diff", "iter", "current_step", "learned_net", "history"}) {
    H5Lexists(file, name, H5P_DEFAULT);
  }
  const herr_t visited = H5Ovisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, ProbeObject, nullptr);
  H5Fclose(file);
  ::_exit(visited < 0 ? kProbeLibraryError : kProbeReadable);
}

caffe::NetParameter ReadNetParameter(const Site& site) {
  FileHandle file = OpenForReading(site);
  caffe::NetParameter net;
  std::map<std::string, int> layer_index;
  {
    GroupHandle data = OpenGroup(site, file.get(), "/", "data");
    for (const std::string& name : LinkNames(site, data.get(), "/data")) {
      GroupHandle group = OpenGroup(site, data.get(), "/data", name);
      caffe::LayerParameter* layer = net.add_layer();
      layer->set_name(name);
      layer_index[name] = net.layer_size() - 1;
      ReadLayerBlobs(site, group.get(), Join("/data", name), false, layer);
    }
  }
  if (LinkExists(site, file.get(), "/", "diff")) {
    GroupHandle diff = OpenGroup(site, file.get(), "/", "diff");
    for (const std::string& name : LinkNames(site, diff.get(), "/diff")) {
      GroupHandle group = OpenGroup(site, diff.get(), "/diff", name);
      auto it = layer_index.find(name);
      caffe::LayerParameter* layer = nullptr;
      if (it != layer_index.end()) {
        layer = net.mutable_layer(it->second);
      } else {
        layer = net.add_layer();
        layer->set_name(name);
      }
      ReadLayerBlobs(site, group.get(), Join("/diff", name), true, layer);
    }
  }
  return net;
}

caffe::SolverState ReadSolverState(const Site& site) {
  FileHandle file = OpenForReading(site);
  caffe::SolverState state;
  state.set_iter(ReadInt(site, file.get(), "iter"));
  if (LinkExists(site, file.get(), "/", "learned_net")) {
    state.set_learned_net(ReadString(site, file.get(), "learned_net"));
  }
  // Caffe always writes current_step; files from other writers may not.
  if (LinkExists(site, file.get(), "/", "current_step")) {
    state.set_current_step(ReadInt(site, file.get(), "current_step"));
  }
  GroupHandle history = OpenGroup(site, file.get(), "/", "history");
  const std::map<int, std::string> indices = BlobIndices(site, history.get(), "/history");
  int expected = 0;
  for (const auto& [index, name] : indices) {
    if (index != expected) {
      site.Fail(ErrorCode::kParse, fmt::format("dataset /history/{}", expected), "not found");
    }
    caffe::BlobProto* blob = state.add_history();
    ReadFloats(site, history.get(), "/history", name, blob->mutable_shape(), blob->mutable_data());
    ++expected;
  }
  return state;
}

// Reads `path` with `read` (ReadNetParameter or ReadSolverState) once in ProbeHdf5File's child,
// then here.
template <typename Read>
auto ReadProbed(const std::string& path, Read read) {
  const std::lock_guard<std::recursive_mutex> lock(Hdf5Mutex());
  Site site(path);
  CheckReadable(site);
  ProbeHdf5File(path, {}, kProbeTimeoutS, [&] { read(site); });
  return read(site);
}

}  // namespace

void ProbeHdf5File(const std::string& path, const std::vector<std::string>& names, double timeout_s,
                   const std::function<void()>& read) {
  const std::lock_guard<std::recursive_mutex> lock(Hdf5Mutex());
  static const bool enabled = [] {
    const char* value = std::getenv("CORTADO_HDF5_PROBE");
    return value == nullptr || std::string(value) != "0";
  }();
  if (!enabled) return;
  const pid_t child = ::fork();
  if (child < 0) {
    // No process to spare (memory, limits): read in this process, as without the probe.
    CORTADO_LOG_WARN("cannot start a process to check HDF5 file '{}' ({}); reading it directly",
                     path, std::strerror(errno));
    return;
  }
  if (child == 0) ProbeInChild(path, names, read);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      CORTADO_THROW(kIo, "HDF5 file '{}': cannot wait for the process checking it: {}", path,
                    std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      CORTADO_THROW(kIo,
                    "HDF5 file '{}' is damaged: the HDF5 library did not finish reading its "
                    "structure within {:g} s (checked in a separate process)",
                    path, timeout_s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFSIGNALED(status)) {
    CORTADO_THROW(kIo,
                  "HDF5 file '{}' is damaged: the HDF5 library crashed reading it (signal {}, "
                  "in a separate process that checks files first; this one did not open it)",
                  path, WTERMSIG(status));
  }
  if (!WIFEXITED(status) ||
      (WEXITSTATUS(status) != kProbeReadable && WEXITSTATUS(status) != kProbeLibraryError)) {
    CORTADO_THROW(kIo, "HDF5 file '{}' is damaged: the process checking it ended with status {}",
                  path, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
}

std::recursive_mutex& Hdf5Mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

bool Hdf5Available() { return true; }

void WriteNetParameterHdf5(const caffe::NetParameter& net, const std::string& path,
                           bool write_diff) {
  const std::lock_guard<std::recursive_mutex> lock(Hdf5Mutex());
  Site site(path);
  for (const auto& layer : net.layer()) CheckLinkName(site, layer.name(), "layer name");
  WriteHdf5Atomic(site, [&](hid_t file) {
    GroupHandle data = CreateGroup(site, file, "/", "data");
    GroupHandle diff;
    if (write_diff) diff = CreateGroup(site, file, "/", "diff");
    for (const auto& layer : net.layer()) {
      // HDF5 cannot hold two groups of one name: like Caffe, the first layer of a name wins.
      if (LinkExists(site, data.get(), "/data", layer.name())) continue;
      const std::string data_path = Join("/data", layer.name());
      GroupHandle layer_data = CreateGroup(site, data.get(), "/data", layer.name());
      for (int i = 0; i < layer.blobs_size(); ++i) {
        WriteBlob(site, layer_data.get(), data_path, i, layer.blobs(i), false);
      }
      site.Check(layer_data.Close(), "group " + data_path, "cannot close");
      if (!write_diff) continue;
      const std::string diff_path = Join("/diff", layer.name());
      GroupHandle layer_diff = CreateGroup(site, diff.get(), "/diff", layer.name());
      for (int i = 0; i < layer.blobs_size(); ++i) {
        WriteBlob(site, layer_diff.get(), diff_path, i, layer.blobs(i), true);
      }
      site.Check(layer_diff.Close(), "group " + diff_path, "cannot close");
    }
    site.Check(data.Close(), "group /data", "cannot close");
    if (write_diff) site.Check(diff.Close(), "group /diff", "cannot close");
  });
}

caffe::NetParameter ReadNetParameterHdf5(const std::string& path) {
  return ReadProbed(path, ReadNetParameter);
}

void WriteSolverStateHdf5(const caffe::SolverState& state, const std::string& path) {
  const std::lock_guard<std::recursive_mutex> lock(Hdf5Mutex());
  Site site(path);
  // The order of SGDSolver::SnapshotSolverStateToHDF5: iter, learned_net, current_step, history.
  WriteHdf5Atomic(site, [&](hid_t file) {
    WriteInt(site, file, "iter", state.iter());
    if (state.has_learned_net()) WriteString(site, file, "learned_net", state.learned_net());
    WriteInt(site, file, "current_step", state.current_step());
    GroupHandle history = CreateGroup(site, file, "/", "history");
    for (int i = 0; i < state.history_size(); ++i) {
      const caffe::BlobProto& blob = state.history(i);
      if (IsPlaceholder(blob)) {
        site.Fail(ErrorCode::kInvalidArgument, fmt::format("dataset /history/{}", i),
                  "history blob has no shape and no data");
      }
      WriteBlob(site, history.get(), "/history", i, blob, false);
    }
    site.Check(history.Close(), "group /history", "cannot close");
  });
}

caffe::SolverState ReadSolverStateHdf5(const std::string& path) {
  return ReadProbed(path, ReadSolverState);
}

#else  // !CORTADO_WITH_HDF5

namespace {

[[noreturn]] void NoHdf5(const std::string& path) {
  CORTADO_THROW(kUnimplemented,
                "{}: this build of Cortado lacks HDF5 (configure with -DWITH_HDF5=ON and "
                "libhdf5-dev installed)",
                path);
}

}  // namespace

std::recursive_mutex& Hdf5Mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

bool Hdf5Available() { return false; }

void WriteNetParameterHdf5(const caffe::NetParameter&, const std::string& path, bool) {
  NoHdf5(path);
}

caffe::NetParameter ReadNetParameterHdf5(const std::string& path) { NoHdf5(path); }

void WriteSolverStateHdf5(const caffe::SolverState&, const std::string& path) { NoHdf5(path); }

caffe::SolverState ReadSolverStateHdf5(const std::string& path) { NoHdf5(path); }

void ProbeHdf5File(const std::string& path, const std::vector<std::string>&, double,
                   const std::function<void()>&) {
  NoHdf5(path);
}

#endif  // CORTADO_WITH_HDF5

}  // namespace cortado::io
