// SPDX-License-Identifier: Apache-2.0
// Net behaviour that needs real layers: shared parameters, in-place layers, loss weights,
// lr_mult 0, force_backward, weight copying and .caffemodel round trips, and the errors for
// nets that do not fit together. A whole-net numerical gradient check backs the sharing and
// split logic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/proto_io.hpp"
#include "math/math.hpp"
#include "net/net.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::NetParam;

void FillInput(Net* net, const std::string& blob, unsigned seed) {
  Rng rng(seed);
  Tensor* t = net->blob_by_name(blob);
  math::RngGaussian(t->count(), 0.0f, 1.0f, rng, t->mutable_cpu_data());
}

// Compares every learnable parameter's analytic gradient with central differences of the loss.
void CheckNetGradients(Net* net) {
  net->ForwardBackward();
  std::vector<std::vector<float>> analytic;
  for (Tensor* p : net->learnable_params()) {
    analytic.emplace_back(p->cpu_diff(), p->cpu_diff() + p->count());
  }
  const float step = 1e-2f;
  for (size_t k = 0; k < net->learnable_params().size(); ++k) {
    Tensor* p = net->learnable_params()[k];
    for (int i = 0; i < p->count(); ++i) {
      const float original = p->cpu_data()[i];
      p->mutable_cpu_data()[i] = original + step;
      const double plus = net->Forward();
      p->mutable_cpu_data()[i] = original - step;
      const double minus = net->Forward();
      p->mutable_cpu_data()[i] = original;
      const float numeric = static_cast<float>((plus - minus) / (2 * step));
      EXPECT_NEAR(analytic[k][i], numeric, 2e-3f * std::max(1.0f, std::fabs(numeric)))
          << "param " << k << " element " << i;
    }
  }
}

const char kSharedNet[] = R"(
  name: "shared"
  force_backward: true
  layer { name: "in" type: "Input" top: "x" top: "target"
          input_param { shape { dim: 3 dim: 4 } shape { dim: 3 dim: 2 } } }
  layer { name: "ip_a" type: "InnerProduct" bottom: "x" top: "a"
          param { name: "w" } param { name: "b" }
          inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
                                bias_filler { type: "gaussian" std: 0.5 } } }
  layer { name: "ip_b" type: "InnerProduct" bottom: "x" top: "b"
          param { name: "w" } param { name: "b" }
          inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
                                bias_filler { type: "gaussian" std: 0.5 } } }
  layer { name: "relu" type: "ReLU" bottom: "b" top: "b" }
  layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "s" }
  layer { name: "loss" type: "EuclideanLoss" bottom: "s" bottom: "target" top: "loss" }
)";

TEST(NetLayersTest, SharedParametersAreOneTensorAndGradientsAddUp) {
  Context ctx(Device::Cpu(), 1701);
  Net net(NetParam(kSharedNet), &ctx);
  // Two layers, two blobs each, but only two learnable parameters.
  EXPECT_EQ(net.params().size(), 4u);
  ASSERT_EQ(net.learnable_params().size(), 2u);
  EXPECT_EQ(net.layer_by_name("ip_a")->blobs()[0]->cpu_data(),
            net.layer_by_name("ip_b")->blobs()[0]->cpu_data());
  EXPECT_EQ(net.param_owners()[2], 0);
  // x feeds two layers: a Split was inserted.
  EXPECT_TRUE(net.has_layer("x_in_0_split"));
  // ReLU ran in place: no blob was made for its top. Blobs: x, target, the two split tops,
  // a, b, s, loss.
  EXPECT_EQ(net.blob_names().size(), 8u);
  FillInput(&net, "x", 1);
  FillInput(&net, "target", 2);
  CheckNetGradients(&net);
}

