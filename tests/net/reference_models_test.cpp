// SPDX-License-Identifier: Apache-2.0
// Caffe's reference models (../shared/reference-models) must load and run unchanged.
// Train/val nets run forward and backward with their Data layers replaced by Input layers of
// the same shapes (the data sets are not part of the repository); deploy nets run under
// `cortado time`. Skips with a message when ../shared is absent (a user's fresh clone).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "io/proto_io.hpp"
#include "math/math.hpp"
#include "net/net.hpp"
#include "tools/cli_runner.hpp"

namespace cortado {
namespace {

namespace fs = std::filesystem;

fs::path ReferenceDir() { return fs::path(CORTADO_SHARED_DIR) / "reference-models"; }

#define SKIP_WITHOUT_REFERENCE_MODELS()                                                   \
  do {                                                                                    \
    if (!fs::exists(ReferenceDir())) {                                                    \
      GTEST_SKIP() << "reference models not found at " << ReferenceDir()                  \
                   << " (they live in ../shared beside the checkout, which CI provides)"; \
    }                                                                                     \
  } while (0)

struct TrainVal {
  const char* file;
  int channels, height, width;
  int max_batch;  // keep the big ImageNet nets cheap enough for a test
};

const TrainVal kTrainVal[] = {
    {"lenet/lenet_train_test.prototxt", 1, 28, 28, 64},
    {"cifar10/cifar10_quick_train_test.prototxt", 3, 32, 32, 100},
    {"cifar10/cifar10_full_train_test.prototxt", 3, 32, 32, 100},
    {"bvlc_reference_caffenet/train_val.prototxt", 3, 227, 227, 2},
    {"bvlc_alexnet/train_val.prototxt", 3, 227, 227, 2},
};

// Replaces each Data layer by an Input layer producing data [batch, C, H, W] and label [batch].
caffe::NetParameter WithInputs(caffe::NetParameter param, const TrainVal& model) {
  for (auto& layer : *param.mutable_layer()) {
    if (layer.type() != "Data") continue;
    const int batch = std::min(static_cast<int>(layer.data_param().batch_size()), model.max_batch);
    layer.set_type("Input");
    layer.clear_data_param();
    layer.clear_transform_param();
    auto* shape = layer.mutable_input_param()->add_shape();
    for (int d : {batch, model.channels, model.height, model.width}) shape->add_dim(d);
    layer.mutable_input_param()->add_shape()->add_dim(batch);
  }
  return param;
}

class ReferenceTrainValTest : public ::testing::TestWithParam<TrainVal> {};

// Builds `original` (Data layers replaced) in both phases and runs a forward and backward pass
// on random images: a finite positive loss, gradients down to the first layer when training,
// an accuracy blob when testing, and `classes` scores per image when it is not 0.
void ExpectRunsForwardBackward(const caffe::NetParameter& original, const TrainVal& model,
                               int classes = 0) {
  for (caffe::Phase phase : {caffe::TRAIN, caffe::TEST}) {
    caffe::NetParameter param = WithInputs(original, model);
    param.mutable_state()->set_phase(phase);
    Context ctx(Device::Cpu(), 1701);
    Net net(param, &ctx);
    Tensor* data = net.blob_by_name("data");
    Tensor* label = net.blob_by_name("label");
    math::RngGaussian(data->count(), 0.0f, 1.0f, ctx.rng(), data->mutable_cpu_data());
    for (int i = 0; i < label->count(); ++i) {
      label->mutable_cpu_data()[i] = static_cast<float>(i % 10);
    }
    const float loss = net.ForwardBackward();
    EXPECT_TRUE(std::isfinite(loss)) << model.file;
    EXPECT_GT(loss, 0.0f) << model.file;
    if (classes > 0) {
      // The classifier's scores: the bottom of the loss.
      EXPECT_EQ(net.bottom_vecs().back()[0]->count(1), classes) << model.file;
    }
    if (phase == caffe::TRAIN) {
      // Backward reached the first layer's weights.
      ASSERT_FALSE(net.learnable_params().empty());
      EXPECT_GT(net.learnable_params().front()->asum_diff(), 0.0f) << model.file;
    } else {
      EXPECT_TRUE(net.has_blob("accuracy")) << model.file;
    }
  }
}

TEST_P(ReferenceTrainValTest, BuildsAndRunsForwardBackward) {
  SKIP_WITHOUT_REFERENCE_MODELS();
  const TrainVal& model = GetParam();
  ExpectRunsForwardBackward(
      io::ReadNetParameterFromTextFile((ReferenceDir() / model.file).string()), model);
}

std::string TrainValName(const ::testing::TestParamInfo<TrainVal>& param_info) {
  std::string name = param_info.param.file;
  return name.substr(0, name.find('/')) + "_" + std::to_string(param_info.index);
}

INSTANTIATE_TEST_SUITE_P(All, ReferenceTrainValTest, ::testing::ValuesIn(kTrainVal), TrainValName);

// Every layer type the reference models use is registered (static registration survived
// linking).
TEST(ReferenceModelsTest, RegistryHoldsEveryLayerType) {
  SKIP_WITHOUT_REFERENCE_MODELS();
  std::set<std::string> types;
  for (const auto& entry : fs::recursive_directory_iterator(ReferenceDir())) {
    if (entry.path().extension() != ".prototxt") continue;
    if (entry.path().filename().string().find("solver") != std::string::npos) continue;
    caffe::NetParameter param = io::ReadNetParameterFromTextFile(entry.path().string());
    for (const auto& layer : param.layer()) types.insert(layer.type());
  }
  EXPECT_GT(types.size(), 5u);
  for (const auto& type : types) {
    EXPECT_TRUE(LayerRegistry::Get().Has(type)) << "layer type not registered: " << type;
  }
}

class ReferenceDeployTimeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceDeployTimeTest, RunsUnderCortadoTime) {
  SKIP_WITHOUT_REFERENCE_MODELS();
  const cli_testing::CliResult result = cli_testing::RunCli(
      {"time", "--iterations=1", "--model=" + (ReferenceDir() / GetParam()).string()});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(result.Contains("Average Forward pass")) << result.output;
  EXPECT_TRUE(result.Contains("Average Forward-Backward")) << result.output;
}

std::string DeployName(const ::testing::TestParamInfo<const char*>& param_info) {
  std::string name = param_info.param;
  return name.substr(0, name.find('/'));
}

INSTANTIATE_TEST_SUITE_P(All, ReferenceDeployTimeTest,
                         ::testing::Values("lenet/lenet.prototxt",
                                           "bvlc_reference_caffenet/deploy.prototxt"),
                         DeployName);

// The Fashion-MNIST example's nets (they ship with the repository): built in both phases, a
// forward and backward pass with the Data layers replaced as above, 10 class scores.
class ExampleNetTest : public ::testing::TestWithParam<TrainVal> {};

TEST_P(ExampleNetTest, BuildsAndRunsForwardBackward) {
  const TrainVal& model = GetParam();
  const fs::path path = fs::path(CORTADO_SOURCE_DIR) / "examples/fashion-mnist" / model.file;
  ExpectRunsForwardBackward(io::ReadNetParameterFromTextFile(path.string()), model, 10);
}

std::string ExampleName(const ::testing::TestParamInfo<TrainVal>& param_info) {
  std::string name = param_info.param.file;
  return name.substr(0, name.find("_train"));
}

INSTANTIATE_TEST_SUITE_P(FashionMnist, ExampleNetTest,
                         ::testing::Values(TrainVal{"lenet_train_test.prototxt", 1, 28, 28, 8},
                                           TrainVal{"lenet_bn_train_test.prototxt", 1, 28, 28, 8},
                                           TrainVal{"resnet_train_test.prototxt", 1, 28, 28, 8}),
                         ExampleName);

}  // namespace
}  // namespace cortado
