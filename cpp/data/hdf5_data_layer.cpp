// SPDX-License-Identifier: Apache-2.0
#include "data/hdf5_data_layer.hpp"

#include <hdf5.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "core/host_memory.hpp"
#include "core/logging.hpp"
#include "io/hdf5_io.hpp"
#include "io/proto_io.hpp"

namespace cortado {
namespace {

// Closes an HDF5 handle when it goes out of scope.
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Stops HDF5 from printing its error stack to stderr (we throw our own error) while in scope.
// The setting is per thread in a thread-safe HDF5, and restored on exit.
class SilenceHdf5Errors {
 public:
  SilenceHdf5Errors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~SilenceHdf5Errors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  SilenceHdf5Errors(const SilenceHdf5Errors&) = delete;
  SilenceHdf5Errors& operator=(const SilenceHdf5Errors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Independent streams for the file order of an epoch and for the rows of each file.
uint64_t FileOrderSeed(uint64_t seed) { return seed ^ 0x6a09e667f3bcc908ULL; }
uint64_t RowOrderSeed(uint64_t seed, int file) {
  return seed + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(file) + 1);
}

// Fisher-Yates with rng() % n, so the order is the same on every standard library.
template <typename T>
void Shuffle(std::vector<T>* items, Rng* rng) {
  for (size_t i = items->size(); i > 1; --i) {
    const size_t j = static_cast<size_t>((*rng)() % i);
    std::swap((*items)[i - 1], (*items)[j]);
  }
}

struct DatasetInfo {
  std::vector<hsize_t> dims;
};

// Opens dataset `name` in `file`, checks its type class, and returns its dimensions.
DatasetInfo InspectDataset(hid_t file, const std::string& name, const std::string& path,
                           const std::string& owner) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: HDF5 file '{}' has no dataset '{}' (named by a top)",
                  owner, path, name);
  }
  H5Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dataset.ok()) {
    CORTADO_THROW(kIo, "{}: cannot open dataset '{}' in HDF5 file '{}'", owner, name, path);
  }
  H5Handle type(H5Dget_type(dataset.get()), H5Tclose);
  const H5T_class_t type_class = type.ok() ? H5Tget_class(type.get()) : H5T_NO_CLASS;
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: dataset '{}' in HDF5 file '{}' is not numeric (float, double or integer)",
                  owner, name, path);
  }
  // The library converts through buffers of the file's element size (a damaged file may claim
  // any): numbers are 1 to 8 bytes.
  const size_t element = H5Tget_size(type.get());
  if (element == 0 || element > 8) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: dataset '{}' in HDF5 file '{}' holds numbers of {} bytes; expected 1 to 8",
                  owner, name, path, element);
  }
  H5Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank < 1) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: dataset '{}' in HDF5 file '{}' needs at least one axis (samples)", owner,
                  name, path);
  }
  DatasetInfo info;
  info.dims.resize(rank);
  H5Sget_simple_extent_dims(space.get(), info.dims.data(), nullptr);
  return info;
}

std::string DimsString(const std::vector<hsize_t>& dims) {
  std::ostringstream out;
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? " x " : "") << dims[i];
  return out.str();
}

// kInvalidArgument naming the dataset and file when a batch of its rows would exceed INT_MAX
// values, or the whole dataset (files are read whole) the memory tensors may use.
void CheckDatasetSize(const std::vector<hsize_t>& dims, const std::string& name,
                      const std::string& path, const std::string& owner, int batch_size) {
  // In double: the dims of a damaged file may overflow any integer product.
  double row = 1;
  for (size_t a = 1; a < dims.size(); ++a) {
    if (dims[a] > static_cast<hsize_t>(INT_MAX)) row = 1e300;
    row *= static_cast<double>(dims[a]);
  }
  if (row * batch_size > INT_MAX) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: dataset '{}' in HDF5 file '{}' is {}: a batch of {} rows would hold more "
                  "than INT_MAX ({}) values",
                  owner, name, path, DimsString(dims), batch_size, INT_MAX);
  }
  const double bytes = row * static_cast<double>(dims[0]) * sizeof(float);
  if (bytes > static_cast<double>(HostMemoryLimit())) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: dataset '{}' in HDF5 file '{}' is {}, {:.0f} bytes as floats: more than the "
                  "{} bytes of memory this process may use (each file is read whole; split it "
                  "into smaller files)",
                  owner, name, path, DimsString(dims), bytes, HostMemoryLimit());
  }
}

}  // namespace