TEST(NetLayersTest, LossWeightScalesLossAndGradients) {
  const std::string base = R"(
    layer { name: "in" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" )";
  Context ctx1(Device::Cpu(), 5), ctx2(Device::Cpu(), 5);
  Net one(NetParam(base + "}"), &ctx1);
  Net two(NetParam(base + "loss_weight: 2 }"), &ctx2);
  for (Net* net : {&one, &two}) {
    FillInput(net, "x", 1);
    FillInput(net, "t", 2);
  }
  const float loss1 = one.ForwardBackward();
  const float loss2 = two.ForwardBackward();
  EXPECT_NEAR(loss2, 2 * loss1, 1e-5f);
  EXPECT_NEAR(two.learnable_params()[0]->asum_diff(), 2 * one.learnable_params()[0]->asum_diff(),
              1e-4f);
}

TEST(NetLayersTest, ZeroLrMultStopsBackwardAndForceBackwardRestoresIt) {
  const std::string body = R"(
    layer { name: "in" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
    layer { name: "frozen" type: "InnerProduct" bottom: "x" top: "h"
            param { lr_mult: 0 } param { lr_mult: 0 }
            inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 1 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "h" top: "y"
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
  )";
  Context ctx(Device::Cpu(), 3);
  Net net(NetParam(body), &ctx);
  const auto& names = net.layer_names();
  const int frozen =
      static_cast<int>(std::find(names.begin(), names.end(), "frozen") - names.begin());
  EXPECT_FALSE(net.layer_need_backward()[frozen]);
  EXPECT_EQ(net.params_lr()[0], 0.0f);

  Context ctx2(Device::Cpu(), 3);
  Net forced(NetParam("force_backward: true " + body), &ctx2);
  EXPECT_TRUE(forced.layer_need_backward()[frozen]);
  FillInput(&forced, "x", 1);
  FillInput(&forced, "t", 2);
  forced.ForwardBackward();
  EXPECT_GT(forced.blob_by_name("x")->asum_diff(), 0.0f);
}

const char kLeNetish[] = R"(
  name: "small"
  layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 1 dim: 8 dim: 8 } } }
  layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
          convolution_param { num_output: 3 kernel_size: 3 weight_filler { type: "xavier" }
                              bias_filler { type: "constant" value: 0.1 } } }
  layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
          pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
  layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
          inner_product_param { num_output: 4 weight_filler { type: "xavier" } } }
)";

TEST(NetLayersTest, CaffemodelRoundTripAndCopyByName) {
  Context ctx(Device::Cpu(), 11);
  Net trained(NetParam(kLeNetish), &ctx);
  caffe::NetParameter weights;
  trained.ToProto(&weights);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("small." + std::to_string(::getpid()) + ".caffemodel"))
                               .string();
  io::WriteProtoToBinaryFile(weights, path);

  Context ctx2(Device::Cpu(), 99);
  Net fresh(NetParam(kLeNetish), &ctx2);
  EXPECT_NE(fresh.learnable_params()[0]->cpu_data()[0],
            trained.learnable_params()[0]->cpu_data()[0]);
  fresh.CopyTrainedLayersFrom(path);
  for (size_t k = 0; k < fresh.learnable_params().size(); ++k) {
    const Tensor* a = fresh.learnable_params()[k];
    const Tensor* b = trained.learnable_params()[k];
    ASSERT_EQ(a->count(), b->count());
    EXPECT_EQ(std::memcmp(a->cpu_data(), b->cpu_data(), sizeof(float) * a->count()), 0);
  }

  // A net that shares only some layer names takes those and leaves the rest alone.
  Context ctx3(Device::Cpu(), 5);
  Net other(NetParam(R"(
    layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 1 dim: 8 dim: 8 } } }
    layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
            convolution_param { num_output: 3 kernel_size: 3 } }
    layer { name: "ip_new" type: "InnerProduct" bottom: "conv" top: "ip"
            inner_product_param { num_output: 4 } }
  )"),
            &ctx3);
  other.CopyTrainedLayersFrom(path);
  EXPECT_EQ(other.layer_by_name("conv")->blobs()[0]->cpu_data()[4],
            trained.layer_by_name("conv")->blobs()[0]->cpu_data()[4]);
  std::filesystem::remove(path);
}

TEST(NetLayersTest, CopyWithWrongShapeNamesLayerAndShapes) {
  Context ctx(Device::Cpu(), 11);
  Net trained(NetParam(kLeNetish), &ctx);
  caffe::NetParameter weights;
  trained.ToProto(&weights);
  std::string text = kLeNetish;
  text.replace(text.find("num_output: 3"), 13, "num_output: 5");
  Context ctx2(Device::Cpu(), 11);
  Net wider(NetParam(text), &ctx2);
  try {
    wider.CopyTrainedLayersFrom(weights);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'conv'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3 1 3 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("5 1 3 3"), std::string::npos) << msg;
  }
}

TEST(NetLayersTest, IncompatibleShapesNameLayersAndShapes) {
  Context ctx;
  try {
    Net net(NetParam(R"(
      layer { name: "in" type: "Input" top: "a" top: "b"
              input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 4 } } }
      layer { name: "add" type: "Eltwise" bottom: "a" bottom: "b" top: "c" }
    )"),
            &ctx);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'add'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 (6)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 4 (8)"), std::string::npos) << msg;
  }
}

TEST(NetLayersTest, DuplicateTopIsAnError) {
  Context ctx;
  EXPECT_THROW(Net(NetParam(R"(
      layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 } } }
      layer { name: "in2" type: "Input" top: "a" input_param { shape { dim: 2 } } }
    )"),
                   &ctx),
               Error);
}

}  // namespace
}  // namespace cortado
