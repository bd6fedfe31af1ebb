// SPDX-License-Identifier: Apache-2.0
#include "data/hdf5_data_layer.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/host_memory.hpp"
#include "data/data_test_util.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::TempDir;

// Writes a dataset of `dims` to an open file, as float (H5T_IEEE_F32LE) or double.
void WriteDataset(hid_t file, const std::string& name, const std::vector<hsize_t>& dims,
                  const std::vector<double>& values, bool as_double) {
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dataset = H5Dcreate2(file, name.c_str(), as_double ? H5T_IEEE_F64LE : H5T_IEEE_F32LE, space,
                             H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(dataset, 0);
  ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(dataset);
  H5Sclose(space);
}

// A file of `rows` rows starting at global row `first`: data row r is (10 r, 10 r + 1) as float,
// label row r is r as double.
std::string WriteFile(const TempDir& dir, const std::string& name, int first, int rows) {
  const std::string path = dir / name;
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(file, 0);
  std::vector<double> data, label;
  for (int r = first; r < first + rows; ++r) {
    data.push_back(10.0 * r);
    data.push_back(10.0 * r + 1);
    label.push_back(r);
  }
  WriteDataset(file, "data", {static_cast<hsize_t>(rows), 2}, data, false);
  WriteDataset(file, "label", {static_cast<hsize_t>(rows)}, label, true);
  H5Fclose(file);
  return path;
}

std::string WriteList(const TempDir& dir, const std::vector<std::string>& files) {
  const std::string path = dir / "list.txt";
  std::ofstream out(path);
  for (const auto& f : files) out << f << "\n\n";  // blank lines are skipped
  return path;
}

std::unique_ptr<Layer> Make(Context* ctx, const std::string& list, int batch_size,
                            bool shuffle = false) {
  return CreateLayer(testing::LayerParam("name: 'h5' type: 'HDF5Data' top: 'data' top: 'label' "
                                         "hdf5_data_param { source: '" +
                                         list + "' batch_size: " + std::to_string(batch_size) +
                                         (shuffle ? " shuffle: true" : "") + " }"),
                     ctx);
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.cpu_data(), t.cpu_data() + t.count());
}

// Rows 0-2 in a.h5, rows 3-4 in b.h5.
struct TwoFiles {
  TempDir dir;
  std::string list;
  TwoFiles() {
    list = WriteList(dir, {WriteFile(dir, "a.h5", 0, 3), WriteFile(dir, "b.h5", 3, 2)});
  }
};

TEST(HDF5DataLayerTest, ShapesValuesAndWrapAroundAcrossFiles) {
  TwoFiles files;
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, files.list, 2);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{2, 2}));
  EXPECT_EQ(label.shape(), (std::vector<int>{2}));
  EXPECT_EQ(static_cast<HDF5DataLayer*>(layer.get())->total_rows(), 5);
  // Rows (0 1), (2 3) spanning the files, (4 0) wrapping around.
  const int expected_rows[3][2] = {{0, 1}, {2, 3}, {4, 0}};
  for (const auto& rows : expected_rows) {
    layer->Forward({}, {&data, &label});
    EXPECT_EQ(Values(data), (std::vector<float>{10.0f * rows[0], 10.0f * rows[0] + 1,
                                                10.0f * rows[1], 10.0f * rows[1] + 1}));
    EXPECT_EQ(Values(label), (std::vector<float>{1.0f * rows[0], 1.0f * rows[1]}));
  }
}

// Reads `epochs` passes of 5 rows (batch size 5) and returns the labels of each pass.
std::vector<std::vector<float>> Epochs(Layer* layer, int epochs) {
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  std::vector<std::vector<float>> out;
  for (int e = 0; e < epochs; ++e) {
    layer->Forward({}, {&data, &label});
    for (int i = 0; i < 5; ++i) EXPECT_EQ(data.cpu_data()[2 * i], 10.0f * label.cpu_data()[i]);
    out.push_back(Values(label));
  }
  return out;
}

TEST(HDF5DataLayerTest, ShuffleIsAPermutationPerEpochSeededAndFileByFile) {
  TwoFiles files;
  Context ctx_a(Device::Cpu(), 1701), ctx_b(Device::Cpu(), 1701);
  auto a = Make(&ctx_a, files.list, 5, true);
  auto b = Make(&ctx_b, files.list, 5, true);
  const auto epochs_a = Epochs(a.get(), 8);
  EXPECT_EQ(epochs_a, Epochs(b.get(), 8));  // same seed, same order
  std::set<std::vector<float>> orders;
  for (const auto& labels : epochs_a) {
    std::vector<float> sorted = labels;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<float>{0, 1, 2, 3, 4}));  // every row once per epoch
    // Files are not interleaved: a.h5's rows (< 3) are contiguous.
    const auto first_a = std::find_if(labels.begin(), labels.end(), [](float l) { return l < 3; });
    ASSERT_LE(first_a - labels.begin(), 2);
    EXPECT_TRUE(std::all_of(first_a, first_a + 3, [](float l) { return l < 3; }));
    orders.insert(labels);
  }
  EXPECT_GT(orders.size(), 1u) << "8 shuffled epochs all in the same order";
}