HDF5DataLayer::~HDF5DataLayer() { StopPrefetch(); }

void HDF5DataLayer::DataSetup(const std::vector<Tensor*>& top) {
  const auto& p = param_.hdf5_data_param();
  if (p.batch_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: hdf5_data_param.batch_size must be positive", Describe());
  }
  batch_size_ = static_cast<int>(p.batch_size());
  shuffle_ = p.shuffle();
  if (p.source().empty()) {
    CORTADO_THROW(kInvalidArgument, "{}: hdf5_data_param.source is empty", Describe());
  }
  {
    std::istringstream list(io::ReadFile(p.source()));
    std::string line;
    while (std::getline(list, line)) {
      const auto first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos) continue;
      const auto last = line.find_last_not_of(" \t\r");
      files_.push_back(line.substr(first, last - first + 1));
    }
  }
  if (files_.empty()) {
    CORTADO_THROW(kInvalidArgument, "{}: the file list '{}' names no HDF5 files", Describe(),
                  p.source());
  }
  for (size_t t = 0; t < top.size(); ++t) {
    if (static_cast<int>(t) >= param_.top_size()) {
      CORTADO_THROW(kInvalidArgument, "{}: top {} has no name to pick a dataset by", Describe(), t);
    }
    dataset_names_.push_back(param_.top(static_cast<int>(t)));
  }

  const std::lock_guard<std::recursive_mutex> lock(io::Hdf5Mutex());
  SilenceHdf5Errors silence;
  std::vector<std::vector<hsize_t>> first_dims(top.size());
  for (const auto& path : files_) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      CORTADO_THROW(kNotFound, "{}: HDF5 file '{}' (listed in '{}') does not exist", Describe(),
                    path, p.source());
    }
    // The child meets the file along the set-up's own path (open, then each top's dataset).
    WithContext(Describe(), [&] {
      io::ProbeHdf5File(path, dataset_names_, 60, [&] {
        H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
        if (!file.ok()) return;
        for (const std::string& name : dataset_names_) {
          InspectDataset(file.get(), name, path, Describe());
        }
      });
    });
    H5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file.ok()) {
      CORTADO_THROW(kIo, "{}: cannot open HDF5 file '{}' (listed in '{}')", Describe(), path,
                    p.source());
    }
    int64_t rows = -1;
    for (size_t t = 0; t < top.size(); ++t) {
      const DatasetInfo info = InspectDataset(file.get(), dataset_names_[t], path, Describe());
      const auto n = static_cast<int64_t>(info.dims[0]);
      if (rows >= 0 && n != rows) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: in HDF5 file '{}', dataset '{}' has {} rows but '{}' has {}", Describe(),
                      path, dataset_names_[t], n, dataset_names_[0], rows);
      }
      rows = n;
      CheckDatasetSize(info.dims, dataset_names_[t], path, Describe(), batch_size_);
      const std::vector<hsize_t> trailing(info.dims.begin() + 1, info.dims.end());
      if (first_dims[t].empty()) {
        first_dims[t] = info.dims;
        std::vector<int> shape;
        size_t size = 1;
        for (hsize_t d : trailing) {
          shape.push_back(static_cast<int>(d));
          size *= d;
        }
        row_shapes_.push_back(shape);
        row_sizes_.push_back(size);
      } else if (!std::equal(trailing.begin(), trailing.end(), first_dims[t].begin() + 1,
                             first_dims[t].end())) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: dataset '{}' is {} in HDF5 file '{}' but {} in '{}'; all but the "
                      "first axis must agree",
                      Describe(), dataset_names_[t], DimsString(info.dims), path,
                      DimsString(first_dims[t]), files_[0]);
      }
    }
    file_rows_.push_back(rows);
    total_rows_ += rows;
  }
  if (total_rows_ == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: the HDF5 files listed in '{}' hold no rows", Describe(),
                  p.source());
  }
  for (size_t t = 0; t < top.size(); ++t) {
    std::vector<int> shape{batch_size_};
    shape.insert(shape.end(), row_shapes_[t].begin(), row_shapes_[t].end());
    top[t]->Reshape(shape);
  }
  CORTADO_LOG_INFO("{}: {} HDF5 file(s), {} rows, batch size {}{}", Describe(), files_.size(),
                   total_rows_, batch_size_, shuffle_ ? ", shuffled" : "");
}

