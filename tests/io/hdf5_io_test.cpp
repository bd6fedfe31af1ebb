// SPDX-License-Identifier: Apache-2.0
// HDF5 model and solver-state files: round trips, Caffe's layout as seen through the raw HDF5 C
// API (and h5dump when installed), and damaged or foreign files giving errors, never crashes.
#include "io/hdf5_io.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/context.hpp"
#include "core/error.hpp"
#include "io/proto_io.hpp"
#include "layers/layer.hpp"
#include "net/net.hpp"

#if CORTADO_WITH_HDF5
#include <hdf5.h>
#endif

namespace cortado::io {
namespace {

// A file under the temp directory, removed (with any stray temporary) when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() /
               ("cortado_hdf5_" + std::to_string(::getpid()) + "_" + name))
                  .string()) {}
  ~TempFile() {
    std::remove(path_.c_str());
    std::remove(temp().c_str());
  }
  const std::string& path() const { return path_; }
  // Where a write stages its data before renaming it into place.
  std::string temp() const { return path_ + ".tmp." + std::to_string(::getpid()); }

 private:
  std::string path_;
};

#define SKIP_WITHOUT_HDF5() \
  if (!Hdf5Available()) GTEST_SKIP() << "this build lacks HDF5"

// Calls `fn`, expects a cortado::Error, and returns it.
template <typename Fn>
Error CatchError(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no cortado::Error was thrown";
  return Error(ErrorCode::kInternal, "none");
}

void AddBlob(caffe::LayerParameter* layer, const std::vector<int>& shape,
             const std::vector<float>& data, const std::vector<float>& diff = {}) {
  caffe::BlobProto* blob = layer->add_blobs();
  for (int dim : shape) blob->mutable_shape()->add_dim(dim);
  for (float value : data) blob->add_data(value);
  for (float value : diff) blob->add_diff(value);
}

// `n` floats including values that a lossy path would change: -0, a denormal, the extremes,
// and pi's float rounding.
std::vector<float> Values(int n, float offset) {
  const float special[] = {-0.0f, std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                           3.14159265f};
  std::vector<float> values;
  for (int i = 0; i < n; ++i) {
    values.push_back(i < 5 ? special[i] : offset + 0.1f * static_cast<float>(i));
  }
  return values;
}

// conv1: 4-axis weights and a bias; ip1: 2-axis; relu1: no blobs; scale1: a 3-axis blob;
// zero: a blob with no elements.
caffe::NetParameter MakeModel(bool with_diff) {
  caffe::NetParameter net;
  net.set_name("model");
  auto add = [&](const char* name, const std::vector<std::vector<int>>& shapes, float offset) {
    caffe::LayerParameter* layer = net.add_layer();
    layer->set_name(name);
    layer->set_type("Whatever");
    for (const auto& shape : shapes) {
      int count = 1;
      for (int dim : shape) count *= dim;
      AddBlob(layer, shape, Values(count, offset),
              with_diff ? Values(count, -offset) : std::vector<float>{});
      offset += 100.0f;
    }
  };
  add("conv1", {{4, 3, 2, 2}, {4}}, 1.0f);
  add("ip1", {{5, 12}, {5}}, 2.0f);
  add("relu1", {}, 0.0f);
  add("scale1", {{2, 3, 4}}, 3.0f);
  add("zero", {{0, 3}}, 4.0f);
  return net;
}

bool SameBits(const google::protobuf::RepeatedField<float>& a,
              const google::protobuf::RepeatedField<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);
}

std::vector<int64_t> Dims(const caffe::BlobProto& blob) {
  return {blob.shape().dim().begin(), blob.shape().dim().end()};
}