TEST(HDF5DataLayerTest, SeekReproducesAnUninterruptedRun) {
  TwoFiles files;
  Context ctx_a(Device::Cpu(), 1701), ctx_b(Device::Cpu(), 1701);
  auto a = Make(&ctx_a, files.list, 3, true);
  auto b = Make(&ctx_b, files.list, 3, true);
  Tensor da, la, db, lb;
  a->Initialize({}, {&da, &la});
  b->Initialize({}, {&db, &lb});
  std::vector<std::vector<float>> straight;
  for (int k = 0; k < 6; ++k) {
    a->Forward({}, {&da, &la});
    straight.push_back(Values(la));
  }
  static_cast<HDF5DataLayer*>(b.get())->Seek(3);
  for (int k = 3; k < 6; ++k) {
    b->Forward({}, {&db, &lb});
    EXPECT_EQ(Values(lb), straight[k]) << "batch " << k;
  }
}

TEST(HDF5DataLayerTest, MissingDatasetNamesDatasetAndFile) {
  TempDir dir;
  const std::string path = dir / "only_data.h5";
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  WriteDataset(file, "data", {2, 2}, {1, 2, 3, 4}, false);
  H5Fclose(file);
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, WriteList(dir, {path}), 2);
  Tensor data, label;
  try {
    layer->Initialize({}, {&data, &label});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'label'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST(HDF5DataLayerTest, RowCountsMustAgreeWithinAFile) {
  TempDir dir;
  const std::string path = dir / "ragged.h5";
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  WriteDataset(file, "data", {2, 2}, {1, 2, 3, 4}, false);
  WriteDataset(file, "label", {3}, {1, 2, 3}, false);
  H5Fclose(file);
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, WriteList(dir, {path}), 2);
  Tensor data, label;
  EXPECT_THROW(layer->Initialize({}, {&data, &label}), Error);
}

TEST(HDF5DataLayerTest, MissingFilesAreNotFound) {
  TempDir dir;
  Context ctx(Device::Cpu(), 1701);
  Tensor data, label;
  for (const std::string& list :
       {WriteList(dir, {dir / "absent.h5"}), std::string("/nonexistent/list.txt")}) {
    auto layer = Make(&ctx, list, 2);
    try {
      layer->Initialize({}, {&data, &label});
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotFound) << e.what();
    }
  }
}

TEST(HDF5DataLayerTest, NotAnHdf5FileIsAnIoError) {
  TempDir dir;
  const std::string path = dir / "fake.h5";
  std::ofstream(path) << "not hdf5";
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, WriteList(dir, {path}), 2);
  Tensor data, label;
  try {
    layer->Initialize({}, {&data, &label});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// A damaged or hostile file may declare datasets of any size (unwritten space costs nothing on
// disk): a batch beyond INT_MAX values, or a dataset beyond the memory tensors may use (files are
// read whole), is refused at set-up naming the dataset and the file.
TEST(HDF5DataLayerTest, DatasetsTooLargeAreRefusedNamingThem) {
  TempDir dir;
  const std::string path = dir / "huge.h5";
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  for (const auto& [name, dims] :
       {std::pair<std::string, std::vector<hsize_t>>{"data", {2, hsize_t{1} << 31}},
        {"label", {2}}}) {
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t dataset = H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
    ASSERT_GE(dataset, 0);
    H5Dclose(dataset);
    H5Sclose(space);
  }
  H5Fclose(file);
  Context ctx(Device::Cpu(), 1701);
  Tensor data, label;
  try {
    Make(&ctx, WriteList(dir, {path}), 2)->Initialize({}, {&data, &label});
    FAIL() << "a dataset of 2 x 2^31 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("dataset 'data' in HDF5 file '" + path), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("INT_MAX"), std::string::npos) << e.what();
  }
  // Rows that fit a batch, but a file larger than the memory limit.
  TwoFiles two;
  SetHostMemoryLimit(16);
  try {
    Make(&ctx, two.list, 1)->Initialize({}, {&data, &label});
    SetHostMemoryLimit(0);
    FAIL() << "a dataset larger than the memory limit accepted";
  } catch (const Error& e) {
    SetHostMemoryLimit(0);
    EXPECT_NE(std::string(e.what()).find("each file is read whole"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cortado