void HDF5DataLayer::PrepareEpoch(int64_t epoch) {
  if (order_.epoch == epoch) return;
  order_.epoch = epoch;
  order_.files.resize(files_.size());
  for (size_t i = 0; i < files_.size(); ++i) order_.files[i] = static_cast<int>(i);
  if (shuffle_) {
    Rng rng = BatchRng(FileOrderSeed(seed()), epoch);
    Shuffle(&order_.files, &rng);
  }
  order_.start.resize(files_.size());
  int64_t start = 0;
  for (size_t j = 0; j < order_.files.size(); ++j) {
    order_.start[j] = start;
    start += file_rows_[order_.files[j]];
  }
}

void HDF5DataLayer::LoadFile(int64_t epoch, int file) {
  // Rows are unshuffled when shuffle is off, so the same file can stay across epochs.
  if (loaded_.file == file && (loaded_.epoch == epoch || !shuffle_)) return;
  const std::string& path = files_[file];
  const int64_t rows = file_rows_[file];
  if (loaded_.file != file) {
    const std::lock_guard<std::recursive_mutex> lock(io::Hdf5Mutex());
    SilenceHdf5Errors silence;
    loaded_.file = -1;
    H5Handle h5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!h5.ok()) CORTADO_THROW(kIo, "{}: cannot open HDF5 file '{}'", Describe(), path);
    loaded_.data.resize(dataset_names_.size());
    for (size_t t = 0; t < dataset_names_.size(); ++t) {
      // The file may have changed since Setup: check the shape again before reading.
      const DatasetInfo info = InspectDataset(h5.get(), dataset_names_[t], path, Describe());
      size_t size = 1;
      for (size_t a = 1; a < info.dims.size(); ++a) size *= info.dims[a];
      if (static_cast<int64_t>(info.dims[0]) != rows || size != row_sizes_[t]) {
        CORTADO_THROW(kIo, "{}: dataset '{}' in HDF5 file '{}' changed shape (now {})", Describe(),
                      dataset_names_[t], path, DimsString(info.dims));
      }
      H5Handle dataset(H5Dopen2(h5.get(), dataset_names_[t].c_str(), H5P_DEFAULT), H5Dclose);
      loaded_.data[t].resize(static_cast<size_t>(rows) * row_sizes_[t]);
      if (!dataset.ok() || H5Dread(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                                   loaded_.data[t].data()) < 0) {
        CORTADO_THROW(kIo, "{}: cannot read dataset '{}' from HDF5 file '{}'", Describe(),
                      dataset_names_[t], path);
      }
    }
  }
  loaded_.file = file;
  loaded_.epoch = epoch;
  loaded_.rows.resize(rows);
  for (int64_t r = 0; r < rows; ++r) loaded_.rows[r] = r;
  if (shuffle_) {
    Rng rng = BatchRng(RowOrderSeed(seed(), file), epoch);
    Shuffle(&loaded_.rows, &rng);
  }
}

void HDF5DataLayer::LoadBatch(int64_t index, Rng* /*rng*/, DataBatch* batch) {
  const size_t num_tops = dataset_names_.size();
  batch->shapes.resize(num_tops);
  batch->tops.resize(num_tops);
  for (size_t t = 0; t < num_tops; ++t) {
    batch->shapes[t] = {batch_size_};
    batch->shapes[t].insert(batch->shapes[t].end(), row_shapes_[t].begin(), row_shapes_[t].end());
    batch->tops[t].resize(row_sizes_[t] * batch_size_);
  }
  for (int i = 0; i < batch_size_; ++i) {
    const int64_t sample = index * batch_size_ + i;
    const int64_t epoch = sample / total_rows_;
    const int64_t offset = sample % total_rows_;
    PrepareEpoch(epoch);
    // The last file (in this epoch's order) whose first row is at or before `offset`; files
    // without rows share their start with the next file and are passed over.
    const size_t j =
        static_cast<size_t>(std::upper_bound(order_.start.begin(), order_.start.end(), offset) -
                            order_.start.begin() - 1);
    LoadFile(epoch, order_.files[j]);
    const int64_t row = loaded_.rows[offset - order_.start[j]];
    for (size_t t = 0; t < num_tops; ++t) {
      std::copy_n(loaded_.data[t].data() + row * row_sizes_[t], row_sizes_[t],
                  batch->tops[t].data() + i * row_sizes_[t]);
    }
  }
}

CORTADO_REGISTER_LAYER(HDF5Data, HDF5DataLayer);

}  // namespace cortado