// Every layer of `written` is in `read` (matched by name) with the same shapes and bits.
void ExpectSameModel(const caffe::NetParameter& written, const caffe::NetParameter& read,
                     bool with_diff) {
  std::map<std::string, const caffe::LayerParameter*> by_name;
  for (const auto& layer : read.layer()) by_name[layer.name()] = &layer;
  ASSERT_EQ(by_name.size(), static_cast<size_t>(written.layer_size()));
  for (const auto& expected : written.layer()) {
    SCOPED_TRACE(expected.name());
    ASSERT_EQ(by_name.count(expected.name()), 1u);
    const caffe::LayerParameter& actual = *by_name[expected.name()];
    EXPECT_FALSE(actual.has_type());  // the file holds names and blobs only
    ASSERT_EQ(actual.blobs_size(), expected.blobs_size());
    for (int i = 0; i < expected.blobs_size(); ++i) {
      EXPECT_EQ(Dims(actual.blobs(i)), Dims(expected.blobs(i))) << "blob " << i;
      EXPECT_TRUE(SameBits(actual.blobs(i).data(), expected.blobs(i).data())) << "blob " << i;
      if (with_diff) {
        EXPECT_TRUE(SameBits(actual.blobs(i).diff(), expected.blobs(i).diff())) << "blob " << i;
      } else {
        EXPECT_EQ(actual.blobs(i).diff_size(), 0) << "blob " << i;
      }
    }
  }
}

TEST(Hdf5IoTest, ModelRoundTripIsBitIdentical) {
  SKIP_WITHOUT_HDF5();
  TempFile file("model.caffemodel.h5");
  const caffe::NetParameter model = MakeModel(false);
  WriteNetParameterHdf5(model, file.path());
  EXPECT_FALSE(std::filesystem::exists(file.temp())) << "the temporary was not renamed";
  ExpectSameModel(model, ReadNetParameterHdf5(file.path()), false);
}

TEST(Hdf5IoTest, ModelRoundTripWithDiffs) {
  SKIP_WITHOUT_HDF5();
  TempFile file("diff.caffemodel.h5");
  const caffe::NetParameter model = MakeModel(true);
  WriteNetParameterHdf5(model, file.path(), /*write_diff=*/true);
  ExpectSameModel(model, ReadNetParameterHdf5(file.path()), true);
  // Without write_diff the diffs present in the protos stay out of the file.
  WriteNetParameterHdf5(model, file.path(), /*write_diff=*/false);
  ExpectSameModel(model, ReadNetParameterHdf5(file.path()), false);
}

TEST(Hdf5IoTest, LegacyShapesAndDoubleDataAreStoredAsFloat) {
  SKIP_WITHOUT_HDF5();
  TempFile file("legacy.caffemodel.h5");
  caffe::NetParameter model;
  caffe::LayerParameter* layer = model.add_layer();
  layer->set_name("old");
  caffe::BlobProto* blob = layer->add_blobs();
  blob->set_num(1);
  blob->set_channels(1);
  blob->set_height(2);
  blob->set_width(3);
  for (int i = 0; i < 6; ++i) blob->add_double_data(0.5 * i);
  WriteNetParameterHdf5(model, file.path());
  const caffe::NetParameter read = ReadNetParameterHdf5(file.path());
  ASSERT_EQ(read.layer_size(), 1);
  ASSERT_EQ(read.layer(0).blobs_size(), 1);
  EXPECT_EQ(Dims(read.layer(0).blobs(0)), (std::vector<int64_t>{1, 1, 2, 3}));
  ASSERT_EQ(read.layer(0).blobs(0).data_size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(read.layer(0).blobs(0).data(i), 0.5f * i);
}

TEST(Hdf5IoTest, DuplicateLayerNameIsWrittenOnce) {
  SKIP_WITHOUT_HDF5();
  TempFile file("dup.caffemodel.h5");
  caffe::NetParameter model;
  caffe::LayerParameter* first = model.add_layer();
  first->set_name("twin");
  AddBlob(first, {2}, {1.0f, 2.0f});
  caffe::LayerParameter* second = model.add_layer();
  second->set_name("twin");
  AddBlob(second, {3}, {7.0f, 8.0f, 9.0f});
  WriteNetParameterHdf5(model, file.path());
  const caffe::NetParameter read = ReadNetParameterHdf5(file.path());
  ASSERT_EQ(read.layer_size(), 1);
  ASSERT_EQ(read.layer(0).blobs_size(), 1);
  EXPECT_EQ(Dims(read.layer(0).blobs(0)), (std::vector<int64_t>{2}));  // the first one's
}

TEST(Hdf5IoTest, SolverStateRoundTrip) {
  SKIP_WITHOUT_HDF5();
  TempFile file("snap.solverstate.h5");
  caffe::SolverState state;
  state.set_iter(1234);
  state.set_current_step(3);
  state.set_learned_net("/snapshots/lenet_iter_1234.caffemodel.h5");
  const std::vector<std::vector<int>> shapes = {{20, 1, 5, 5}, {20}, {10, 500}};
  for (size_t k = 0; k < shapes.size(); ++k) {
    caffe::BlobProto* blob = state.add_history();
    int count = 1;
    for (int dim : shapes[k]) {
      blob->mutable_shape()->add_dim(dim);
      count *= dim;
    }
    for (float value : Values(count, static_cast<float>(k))) blob->add_data(value);
  }
  WriteSolverStateHdf5(state, file.path());
  EXPECT_FALSE(std::filesystem::exists(file.temp()));
  const caffe::SolverState read = ReadSolverStateHdf5(file.path());
  EXPECT_EQ(read.iter(), 1234);
  EXPECT_EQ(read.current_step(), 3);
  EXPECT_EQ(read.learned_net(), state.learned_net());
  ASSERT_EQ(read.history_size(), 3);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(Dims(read.history(k)), Dims(state.history(k))) << "history " << k;
    EXPECT_TRUE(SameBits(read.history(k).data(), state.history(k).data())) << "history " << k;
  }
}

