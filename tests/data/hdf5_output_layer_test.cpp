// SPDX-License-Identifier: Apache-2.0
#include "data/hdf5_output_layer.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/data_test_util.hpp"
#include "io/hdf5_io.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::TempDir;

// One dataset as the HDF5 C API reads it back: its dimensions and values (as float), and
// whether it is stored as native float.
struct ReadBack {
  std::vector<hsize_t> dims;
  std::vector<float> values;
  bool is_native_float = false;
};

ReadBack ReadDataset(const std::string& path, const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(io::Hdf5Mutex());
  ReadBack out;
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  if (file < 0) return out;
  hid_t dataset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(dataset, 0) << name;
  if (dataset >= 0) {
    hid_t type = H5Dget_type(dataset);
    out.is_native_float = H5Tequal(type, H5T_NATIVE_FLOAT) > 0;
    H5Tclose(type);
    hid_t space = H5Dget_space(dataset);
    out.dims.resize(H5Sget_simple_extent_ndims(space));
    H5Sget_simple_extent_dims(space, out.dims.data(), nullptr);
    H5Sclose(space);
    size_t count = 1;
    for (hsize_t d : out.dims) count *= d;
    out.values.resize(count);
    if (count > 0) {
      EXPECT_GE(
          H5Dread(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data()), 0);
    }
    H5Dclose(dataset);
  }
  H5Fclose(file);
  return out;
}

// The names of the objects at the file's root.
std::vector<std::string> RootNames(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(io::Hdf5Mutex());
  std::vector<std::string> names;
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << path;
  if (file < 0) return names;
  auto visit = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, visit, &names);
  H5Fclose(file);
  return names;
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  return files;
}

std::unique_ptr<Layer> MakeLayer(Context* ctx, const std::string& file) {
  return CreateLayer(testing::LayerParam("name: 'out' type: 'HDF5Output' bottom: 'data' "
                                         "bottom: 'label' hdf5_output_param { file_name: '" +
                                         file + "' }"),
                     ctx);
}

void Fill(Tensor* t, float start) {
  for (int i = 0; i < t->count(); ++i) t->mutable_cpu_data()[i] = start + 0.5f * i;
}

TEST(HDF5OutputLayerTest, SetupCreatesAnEmptyFile) {
  TempDir dir;
  const std::string path = dir / "out.h5";
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, path);
  Tensor data({2, 3}), label({2});
  layer->Initialize({&data, &label}, {});
  ASSERT_TRUE(io::IsHdf5File(path));
  EXPECT_TRUE(RootNames(path).empty());
  EXPECT_EQ(FilesIn(dir.path()), std::vector<std::string>{"out.h5"});
}

TEST(HDF5OutputLayerTest, ForwardWritesDataAndLabelWithLegacyFourDShapes) {
  TempDir dir;
  const std::string path = dir / "out.h5";
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, path);
  Tensor data({2, 3, 2, 1}), label({2});
  Fill(&data, 1.0f);
  Fill(&label, -3.0f);
  layer->Initialize({&data, &label}, {});
  EXPECT_EQ(layer->Forward({&data, &label}, {}), 0.0f);

  EXPECT_EQ(RootNames(path), (std::vector<std::string>{"data", "label"}));
  const ReadBack d = ReadDataset(path, "data");
  EXPECT_TRUE(d.is_native_float);
  EXPECT_EQ(d.dims, (std::vector<hsize_t>{2, 3, 2, 1}));
  ASSERT_EQ(d.values.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(d.values[i], 1.0f + 0.5f * i) << i;
  // [N] is written as Caffe's Blob::Reshape(num, channels, height, width) shapes it.
  const ReadBack l = ReadDataset(path, "label");
  EXPECT_TRUE(l.is_native_float);
  EXPECT_EQ(l.dims, (std::vector<hsize_t>{2, 1, 1, 1}));
  EXPECT_EQ(l.values, (std::vector<float>{-3.0f, -2.5f}));
  EXPECT_EQ(FilesIn(dir.path()), std::vector<std::string>{"out.h5"});  // no temporary left
}

