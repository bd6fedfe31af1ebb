// SPDX-License-Identifier: Apache-2.0
// The file layout follows Caffe's HDF5OutputLayer::SaveBlobs and hdf5_save_nd_dataset
// (src/caffe/layers/hdf5_output_layer.cpp, src/caffe/util/hdf5.cpp); the write goes through a
// temporary file as io::WriteNetParameterHdf5 does (io/hdf5_io.cpp), whose helpers are private
// to that file, hence the small ones below.
#include "data/hdf5_output_layer.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "core/logging.hpp"
#include "io/hdf5_io.hpp"

namespace cortado {
namespace {

// Owns one HDF5 identifier; Close() reports the status (closing a file flushes it).
class H5Id {
 public:
  H5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Id() {
    if (id_ >= 0) (void)close_(id_);  // an error path is being reported already
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  herr_t Close() { return id_ >= 0 ? close_(std::exchange(id_, -1)) : 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Stops HDF5 from printing its error stack (we throw our own error) while in scope; the setting
// is per thread in a thread-safe HDF5, and restored on exit.
class SilenceHdf5Errors {
 public:
  SilenceHdf5Errors() {
    (void)H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    (void)H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~SilenceHdf5Errors() { (void)H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  SilenceHdf5Errors(const SilenceHdf5Errors&) = delete;
  SilenceHdf5Errors& operator=(const SilenceHdf5Errors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Removes a temporary file unless Keep() was called.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  void Keep() { path_.clear(); }

 private:
  std::string path_;
};

// A tensor's Caffe legacy shape (num, channels, height, width), as HDF5 dimensions.
std::vector<hsize_t> LegacyDims(const Tensor& t) {
  return {static_cast<hsize_t>(t.num()), static_cast<hsize_t>(t.channels()),
          static_cast<hsize_t>(t.height()), static_cast<hsize_t>(t.width())};
}

struct Dataset {
  const char* name;
  std::vector<hsize_t> dims;
  const float* values;  // dims' product floats
};

// Writes `datasets` (none: an empty file) to `path` through "<path>.tmp.<pid>". `owner` starts
// every error message.
void WriteFile(const std::string& owner, const std::string& path,
               const std::vector<Dataset>& datasets) {
  std::lock_guard<std::recursive_mutex> lock(io::Hdf5Mutex());
  SilenceHdf5Errors silence;
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  auto fail = [&](const std::string& what) {
    (void)H5Eclear2(H5E_DEFAULT);
    CORTADO_THROW(kIo, "{}: cannot write HDF5 file '{}': {}", owner, path, what);
  };
  TempFile guard(temp);
  // No modification times in the objects' headers: the same batch gives the same bytes.
  H5Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!fcpl.ok() || !dcpl.ok() || H5Pset_obj_track_times(fcpl.get(), false) < 0 ||
      H5Pset_obj_track_times(dcpl.get(), false) < 0) {
    fail("cannot make the property lists");
  }
  H5Id file(H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT), H5Fclose);
  if (!file.ok()) fail(fmt::format("cannot create '{}'", temp));
  for (const Dataset& d : datasets) {
    H5Id space(H5Screate_simple(static_cast<int>(d.dims.size()), d.dims.data(), nullptr), H5Sclose);
    if (!space.ok()) fail(fmt::format("cannot make the dataspace of dataset '{}'", d.name));
    H5Id dataset(H5Dcreate2(file.get(), d.name, H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT,
                            dcpl.get(), H5P_DEFAULT),
                 H5Dclose);
    if (!dataset.ok()) fail(fmt::format("cannot create dataset '{}'", d.name));
    size_t count = 1;
    for (hsize_t dim : d.dims) count *= static_cast<size_t>(dim);
    if (count > 0 &&
        H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.values) < 0) {
      fail(fmt::format("cannot write dataset '{}'", d.name));
    }
    if (dataset.Close() < 0) fail(fmt::format("cannot close dataset '{}'", d.name));
  }
  if (file.Close() < 0) fail(fmt::format("cannot close (flush) '{}'", temp));
  const int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    fail(fmt::format("cannot flush '{}': {}", temp, std::strerror(err)));
  }
  ::close(fd);
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    fail(fmt::format("cannot rename '{}' into place: {}", temp, std::strerror(err)));
  }
  guard.Keep();
}

}  // namespace

void HDF5OutputLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                            const std::vector<Tensor*>& /*top*/) {
  file_name_ = param_.hdf5_output_param().file_name();
  if (file_name_.empty()) {
    CORTADO_THROW(kInvalidArgument, "{}: hdf5_output_param.file_name is empty", Describe());
  }
  // As Caffe, which creates (truncates) the file here.
  WriteFile(Describe(), file_name_, {});
}

void HDF5OutputLayer::CheckBottoms(const std::vector<Tensor*>& bottom) const {
  for (int i = 0; i < 2; ++i) {
    if (bottom[i]->num_axes() > 4) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: the {} bottom has shape {}; HDF5Output writes (num, channels, height, "
                    "width) and takes at most 4 axes",
                    Describe(), i == 0 ? "data" : "label", bottom[i]->ShapeString());
    }
  }
  if (bottom[0]->num() != bottom[1]->num()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: data {} and label {} must have the same first dimension (batch size)",
                  Describe(), bottom[0]->ShapeString(), bottom[1]->ShapeString());
  }
}

void HDF5OutputLayer::Reshape(const std::vector<Tensor*>& bottom,
                              const std::vector<Tensor*>& /*top*/) {
  CheckBottoms(bottom);
}

void HDF5OutputLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                 const std::vector<Tensor*>& /*top*/) {
  CheckBottoms(bottom);
  CORTADO_LOG_DEBUG("{}: saving {} rows to HDF5 file '{}'", Describe(), bottom[0]->num(),
                    file_name_);
  WriteFile(Describe(), file_name_,
            {{"data", LegacyDims(*bottom[0]), bottom[0]->cpu_data()},
             {"label", LegacyDims(*bottom[1]), bottom[1]->cpu_data()}});
}

CORTADO_REGISTER_LAYER(HDF5Output, HDF5OutputLayer);

}  // namespace cortado