TEST(Hdf5IoTest, SolverStateWithoutLearnedNet) {
  SKIP_WITHOUT_HDF5();
  TempFile file("bare.solverstate.h5");
  caffe::SolverState state;
  state.set_iter(7);
  WriteSolverStateHdf5(state, file.path());
  const caffe::SolverState read = ReadSolverStateHdf5(file.path());
  EXPECT_EQ(read.iter(), 7);
  EXPECT_EQ(read.current_step(), 0);
  EXPECT_FALSE(read.has_learned_net());
  EXPECT_EQ(read.history_size(), 0);
}

TEST(Hdf5IoTest, IsHdf5FileChecksTheSignature) {
  SKIP_WITHOUT_HDF5();
  TempFile h5("sig.h5");
  TempFile text("sig.prototxt");
  WriteNetParameterHdf5(MakeModel(false), h5.path());
  std::ofstream(text.path()) << "name: \"not hdf5\"\n";
  EXPECT_TRUE(IsHdf5File(h5.path()));
  EXPECT_FALSE(IsHdf5File(text.path()));
  EXPECT_FALSE(IsHdf5File(text.path() + ".missing"));
}

TEST(Hdf5IoTest, MissingFileIsNotFound) {
  SKIP_WITHOUT_HDF5();
  TempFile file("absent.caffemodel.h5");
  Error e = CatchError([&] { ReadNetParameterHdf5(file.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(e.what()).find(file.path()), std::string::npos) << e.what();
  e = CatchError([&] { ReadSolverStateHdf5(file.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
}

TEST(Hdf5IoTest, TruncatedFileIsAnError) {
  SKIP_WITHOUT_HDF5();
  TempFile model("cut.caffemodel.h5");
  TempFile state("cut.solverstate.h5");
  WriteNetParameterHdf5(MakeModel(true), model.path(), true);
  caffe::SolverState solver_state;
  solver_state.set_iter(5);
  solver_state.set_learned_net("x.caffemodel.h5");
  for (int k = 0; k < 3; ++k) {
    caffe::BlobProto* blob = solver_state.add_history();
    blob->mutable_shape()->add_dim(300);
    for (float value : Values(300, 1.0f)) blob->add_data(value);
  }
  WriteSolverStateHdf5(solver_state, state.path());
  for (const TempFile* file : {&model, &state}) {
    const auto size = std::filesystem::file_size(file->path());
    std::filesystem::resize_file(file->path(), size / 2);
    EXPECT_TRUE(IsHdf5File(file->path()));  // the signature survives the cut
  }
  Error e = CatchError([&] { ReadNetParameterHdf5(model.path()); });
  EXPECT_NE(std::string(e.what()).find(model.path()), std::string::npos) << e.what();
  e = CatchError([&] { ReadSolverStateHdf5(state.path()); });
  EXPECT_NE(std::string(e.what()).find(state.path()), std::string::npos) << e.what();
}

TEST(Hdf5IoTest, TextFileIsNotHdf5) {
  SKIP_WITHOUT_HDF5();
  TempFile text("model.prototxt.h5");
  std::ofstream(text.path()) << "layer { name: \"a\" }\n";
  const Error e = CatchError([&] { ReadNetParameterHdf5(text.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kParse);
  EXPECT_NE(std::string(e.what()).find(text.path()), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("not an HDF5 file"), std::string::npos) << e.what();
}

TEST(Hdf5IoTest, MissingGroupsAndDatasetsAreNamed) {
  SKIP_WITHOUT_HDF5();
  TempFile state("nodata.solverstate.h5");
  TempFile model("nostate.caffemodel.h5");
  caffe::SolverState solver_state;
  solver_state.set_iter(1);
  WriteSolverStateHdf5(solver_state, state.path());
  WriteNetParameterHdf5(MakeModel(false), model.path());
  // A solver state is not a model: it has no group "data".
  Error e = CatchError([&] { ReadNetParameterHdf5(state.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kParse);
  EXPECT_NE(std::string(e.what()).find(state.path() + ": group /data: not found"),
            std::string::npos)
      << e.what();
  // ... and a model is not a solver state: it has no dataset "iter".
  e = CatchError([&] { ReadSolverStateHdf5(model.path()); });
  EXPECT_NE(std::string(e.what()).find(model.path() + ": dataset /iter: not found"),
            std::string::npos)
      << e.what();
}

// The reader returns what the file holds; checking shapes against a net is
// Net::CopyTrainedLayersFrom's job, which names the layer and both shapes.
TEST(Hdf5IoTest, WrongRankIsReadAsIsAndRejectedByTheNet) {
  SKIP_WITHOUT_HDF5();
  TempFile file("rank.caffemodel.h5");
  caffe::NetParameter model;
  caffe::LayerParameter* layer = model.add_layer();
  layer->set_name("ip1");
  AddBlob(layer, {6}, Values(6, 1.0f));  // the net wants 2 x 3
  AddBlob(layer, {2}, {0.5f, -0.5f});
  WriteNetParameterHdf5(model, file.path());
  const caffe::NetParameter read = ReadNetParameterHdf5(file.path());
  ASSERT_EQ(read.layer_size(), 1);
  EXPECT_EQ(Dims(read.layer(0).blobs(0)), (std::vector<int64_t>{6}));

  if (!LayerRegistry::Get().Has("InnerProduct")) {
    GTEST_SKIP() << "InnerProduct is not built in; the net half of this test needs it";
  }
  Context ctx(Device::Cpu(), 1701);
  caffe::NetParameter definition;
  ReadProtoFromTextString(R"(
    name: "tiny"
    layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }
    layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
            inner_product_param { num_output: 2 } }
  )",
                          "<test>", &definition);
  Net net(definition, &ctx);
  const Error e = CatchError([&] { net.CopyTrainedLayersFrom(read); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("ip1"), std::string::npos) << e.what();
}

// Damaged files on which libhdf5 1.10 itself reads through a null pointer (found by fuzzing; the
// second only along the state reader's own path, counting a group's links after reading others):
// the library meets each first in a child process, and the readers refuse it naming the file
// instead of crashing this one.
TEST(Hdf5IoTest, AFileThatCrashesTheLibraryIsRefusedNotOpened) {
  SKIP_WITHOUT_HDF5();
  struct Case {
    const char* file;
    bool net_reader_crashes;  // the second has no /data: the model reader stops before the crash
  };
  for (const Case& c : {Case{"regress-libhdf5-segv.h5", true},
                        Case{"regress-libhdf5-segv-group-count.h5", false}}) {
    const std::string path = std::string(CORTADO_SOURCE_DIR) + "/tests/fuzz/corpus/hdf5/" + c.file;
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    for (int reader = 0; reader < 2; ++reader) {
      const bool crashes = reader == 1 || c.net_reader_crashes;
      try {
        if (reader == 0) {
          ReadNetParameterHdf5(path);
        } else {
          ReadSolverStateHdf5(path);
        }
        FAIL() << c.file << ": reader " << reader << " accepted the file";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), crashes ? ErrorCode::kIo : ErrorCode::kParse) << e.what();
        EXPECT_EQ(std::string(e.what()).find(
                      "'" + path + "' is damaged: the HDF5 library crashed") != std::string::npos,
                  crashes)
            << c.file << ": reader " << reader << ": " << e.what();
      }
    }
  }
  // A sound file passes the check (the child's verdict does not stop it).
  const std::string sound = std::string(CORTADO_SOURCE_DIR) + "/tests/fuzz/corpus/hdf5/model.h5";
  EXPECT_NO_THROW(ProbeHdf5File(sound, {"data"}));
}

// A 5 KB damaged state file whose history dataset declares numbers of hundreds of KB each made
// the library allocate about 2 GB converting it (found by fuzzing): refused before reading.
TEST(Hdf5IoTest, NumbersOfMoreThanEightBytesAreRefusedBeforeReading) {
  SKIP_WITHOUT_HDF5();
  const std::string path =
      std::string(CORTADO_SOURCE_DIR) + "/tests/fuzz/corpus/hdf5/regress-huge-element-type.h5";
  try {
    ReadSolverStateHdf5(path);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected 1 to 8"), std::string::npos) << e.what();
  }
}

TEST(Hdf5IoTest, FailedWritesLeaveNoFiles) {
  SKIP_WITHOUT_HDF5();
  TempFile file("bad.caffemodel.h5");
  // A blob whose data does not fill its shape: found after the temporary was created.
  caffe::NetParameter model = MakeModel(false);
  AddBlob(model.add_layer(), {2, 2}, {1.0f, 2.0f, 3.0f});
  model.mutable_layer(model.layer_size() - 1)->set_name("short");
  Error e = CatchError([&] { WriteNetParameterHdf5(model, file.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("dataset /data/short/0"), std::string::npos) << e.what();
  EXPECT_FALSE(std::filesystem::exists(file.path()));
  EXPECT_FALSE(std::filesystem::exists(file.temp()));

  // HDF5 splits names at '/', so such a layer name cannot be stored.
  caffe::NetParameter slashed;
  slashed.add_layer()->set_name("conv1/7x7_s2");
  e = CatchError([&] { WriteNetParameterHdf5(slashed, file.path()); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("conv1/7x7_s2"), std::string::npos) << e.what();
  EXPECT_FALSE(std::filesystem::exists(file.path()));

  // A directory that does not exist.
  const std::string nowhere = file.path() + ".dir/model.h5";
  e = CatchError([&] { WriteNetParameterHdf5(MakeModel(false), nowhere); });
  EXPECT_EQ(e.code(), ErrorCode::kIo);
  EXPECT_NE(std::string(e.what()).find(nowhere), std::string::npos) << e.what();
}

TEST(Hdf5IoTest, WithoutHdf5EveryCallIsUnimplemented) {
  if (Hdf5Available()) GTEST_SKIP() << "this build has HDF5";
  const Error e = CatchError([] { ReadNetParameterHdf5("x.h5"); });
  EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  EXPECT_EQ(CatchError([] { WriteSolverStateHdf5({}, "x.h5"); }).code(), ErrorCode::kUnimplemented);
}

// Runs a shell command; returns its stdout and stderr, and its exit status in *status.
std::string RunCommand(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return output;
  }
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  *status = ::pclose(pipe);
  return output;
}

TEST(Hdf5IoTest, H5dumpSeesCaffesLayout) {
  SKIP_WITHOUT_HDF5();
  if (std::system("h5dump --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "h5dump (package hdf5-tools) is not on PATH";
  }
  TempFile file("dump.caffemodel.h5");
  WriteNetParameterHdf5(MakeModel(false), file.path());
  int status = 0;
  const std::string out = RunCommand("h5dump -H '" + file.path() + "'", &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("GROUP \"data\""), std::string::npos) << out;
  EXPECT_NE(out.find("GROUP \"conv1\""), std::string::npos) << out;
  const std::string one = RunCommand("h5dump -H -d /data/conv1/0 '" + file.path() + "'", &status);
  ASSERT_EQ(status, 0) << one;
  EXPECT_NE(one.find("DATASET \"/data/conv1/0\""), std::string::npos) << one;
  EXPECT_NE(one.find("H5T_IEEE_F32LE"), std::string::npos) << one;
  EXPECT_NE(one.find("( 4, 3, 2, 2 )"), std::string::npos) << one;
}

#if CORTADO_WITH_HDF5

// Closes an HDF5 id at scope exit (the test's own, minimal RAII).
struct Closer {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Closer() {
    if (id >= 0) close(id);
  }
};

// What Caffe's H5LT calls produce, checked with the raw C API: float blobs, 1-axis int
// counters, and learned_net as a scalar fixed-length NUL-terminated string of strlen + 1.
TEST(Hdf5IoTest, FilesHaveCaffesTypes) {
  TempFile model("types.caffemodel.h5");
  TempFile state("types.solverstate.h5");
  WriteNetParameterHdf5(MakeModel(false), model.path());
  caffe::SolverState solver_state;
  solver_state.set_iter(42);
  solver_state.set_current_step(2);
  solver_state.set_learned_net("net.caffemodel.h5");
  WriteSolverStateHdf5(solver_state, state.path());

  Closer file{H5Fopen(model.path().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  ASSERT_GE(file.id, 0);
  Closer weights{H5Dopen2(file.id, "/data/conv1/0", H5P_DEFAULT), H5Dclose};
  ASSERT_GE(weights.id, 0);
  Closer type{H5Dget_type(weights.id), H5Tclose};
  EXPECT_GT(H5Tequal(type.id, H5T_NATIVE_FLOAT), 0);
  Closer space{H5Dget_space(weights.id), H5Sclose};
  hsize_t dims[4] = {};
  ASSERT_EQ(H5Sget_simple_extent_ndims(space.id), 4);
  H5Sget_simple_extent_dims(space.id, dims, nullptr);
  EXPECT_EQ(std::vector<hsize_t>(dims, dims + 4), (std::vector<hsize_t>{4, 3, 2, 2}));
  EXPECT_GT(H5Lexists(file.id, "/data/relu1", H5P_DEFAULT), 0);  // a group even without blobs
  EXPECT_EQ(H5Lexists(file.id, "/diff", H5P_DEFAULT), 0);

  Closer sfile{H5Fopen(state.path().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  ASSERT_GE(sfile.id, 0);
  Closer iter{H5Dopen2(sfile.id, "iter", H5P_DEFAULT), H5Dclose};
  Closer iter_space{H5Dget_space(iter.id), H5Sclose};
  EXPECT_EQ(H5Sget_simple_extent_ndims(iter_space.id), 1);
  EXPECT_EQ(H5Sget_simple_extent_npoints(iter_space.id), 1);
  Closer iter_type{H5Dget_type(iter.id), H5Tclose};
  EXPECT_EQ(H5Tget_class(iter_type.id), H5T_INTEGER);
  Closer net{H5Dopen2(sfile.id, "learned_net", H5P_DEFAULT), H5Dclose};
  Closer net_type{H5Dget_type(net.id), H5Tclose};
  EXPECT_EQ(H5Tget_class(net_type.id), H5T_STRING);
  EXPECT_EQ(H5Tis_variable_str(net_type.id), 0);
  EXPECT_EQ(H5Tget_size(net_type.id), std::strlen("net.caffemodel.h5") + 1);
  EXPECT_EQ(H5Tget_strpad(net_type.id), H5T_STR_NULLTERM);
  Closer net_space{H5Dget_space(net.id), H5Sclose};
  EXPECT_EQ(H5Sget_simple_extent_type(net_space.id), H5S_SCALAR);
}

// Files from other writers: double datasets (Caffe's double build, h5py's default), a layer
// that leaves out a shared parameter, and a variable-length learned_net string.
TEST(Hdf5IoTest, ReadsDoublesGapsAndVariableLengthStrings) {
  TempFile model("foreign.caffemodel.h5");
  TempFile state("foreign.solverstate.h5");
  {
    Closer file{H5Fcreate(model.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
    ASSERT_GE(file.id, 0);
    Closer data{H5Gcreate2(file.id, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
    Closer a{H5Gcreate2(data.id, "a", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
    Closer b{H5Gcreate2(data.id, "b", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
    const hsize_t dims[2] = {2, 2};
    const double values[4] = {0.25, -1.5, 1e-3, 3.0};
    Closer space{H5Screate_simple(2, dims, nullptr), H5Sclose};
    Closer a0{
        H5Dcreate2(a.id, "0", H5T_NATIVE_DOUBLE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose};
    ASSERT_GE(H5Dwrite(a0.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
    // b shares a's weights (blob 0) and owns only its bias (blob 1).
    Closer b1{
        H5Dcreate2(b.id, "1", H5T_NATIVE_DOUBLE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose};
    ASSERT_GE(H5Dwrite(b1.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
  }
  const caffe::NetParameter read = ReadNetParameterHdf5(model.path());
  ASSERT_EQ(read.layer_size(), 2);
  EXPECT_EQ(read.layer(0).name(), "a");
  ASSERT_EQ(read.layer(0).blobs_size(), 1);
  EXPECT_EQ(Dims(read.layer(0).blobs(0)), (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(read.layer(0).blobs(0).data_size(), 4);
  EXPECT_EQ(read.layer(0).blobs(0).data(0), 0.25f);
  EXPECT_EQ(read.layer(0).blobs(0).data(2), static_cast<float>(1e-3));
  ASSERT_EQ(read.layer(1).blobs_size(), 2);
  EXPECT_FALSE(read.layer(1).blobs(0).has_shape());  // the shared one: a placeholder
  EXPECT_EQ(read.layer(1).blobs(0).data_size(), 0);
  EXPECT_EQ(read.layer(1).blobs(1).data_size(), 4);
  // Writing it back leaves the placeholder out again, as Caffe does.
  WriteNetParameterHdf5(read, model.path());
  EXPECT_EQ(ReadNetParameterHdf5(model.path()).layer(1).blobs_size(), 2);
  {
    Closer file{H5Fopen(model.path().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
    EXPECT_EQ(H5Lexists(file.id, "/data/b/0", H5P_DEFAULT), 0);
  }

  {
    Closer file{H5Fcreate(state.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
    ASSERT_GE(file.id, 0);
    Closer scalar{H5Screate(H5S_SCALAR), H5Sclose};
    const int iter = 9;
    Closer iter_set{H5Dcreate2(file.id, "iter", H5T_NATIVE_INT, scalar.id, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT),
                    H5Dclose};
    ASSERT_GE(H5Dwrite(iter_set.id, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, &iter), 0);
    Closer type{H5Tcopy(H5T_C_S1), H5Tclose};
    ASSERT_GE(H5Tset_size(type.id, H5T_VARIABLE), 0);
    const char* text = "vlen.caffemodel.h5";
    Closer net{H5Dcreate2(file.id, "learned_net", type.id, scalar.id, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT),
               H5Dclose};
    ASSERT_GE(H5Dwrite(net.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text), 0);
    Closer history{H5Gcreate2(file.id, "history", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
  }
  const caffe::SolverState read_state = ReadSolverStateHdf5(state.path());
  EXPECT_EQ(read_state.iter(), 9);
  EXPECT_EQ(read_state.current_step(), 0);
  EXPECT_EQ(read_state.learned_net(), "vlen.caffemodel.h5");
  EXPECT_EQ(read_state.history_size(), 0);
}

#endif  // CORTADO_WITH_HDF5

}  // namespace
}  // namespace cortado::io