TEST(HDF5OutputLayerTest, EveryForwardRewritesTheWholeFile) {
  TempDir dir;
  const std::string path = dir / "out.h5";
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, path);
  Tensor data({3, 2}), label({3, 1});
  Fill(&data, 0.0f);
  Fill(&label, 10.0f);
  layer->Initialize({&data, &label}, {});
  layer->Forward({&data, &label}, {});
  // A second batch of another size: the file holds it alone (Caffe aborts here instead).
  data.Reshape({1, 2});
  label.Reshape({1, 1});
  Fill(&data, 100.0f);
  Fill(&label, 7.0f);
  layer->Reshape({&data, &label}, {});
  layer->Forward({&data, &label}, {});
  const ReadBack d = ReadDataset(path, "data");
  EXPECT_EQ(d.dims, (std::vector<hsize_t>{1, 2, 1, 1}));
  EXPECT_EQ(d.values, (std::vector<float>{100.0f, 100.5f}));
  const ReadBack l = ReadDataset(path, "label");
  EXPECT_EQ(l.dims, (std::vector<hsize_t>{1, 1, 1, 1}));
  EXPECT_EQ(l.values, (std::vector<float>{7.0f}));
  EXPECT_EQ(RootNames(path).size(), 2u);
}

TEST(HDF5OutputLayerTest, HDF5DataReadsTheFileBack) {
  TempDir dir;
  const std::string path = dir / "out.h5";
  Context ctx(Device::Cpu(), 1701);
  auto out = MakeLayer(&ctx, path);
  Tensor data({4, 3}), label({4});
  Fill(&data, 2.0f);
  Fill(&label, 0.0f);
  out->Initialize({&data, &label}, {});
  out->Forward({&data, &label}, {});
  {
    std::ofstream list(dir / "list.txt");
    list << path << "\n";
  }
  auto in = CreateLayer(testing::LayerParam("name: 'in' type: 'HDF5Data' top: 'data' top: "
                                            "'label' hdf5_data_param { source: '" +
                                            (dir / "list.txt") + "' batch_size: 4 }"),
                        &ctx);
  Tensor read_data, read_label;
  in->Initialize({}, {&read_data, &read_label});
  in->Forward({}, {&read_data, &read_label});
  EXPECT_EQ(read_data.shape(), (std::vector<int>{4, 3, 1, 1}));
  EXPECT_EQ(read_label.shape(), (std::vector<int>{4, 1, 1, 1}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(read_data.cpu_data()[i], data.cpu_data()[i]) << i;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(read_label.cpu_data()[i], label.cpu_data()[i]) << i;
}

void ExpectError(const std::function<void()>& body, ErrorCode code,
                 const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
    }
  }
}

TEST(HDF5OutputLayerTest, BadParametersShapesAndPathsAreErrors) {
  TempDir dir;
  Context ctx(Device::Cpu(), 1701);
  Tensor data({2, 3}), label({2});
  auto no_name = CreateLayer(testing::LayerParam("name: 'out' type: 'HDF5Output'"), &ctx);
  ExpectError(
      [&] {
        no_name->Initialize({&data, &label}, {});
      },
      ErrorCode::kInvalidArgument, {"layer 'out' (HDF5Output)", "file_name"});

  const std::string missing = dir / "no/such/dir/out.h5";
  auto bad_path = MakeLayer(&ctx, missing);
  ExpectError(
      [&] {
        bad_path->Initialize({&data, &label}, {});
      },
      ErrorCode::kIo, {"layer 'out' (HDF5Output)", missing});

  const std::string path = dir / "out.h5";
  Tensor other({3});
  auto layer = MakeLayer(&ctx, path);
  ExpectError(
      [&] {
        layer->Initialize({&data, &other}, {});
      },
      ErrorCode::kInvalidArgument, {"layer 'out' (HDF5Output)", "data 2 3 (6) and label 3 (3)"});
  Tensor five({2, 1, 1, 1, 2});
  auto layer5 = MakeLayer(&ctx, path);
  ExpectError(
      [&] {
        layer5->Initialize({&five, &label}, {});
      },
      ErrorCode::kInvalidArgument, {"layer 'out' (HDF5Output)", "data bottom has shape 2 1 1 1 2"});

  // A failed write leaves the last good file in place.
  auto good = MakeLayer(&ctx, path);
  good->Initialize({&data, &label}, {});
  Fill(&data, 5.0f);
  good->Forward({&data, &label}, {});
  // (A directory where the temporary file goes makes its creation fail, even for root.)
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  std::filesystem::create_directory(temp);
  Fill(&data, 9.0f);
  ExpectError(
      [&] {
        good->Forward({&data, &label}, {});
      },
      ErrorCode::kIo, {"layer 'out' (HDF5Output)", path, "cannot create"});
  EXPECT_EQ(ReadDataset(path, "data").values[0], 5.0f);
  std::filesystem::remove(temp);
  EXPECT_EQ(FilesIn(dir.path()), std::vector<std::string>{"out.h5"});
}

}  // namespace
}  // namespace cortado
