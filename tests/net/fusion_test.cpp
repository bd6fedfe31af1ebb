// SPDX-License-Identifier: Apache-2.0
// BatchNorm + Scale (+ ReLU) fusion: a net that fuses the chain computes what the same net
// computes with the layers run one by one (NetOptions::fuse false): the same loss, tops, running
// statistics, input gradient and parameter gradients, in TRAIN and TEST, with and without the
// Scale's bias, with a leaky ReLU, with a frozen Scale; and on the GPU against the CPU. Chains
// that cannot be fused (not in place, a ReLU of negative slope, a Scale over other axes) are
// left as they are. Eltwise SUM + an in-place ReLU likewise: fused against separate layers. And
// the Split of such a sum's output, folded into the sum's Backward: against separate layers,
// with and without the training memory plan, on the CPU and on the GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>

#include "core/synced_memory.hpp"
#include "io/proto_io.hpp"
#include "layers/batch_norm_layer.hpp"
#include "math/math.hpp"
#include "net/net.hpp"
#include "support/gpu_check.hpp"

namespace cortado {
namespace {

struct ChainOptions {
  std::string phase = "TRAIN";
  std::string scale_param = "scale_param { bias_term: true }";
  std::string scale_spec;  // param { ... } entries of the Scale layer
  std::string relu = "layer { name: \"relu\" type: \"ReLU\" bottom: \"c\" top: \"c\" }";
  int height = 4;
  int width = 5;
  bool force_backward = true;
  std::string more;  // layers appended to the net
};

// Input -> Convolution -> BatchNorm -> Scale -> ReLU (all in place on "c") -> InnerProduct ->
// EuclideanLoss, with force_backward (unless unset) so the input gets a gradient too.
caffe::NetParameter ChainNet(const ChainOptions& o) {
  const std::string text = fmt::format(R"(
    name: "chain" force_backward: {}
    state {{ phase: {} }}
    layer {{ name: "in" type: "Input" top: "x" top: "target"
            input_param {{ shape {{ dim: 3 dim: 2 dim: {} dim: {} }} shape {{ dim: 3 dim: 2 }} }} }}
    layer {{ name: "conv" type: "Convolution" bottom: "x" top: "c"
            convolution_param {{ num_output: 4 kernel_size: 3 pad: 1
                                weight_filler {{ type: "gaussian" std: 0.5 }}
                                bias_filler {{ type: "gaussian" std: 0.5 }} }} }}
    layer {{ name: "bn" type: "BatchNorm" bottom: "c" top: "c" }}
    layer {{ name: "scale" type: "Scale" bottom: "c" top: "c" {} {} }}
    {}
    layer {{ name: "ip" type: "InnerProduct" bottom: "c" top: "out"
            inner_product_param {{ num_output: 2 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
    layer {{ name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "target" top: "loss" }}
    {}
  )",
                                       o.force_backward, o.phase, o.height, o.width, o.scale_spec,
                                       o.scale_param, o.relu, o.more);
  caffe::NetParameter param;
  io::ReadProtoFromTextString(text, "<chain>", &param);
  return param;
}

std::unique_ptr<Net> Build(const caffe::NetParameter& param, Context* ctx, bool fuse) {
  NetOptions options;
  options.fuse = fuse;
  return std::make_unique<Net>(param, ctx, options);
}

// Standard normal values in the net's inputs "x" and "target", drawn from `rng`.
void RandomizeInputs(Net* net, Rng& rng) {
  for (const char* name : {"x", "target"}) {
    Tensor* t = net->blob_by_name(name);
    math::RngGaussian(t->count(), 0.0f, 1.0f, rng, t->mutable_cpu_data());
  }
}

// Random, non-trivial values in the inputs and in the Scale's parameters (so a wrong scale or
// bias path shows), and the stored statistics of a trained net (for TEST).
void Prepare(Net* net) {
  Rng rng(4242);
  RandomizeInputs(net, rng);
  for (auto& blob : net->layer_by_name("scale")->blobs()) {
    math::RngUniform(blob->count(), 0.5f, 1.5f, rng, blob->mutable_cpu_data());
  }
  auto& stats = net->layer_by_name("bn")->blobs();
  math::RngUniform(stats[0]->count(), -0.5f, 0.5f, rng, stats[0]->mutable_cpu_data());
  math::RngUniform(stats[1]->count(), 0.5f, 2.0f, rng, stats[1]->mutable_cpu_data());
  stats[2]->mutable_cpu_data()[0] = 1.0f;
}

void ExpectClose(const Tensor& expected, const Tensor& actual, bool diff, float tolerance,
                 const std::string& what) {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  const float* e = diff ? expected.cpu_diff() : expected.cpu_data();
  const float* a = diff ? actual.cpu_diff() : actual.cpu_data();
  testing::detail::ExpectClose(e, a, expected.count(), tolerance, what);
}

// The running statistics blobs of layer "bn" in both nets.
void ExpectSameStatistics(const Net& expected, const Net& actual, float tolerance,
                          const std::string& at) {
  auto& expected_stats = expected.layer_by_name("bn")->blobs();
  auto& stats = actual.layer_by_name("bn")->blobs();
  for (size_t k = 0; k < stats.size(); ++k) {
    ExpectClose(*expected_stats[k], *stats[k], false, tolerance,
                fmt::format("BatchNorm statistics blob {}{}", k, at));
  }
}

// Runs ForwardBackward on both nets from the same weights and inputs, twice (so the running
// statistics accumulate), and compares everything a user can observe.
void ExpectSameAsUnfused(const ChainOptions& o, Device fused_device = Device::Cpu(),
                         float tolerance = 2e-5f) {
  const caffe::NetParameter param = ChainNet(o);
  Context cpu(Device::Cpu(), 1701);
  Context dev(fused_device, 1701);
  auto reference = Build(param, &cpu, false);
  auto fused = Build(param, &dev, true);
  EXPECT_EQ(reference->layer_by_name("scale")->fused_into(), nullptr);
  Prepare(reference.get());
  caffe::NetParameter weights;
  reference->ToProto(&weights);
  fused->CopyTrainedLayersFrom(weights);
  Prepare(fused.get());
  for (int iteration = 0; iteration < 2; ++iteration) {
    const std::string at = fmt::format(" (iteration {})", iteration);
    const float expected_loss = reference->ForwardBackward();
    const float loss = fused->ForwardBackward();
    EXPECT_NEAR(loss, expected_loss, tolerance * std::max(1.0f, std::fabs(expected_loss))) << at;
    ExpectClose(*reference->blob_by_name("c"), *fused->blob_by_name("c"), false, tolerance,
                "top of the chain" + at);
    ExpectClose(*reference->blob_by_name("out"), *fused->blob_by_name("out"), false, tolerance,
                "net output" + at);
    ExpectClose(*reference->blob_by_name("x"), *fused->blob_by_name("x"), true, tolerance,
                "input gradient" + at);
    // Where the chain's top is a blob of its own, its input keeps the gradient
    // (NetOptions::keep_batch_norm_inputs).
    const char* input = fused->has_blob("c (BatchNorm input)") ? "c (BatchNorm input)" : "c";
    ExpectClose(*reference->blob_by_name("c"), *fused->blob_by_name(input), true, tolerance,
                "gradient at the chain's input" + at);
    for (size_t k = 0; k < reference->learnable_params().size(); ++k) {
      ExpectClose(*reference->learnable_params()[k], *fused->learnable_params()[k], true, tolerance,
                  "diff of " + reference->param_display_names()[k] + at);
    }
    ExpectSameStatistics(*reference, *fused, tolerance, at);
  }
}

// A leaky ReLU, no bias, 3 x 3 planes (the kernels' one-value-at-a-time paths).
ChainOptions LeakyOddChain() {
  ChainOptions o;
  o.scale_param = "";
  o.relu = R"(layer { name: "relu" type: "ReLU" bottom: "c" top: "c"
                      relu_param { negative_slope: 0.1 } })";
  o.height = 3;
  o.width = 3;
  return o;
}

bool Fused(const ChainOptions& o, const char* layer) {
  Context ctx(Device::Cpu(), 1701);
  auto net = Build(ChainNet(o), &ctx, true);
  return net->layer_by_name(layer)->fused_into() == net->layer_by_name("bn");
}

TEST(BatchNormFusionTest, FusesScaleAndReluInPlace) {
  ChainOptions o;
  EXPECT_TRUE(Fused(o, "scale"));
  EXPECT_TRUE(Fused(o, "relu"));
  Context ctx(Device::Cpu(), 1701);
  auto net = Build(ChainNet(o), &ctx, false);
  EXPECT_EQ(net->layer_by_name("scale")->fused_into(), nullptr)
      << "NetOptions::fuse = false is ignored";
}

TEST(BatchNormFusionTest, TrainMatchesSeparateLayers) { ExpectSameAsUnfused({}); }

TEST(BatchNormFusionTest, TestPhaseMatchesSeparateLayers) {
  ChainOptions o;
  o.phase = "TEST";  // stored statistics
  ExpectSameAsUnfused(o);
}

TEST(BatchNormFusionTest, WithoutBiasMatches) {
  ChainOptions o;
  o.scale_param = "";
  ExpectSameAsUnfused(o);
}

TEST(BatchNormFusionTest, LeakyReluMatches) {
  ChainOptions o;
  o.relu = R"(layer { name: "relu" type: "ReLU" bottom: "c" top: "c"
                      relu_param { negative_slope: 0.1 } })";
  EXPECT_TRUE(Fused(o, "relu"));
  ExpectSameAsUnfused(o);
}

TEST(BatchNormFusionTest, WithoutReluMatches) {
  ChainOptions o;
  o.relu = "";
  EXPECT_TRUE(Fused(o, "scale"));
  ExpectSameAsUnfused(o);
}

TEST(BatchNormFusionTest, FrozenScaleGetsNoGradient) {
  ChainOptions o;
  o.scale_spec = "param { lr_mult: 0 } param { lr_mult: 0 }";
  o.force_backward = false;  // which would give every parameter a gradient, as in Caffe
  ExpectSameAsUnfused(o);
  Context ctx(Device::Cpu(), 1701);
  auto net = Build(ChainNet(o), &ctx, true);
  Prepare(net.get());
  net->ForwardBackward();
  for (auto& blob : net->layer_by_name("scale")->blobs()) {
    EXPECT_EQ(math::Asum(blob->count(), blob->cpu_diff()), 0.0f);
  }
}

TEST(BatchNormFusionTest, OddSpatialSizeMatches) {
  ChainOptions o;
  o.height = 3;
  o.width = 3;
  ExpectSameAsUnfused(o);
}

TEST(BatchNormFusionTest, LeavesOtherChainsAlone) {
  ChainOptions negative;
  negative.relu = R"(layer { name: "relu" type: "ReLU" bottom: "c" top: "c"
                             relu_param { negative_slope: -0.5 } })";
  EXPECT_TRUE(Fused(negative, "scale"));
  EXPECT_FALSE(Fused(negative, "relu")) << "a negative slope loses the sign in place";
  ExpectSameAsUnfused(negative);

  ChainOptions per_position;  // a Scale over C x H x W, not per channel
  per_position.scale_param = "scale_param { num_axes: 3 bias_term: true }";
  EXPECT_FALSE(Fused(per_position, "scale"));
  EXPECT_FALSE(Fused(per_position, "relu"));

  // A BatchNorm whose top is a new blob: its output is observable, so nothing is fused.
  caffe::NetParameter param = ChainNet({});
  for (auto& layer : *param.mutable_layer()) {
    if (layer.name() == "bn") layer.set_top(0, "n");
    if (layer.name() == "scale" || layer.name() == "relu") {
      layer.set_bottom(0, "n");
      layer.set_top(0, "n");
    }
    if (layer.name() == "ip") layer.set_bottom(0, "n");
  }
  Context ctx(Device::Cpu(), 1701);
  Net net(param, &ctx);
  EXPECT_EQ(net.layer_by_name("scale")->fused_into(), nullptr);
}

TEST(BatchNormFusionTest, ForwardOnlyNetKeepsNoNormalisedCopy) {
  ChainOptions o;
  o.phase = "TEST";
  const caffe::NetParameter param = ChainNet(o);
  Context ctx(Device::Cpu(), 1701);
  auto reference = Build(param, &ctx, false);
  auto fused = Build(param, &ctx, true);
  fused->SetForwardOnly();
  Prepare(reference.get());
  Prepare(fused.get());
  caffe::NetParameter weights;
  reference->ToProto(&weights);
  fused->CopyTrainedLayersFrom(weights);
  const size_t before_reference = HostAllocatedBytes();
  reference->Forward();
  const size_t reference_bytes = HostAllocatedBytes() - before_reference;
  const size_t before_fused = HostAllocatedBytes();
  fused->Forward();
  const size_t fused_bytes = HostAllocatedBytes() - before_fused;
  // The separate layers keep BatchNorm's x_norm and the Scale's input: two copies of "c".
  const size_t copy = sizeof(float) * fused->blob_by_name("c")->count();
  EXPECT_EQ(reference_bytes - fused_bytes, 2 * copy);
  ExpectClose(*reference->blob_by_name("out"), *fused->blob_by_name("out"), false, 2e-5f,
              "net output");
  fused->Backward();  // does nothing now
  EXPECT_EQ(math::Asum(fused->blob_by_name("x")->count(), fused->blob_by_name("x")->cpu_diff()),
            0.0f);
}

TEST(BatchNormFusionGpuTest, TrainMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  ExpectSameAsUnfused({}, Device::Cuda(0), 1e-4f);
}

TEST(BatchNormFusionGpuTest, TestPhaseMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  ChainOptions o;
  o.phase = "TEST";
  ExpectSameAsUnfused(o, Device::Cuda(0), 1e-4f);
}

TEST(BatchNormFusionGpuTest, LeakyWithoutBiasOddSizeMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  ExpectSameAsUnfused(LeakyOddChain(), Device::Cuda(0), 1e-4f);
}

TEST(BatchNormFusionGpuTest, FrozenScaleMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  ChainOptions o;
  o.scale_spec = "param { lr_mult: 0 } param { lr_mult: 0 }";
  o.force_backward = false;
  ExpectSameAsUnfused(o, Device::Cuda(0), 1e-4f);
}

// Gives `other` the weights of `reference`, and both the same random inputs.
void StartAlike(Net* reference, Net* other) {
  caffe::NetParameter weights;
  reference->ToProto(&weights);
  other->CopyTrainedLayersFrom(weights);
  for (Net* net : {reference, other}) {
    Rng rng(99);
    RandomizeInputs(net, rng);
  }
}

// One ForwardBackward of each: the same loss, input gradient and parameter gradients.
void ExpectSameStep(Net* reference, Net* other, float tolerance, const std::string& at) {
  const float expected_loss = reference->ForwardBackward();
  const float loss = other->ForwardBackward();
  EXPECT_NEAR(loss, expected_loss, tolerance * std::max(1.0f, std::fabs(expected_loss))) << at;
  ExpectClose(*reference->blob_by_name("x"), *other->blob_by_name("x"), true, tolerance,
              "input gradient" + at);
  for (size_t k = 0; k < reference->learnable_params().size(); ++k) {
    ExpectClose(*reference->learnable_params()[k], *other->learnable_params()[k], true, tolerance,
                "diff of " + reference->param_display_names()[k] + at);
  }
}

// ---- Eltwise SUM + ReLU ----------------------------------------------------------------------

struct SumOptions {
  int bottoms = 2;
  std::string eltwise_param;   // e.g. "eltwise_param { coeff: 0.5 coeff: -1 }"
  std::string relu_param;      // e.g. "relu_param { negative_slope: 0.1 }"
  std::string relu_top = "s";  // "s": in place
};

// Input -> `bottoms` convolutions -> Eltwise SUM -> ReLU -> InnerProduct -> EuclideanLoss: a
// residual join, as in ResNet.
caffe::NetParameter SumNet(const SumOptions& o) {
  std::string layers;
  std::string sum_bottoms;
  for (int b = 0; b < o.bottoms; ++b) {
    layers += fmt::format(R"(
      layer {{ name: "conv{0}" type: "Convolution" bottom: "x" top: "c{0}"
              convolution_param {{ num_output: 4 kernel_size: {1} pad: {2}
                                  weight_filler {{ type: "gaussian" std: 0.5 }}
                                  bias_filler {{ type: "gaussian" std: 0.5 }} }} }})",
                          b, b % 2 == 0 ? 3 : 1, b % 2 == 0 ? 1 : 0);
    sum_bottoms += fmt::format(" bottom: \"c{}\"", b);
  }
  const std::string text =
      fmt::format(R"(
    name: "sum" force_backward: true
    layer {{ name: "in" type: "Input" top: "x" top: "target"
            input_param {{ shape {{ dim: 3 dim: 2 dim: 4 dim: 5 }} shape {{ dim: 3 dim: 2 }} }} }}
    {0}
    layer {{ name: "sum" type: "Eltwise" {1} top: "s" {2} }}
    layer {{ name: "relu" type: "ReLU" bottom: "s" top: "{3}" {4} }}
    layer {{ name: "ip" type: "InnerProduct" bottom: "{3}" top: "out"
            inner_product_param {{ num_output: 2 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
    layer {{ name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "target" top: "loss" }}
  )",
                  layers, sum_bottoms, o.eltwise_param, o.relu_top, o.relu_param);
  caffe::NetParameter param;
  io::ReadProtoFromTextString(text, "<sum>", &param);
  return param;
}

bool SumFused(const SumOptions& o) {
  Context ctx(Device::Cpu(), 1701);
  auto net = Build(SumNet(o), &ctx, true);
  return net->layer_by_name("relu")->fused_into() == net->layer_by_name("sum");
}

// The fused net (on `device`) against the same net with separate layers on the CPU, over two
// iterations: loss, the ReLU's output, the input gradient and every parameter gradient.
void ExpectSumSameAsUnfused(const SumOptions& o, Device device = Device::Cpu(),
                            float tolerance = 2e-5f) {
  const caffe::NetParameter param = SumNet(o);
  Context cpu(Device::Cpu(), 1701);
  Context dev(device, 1701);
  auto reference = Build(param, &cpu, false);
  auto fused = Build(param, &dev, true);
  ASSERT_EQ(reference->layer_by_name("relu")->fused_into(), nullptr);
  StartAlike(reference.get(), fused.get());
  for (int iteration = 0; iteration < 2; ++iteration) {
    const std::string at = fmt::format(" (iteration {})", iteration);
    ExpectSameStep(reference.get(), fused.get(), tolerance, at);
    ExpectClose(*reference->blob_by_name(o.relu_top), *fused->blob_by_name(o.relu_top), false,
                tolerance, "ReLU output" + at);
  }
}

TEST(EltwiseReluFusionTest, FusesAnInPlaceReluAfterASum) {
  EXPECT_TRUE(SumFused({}));
  SumOptions leaky;
  leaky.relu_param = "relu_param { negative_slope: 0.1 }";
  EXPECT_TRUE(SumFused(leaky));
}

TEST(EltwiseReluFusionTest, LeavesOtherPairsAlone) {
  SumOptions negative;
  negative.relu_param = "relu_param { negative_slope: -0.5 }";
  EXPECT_FALSE(SumFused(negative)) << "a negative slope loses the sign in place";
  SumOptions product;
  product.eltwise_param = "eltwise_param { operation: PROD }";
  EXPECT_FALSE(SumFused(product));
  SumOptions new_top;
  new_top.relu_top = "r";
  EXPECT_FALSE(SumFused(new_top)) << "the sum's own output is observable";
}

TEST(EltwiseReluFusionTest, MatchesSeparateLayers) {
  ExpectSumSameAsUnfused({});
  SumOptions coeffs;
  coeffs.eltwise_param = "eltwise_param { coeff: 0.5 coeff: -1.5 }";
  ExpectSumSameAsUnfused(coeffs);
  SumOptions leaky_three;
  leaky_three.bottoms = 3;
  leaky_three.relu_param = "relu_param { negative_slope: 0.1 }";
  ExpectSumSameAsUnfused(leaky_three);
}

TEST(EltwiseReluFusionGpuTest, MatchesSeparateLayersOnTheCpu) {
  CORTADO_REQUIRE_GPU();
  ExpectSumSameAsUnfused({}, Device::Cuda(0), 1e-4f);
  SumOptions coeffs;
  coeffs.eltwise_param = "eltwise_param { coeff: 0.5 coeff: -1.5 }";
  ExpectSumSameAsUnfused(coeffs, Device::Cuda(0), 1e-4f);
  // Three bottoms: one pass for the first two, one for the third, the ReLU after the sum.
  SumOptions leaky_three;
  leaky_three.bottoms = 3;
  leaky_three.relu_param = "relu_param { negative_slope: 0.1 }";
  ExpectSumSameAsUnfused(leaky_three, Device::Cuda(0), 1e-4f);
  // The unfused GPU path too (the sum without a ReLU to fuse).
  SumOptions apart;
  apart.relu_top = "r";
  ExpectSumSameAsUnfused(apart, Device::Cuda(0), 1e-4f);
}

// ---- a Split folded into the sum that computes its bottom -------------------------------------

struct FoldOptions {
  std::string eltwise_param;                                // of both sums
  std::string relu = "relu_param { negative_slope: 0.1 }";  // "": no ReLU after the first sum
  bool third_consumer = false;  // the first sum's output also feeds a third layer
  bool plan = false;            // the fused net runs with the training memory plan
};

// Input -> conv0 -> sum0 (x + conv0) -> ReLU in place -> conv1 -> sum1 (s0 + conv1) -> ReLU ->
// InnerProduct -> EuclideanLoss: two residual blocks, the first sum's output split between the
// second block's convolution and its sum, as in ResNet.
// A 3 x 3 convolution (padded to keep the size) with Gaussian weights and biases of `std`.
std::string ConvLayer(const std::string& name, const std::string& bottom, int num_output,
                      float std) {
  return fmt::format(R"(
    layer {{ name: "{0}" type: "Convolution" bottom: "{1}" top: "{0}"
            convolution_param {{ num_output: {2} kernel_size: 3 pad: 1
                                weight_filler {{ type: "gaussian" std: {3} }}
                                bias_filler {{ type: "gaussian" std: {3} }} }} }})",
                     name, bottom, num_output, std);
}

caffe::NetParameter FoldNet(const FoldOptions& o) {
  auto conv = [](const std::string& name, const std::string& bottom) {
    return ConvLayer(name, bottom, 2, 0.5f);
  };
  std::string text = R"(
    name: "fold" force_backward: true
    layer { name: "in" type: "Input" top: "x" top: "target"
            input_param { shape { dim: 3 dim: 2 dim: 4 dim: 5 } shape { dim: 3 dim: 2 } } })";
  text += conv("conv0", "x");
  text += fmt::format(R"(
    layer {{ name: "sum0" type: "Eltwise" bottom: "x" bottom: "conv0" top: "s0" {} }})",
                      o.eltwise_param);
  if (!o.relu.empty()) {
    text += fmt::format(R"(
      layer {{ name: "relu0" type: "ReLU" bottom: "s0" top: "s0" {} }})",
                        o.relu);
  }
  text += conv("conv1", "s0");
  text += fmt::format(R"(
    layer {{ name: "sum1" type: "Eltwise" bottom: "s0" bottom: "conv1" top: "s1" {} }}
    layer {{ name: "relu1" type: "ReLU" bottom: "s1" top: "s1" }}
    layer {{ name: "ip" type: "InnerProduct" bottom: "s1" top: "out"
            inner_product_param {{ num_output: 2 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
    layer {{ name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "target" top: "loss" }})",
                      o.eltwise_param);
  if (o.third_consumer) {
    text += R"(
      layer { name: "ip2" type: "InnerProduct" bottom: "s0" top: "out2"
              inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.3 } } }
      layer { name: "loss2" type: "EuclideanLoss" bottom: "out2" bottom: "target" top: "loss2" })";
  }
  caffe::NetParameter param;
  io::ReadProtoFromTextString(text, "<fold>", &param);
  return param;
}

// The Split layers of `net` folded into layer `host`.
int SplitsFoldedInto(const Net& net, const std::string& host) {
  int folded = 0;
  for (const auto& layer : net.layers()) {
    if (std::string(layer->type()) == "Split" && layer->fused_into() == net.layer_by_name(host)) {
      ++folded;
    }
  }
  return folded;
}

// The folded net (on `device`, planned if asked) against a reference over three iterations:
// loss, the input gradient and every parameter gradient. The reference is the same net with
// separate layers on the CPU, or (`reference_folds_nothing`) the same net fused on `device` in
// the same context, only with its Splits left alone (NetOptions::fold_splits false).
void ExpectFoldSameAsReference(const FoldOptions& o, Device device, float tolerance,
                               bool reference_folds_nothing) {
  const caffe::NetParameter param = FoldNet(o);
  Context cpu(Device::Cpu(), 1701);
  Context dev(device, 1701);
  std::unique_ptr<Net> reference;
  if (reference_folds_nothing) {
    NetOptions options;
    options.fold_splits = false;
    reference = std::make_unique<Net>(param, &dev, options);
    if (!o.relu.empty()) {
      ASSERT_NE(reference->layer_by_name("relu0")->fused_into(), nullptr);
    }
  } else {
    reference = Build(param, &cpu, false);
  }
  auto folded = Build(param, &dev, true);
  ASSERT_EQ(SplitsFoldedInto(*reference, "sum0"), 0);
  ASSERT_EQ(SplitsFoldedInto(*folded, "sum0"), o.third_consumer ? 0 : 1);
  if (o.plan) {
    ASSERT_GT(folded->ShareTrainingBuffers(), 0u);
    if (reference_folds_nothing) {
      ASSERT_GT(reference->ShareTrainingBuffers(), 0u);
    }
  }
  StartAlike(reference.get(), folded.get());
  for (int iteration = 0; iteration < 3; ++iteration) {
    ExpectSameStep(reference.get(), folded.get(), tolerance,
                   fmt::format(" (iteration {})", iteration));
    // Move the weights so the next iteration sees other values.
    for (Net* net : {reference.get(), folded.get()}) {
      for (Tensor* p : net->learnable_params()) {
        math::Axpy(p->count(), -0.05f, p->cpu_diff(), p->mutable_cpu_data());
      }
    }
  }
}

void ExpectFoldSameAsSeparate(const FoldOptions& o, Device device = Device::Cpu(),
                              float tolerance = 2e-5f) {
  ExpectFoldSameAsReference(o, device, tolerance, false);
}

TEST(SplitFoldTest, FoldsTheSplitOfASumsOutputIntoTheSum) {
  Context ctx(Device::Cpu(), 1701);
  auto net = Build(FoldNet({}), &ctx, true);
  EXPECT_EQ(SplitsFoldedInto(*net, "sum0"), 1);
  EXPECT_EQ(net->layer_by_name("relu0")->fused_into(), net->layer_by_name("sum0"));
  // x's Split is an Input's, s1 has one consumer: nothing else to fold.
  EXPECT_EQ(SplitsFoldedInto(*net, "sum1"), 0);
  int splits = 0;
  for (const auto& layer : net->layers()) splits += std::string(layer->type()) == "Split";
  EXPECT_EQ(splits, 2);
  // A sum without a ReLU after it folds its Split too.
  FoldOptions bare;
  bare.relu.clear();
  auto bare_net = Build(FoldNet(bare), &ctx, true);
  EXPECT_EQ(SplitsFoldedInto(*bare_net, "sum0"), 1);
  // Not folded: without fusion, a Split of three tops, a product.
  EXPECT_EQ(SplitsFoldedInto(*Build(FoldNet({}), &ctx, false), "sum0"), 0);
  FoldOptions three;
  three.third_consumer = true;
  EXPECT_EQ(SplitsFoldedInto(*Build(FoldNet(three), &ctx, true), "sum0"), 0);
  FoldOptions product;
  product.eltwise_param = "eltwise_param { operation: PROD }";
  EXPECT_EQ(SplitsFoldedInto(*Build(FoldNet(product), &ctx, true), "sum0"), 0);
  // Nor a sum of three: its GPU backward is two passes over the top's gradient.
  caffe::NetParameter three_bottoms = FoldNet({});
  for (auto& layer : *three_bottoms.mutable_layer()) {
    if (layer.name() == "sum0") layer.add_bottom("x");
  }
  EXPECT_EQ(SplitsFoldedInto(*Build(three_bottoms, &ctx, true), "sum0"), 0);
}

TEST(SplitFoldTest, MatchesSeparateLayers) {
  ExpectFoldSameAsSeparate({});
  FoldOptions bare;
  bare.relu.clear();
  ExpectFoldSameAsSeparate(bare);
  FoldOptions coeffs;
  coeffs.eltwise_param = "eltwise_param { coeff: 0.5 coeff: -1.5 }";
  ExpectFoldSameAsSeparate(coeffs);
  FoldOptions three;
  three.third_consumer = true;
  ExpectFoldSameAsSeparate(three);
}

// Folded or not, the sum's Backward sees the same sum of the same two gradients: the same bits.
TEST(SplitFoldTest, SameBitsAsTheSplit) {
  ExpectFoldSameAsReference({}, Device::Cpu(), 0.0f, true);
  FoldOptions bare;
  bare.relu.clear();
  bare.eltwise_param = "eltwise_param { coeff: 0.5 coeff: -1.5 }";
  bare.plan = true;
  ExpectFoldSameAsReference(bare, Device::Cpu(), 0.0f, true);
}

// The memory plan must keep the Split's top diffs until the sum reads them, below the Split; it
// lets the sum's bottoms' gradients take their buffers (the sum reads each element before it
// writes it), so the fold saves a gradient buffer rather than adding one.
TEST(SplitFoldTest, PlanLetsTheSumWriteIntoTheSplitsTopDiffs) {
  Context ctx(Device::Cpu(), 1701);
  auto net = Build(FoldNet({}), &ctx, true);
  ASSERT_GT(net->ShareTrainingBuffers(), 0u);
  const auto& names = net->layer_names();
  const int sum = static_cast<int>(std::find(names.begin(), names.end(), "sum0") - names.begin());
  std::set<const SyncedMemory*> top_diffs;
  for (size_t i = 0; i < net->layers().size(); ++i) {
    if (net->layers()[i]->fused_into() != net->layer_by_name("sum0") ||
        std::string(net->layers()[i]->type()) != "Split") {
      continue;
    }
    for (const Tensor* top : net->top_vecs()[i]) top_diffs.insert(top->diff().get());
  }
  ASSERT_EQ(top_diffs.size(), 2u);
  int reused = 0;
  for (const Tensor* bottom : net->bottom_vecs()[sum]) {
    reused += top_diffs.count(bottom->diff().get());
  }
  EXPECT_GT(reused, 0);
}

TEST(SplitFoldTest, PlannedMatchesSeparateLayers) {
  FoldOptions planned;
  planned.plan = true;
  ExpectFoldSameAsSeparate(planned);
  planned.relu.clear();
  ExpectFoldSameAsSeparate(planned);
}

TEST(SplitFoldGpuTest, MatchesSeparateLayersOnTheCpu) {
  CORTADO_REQUIRE_GPU();
  ExpectFoldSameAsSeparate({}, Device::Cuda(0), 1e-4f);
  FoldOptions coeffs;
  coeffs.eltwise_param = "eltwise_param { coeff: 0.5 coeff: -1.5 }";
  coeffs.plan = true;
  ExpectFoldSameAsSeparate(coeffs, Device::Cuda(0), 1e-4f);
  // The same sums as the Split's kernel; the convolutions' plans are the context's, one per shape.
  ExpectFoldSameAsReference(coeffs, Device::Cuda(0), 1e-6f, true);
}

// ---- BatchNorm keeping its input (NetOptions::keep_batch_norm_inputs) ------------------------

std::unique_ptr<Net> BuildKeeping(const caffe::NetParameter& param, Context* ctx,
                                  NetOptions::BatchNormInputs how) {
  NetOptions options;
  options.keep_batch_norm_inputs = how;
  return std::make_unique<Net>(param, ctx, options);
}

bool KeepsInput(const Net& net) {
  return static_cast<const BatchNormLayer*>(net.layer_by_name("bn"))->keeps_input();
}

TEST(BatchNormInputTest, TheChainGetsATopOfItsOwn) {
  using BatchNormInputs = NetOptions::BatchNormInputs;
  Context ctx(Device::Cpu(), 1701);
  auto net = BuildKeeping(ChainNet({}), &ctx, BatchNormInputs::kAlways);
  ASSERT_TRUE(KeepsInput(*net));
  ASSERT_TRUE(net->has_blob("c (BatchNorm input)"));
  const Tensor* input = net->blob_by_name("c (BatchNorm input)");
  const Tensor* top = net->blob_by_name("c");
  EXPECT_NE(input, top);
  EXPECT_EQ(input->shape(), top->shape());
  auto index = [&](const char* name) {
    for (size_t i = 0; i < net->layers().size(); ++i) {
      if (net->layer_names()[i] == name) return i;
    }
    return net->layers().size();
  };
  // The convolution writes the input; the BatchNorm reads it and writes the top, which the fused
  // Scale and ReLU (in place) and the inner product after them take.
  EXPECT_EQ(net->top_vecs()[index("conv")][0], input);
  EXPECT_EQ(net->bottom_vecs()[index("bn")][0], input);
  EXPECT_EQ(net->top_vecs()[index("bn")][0], top);
  for (const char* name : {"scale", "relu"}) {
    EXPECT_EQ(net->bottom_vecs()[index(name)][0], top) << name;
    EXPECT_EQ(net->top_vecs()[index(name)][0], top) << name;
  }
  EXPECT_EQ(net->bottom_vecs()[index("ip")][0], top);
  EXPECT_TRUE(net->layers()[index("bn")]->BackwardReadsBottomData(0));

  // Left in place: by default, for GPUs only on the CPU, without fusion, and in a net that never
  // runs backward.
  EXPECT_EQ(NetOptions{}.keep_batch_norm_inputs, BatchNormInputs::kNever);
  for (auto& other : {BuildKeeping(ChainNet({}), &ctx, BatchNormInputs::kOnGpus),
                      BuildKeeping(ChainNet({}), &ctx, BatchNormInputs::kNever)}) {
    EXPECT_FALSE(KeepsInput(*other));
    EXPECT_FALSE(other->has_blob("c (BatchNorm input)"));
  }
  NetOptions unfused;
  unfused.fuse = false;
  unfused.keep_batch_norm_inputs = BatchNormInputs::kAlways;
  EXPECT_FALSE(Net(ChainNet({}), &ctx, unfused).has_blob("c (BatchNorm input)"));
  ChainOptions test;
  test.phase = "TEST";
  test.force_backward = false;
  auto test_net = BuildKeeping(ChainNet(test), &ctx, BatchNormInputs::kAlways);
  EXPECT_FALSE(KeepsInput(*test_net));
  EXPECT_FALSE(test_net->has_blob("c (BatchNorm input)"));
}

// The chain keeping its input (`how`) against the same net keeping BatchNorm's normalised copy,
// planned (the top recomputed in Backward) or not, in one context (on a GPU the convolutions'
// plans are the context's, so both nets run the same kernels but BatchNorm's), over two
// iterations: loss, gradients, the chain's output and the running statistics.
void ExpectKeepingFollowsTheCopy(const ChainOptions& o, Device device,
                                 NetOptions::BatchNormInputs how, float tolerance) {
  for (bool plan : {false, true}) {
    SCOPED_TRACE(plan ? "planned" : "unplanned");
    const caffe::NetParameter param = ChainNet(o);
    Context ctx(device, 1701);
    ctx.MakeCurrent();
    auto copy = BuildKeeping(param, &ctx, NetOptions::BatchNormInputs::kNever);
    auto keeping = BuildKeeping(param, &ctx, how);
    ASSERT_FALSE(KeepsInput(*copy));
    ASSERT_TRUE(KeepsInput(*keeping));
    Prepare(copy.get());
    caffe::NetParameter weights;
    copy->ToProto(&weights);
    keeping->CopyTrainedLayersFrom(weights);
    Prepare(keeping.get());
    if (plan) {
      ASSERT_GT(copy->ShareTrainingBuffers(), 0u);
      ASSERT_GT(keeping->ShareTrainingBuffers(), 0u);
    }
    for (int iteration = 0; iteration < 2; ++iteration) {
      const std::string at = fmt::format(" (iteration {})", iteration);
      ExpectSameStep(copy.get(), keeping.get(), tolerance, at);
      if (!plan) {
        ExpectClose(*copy->blob_by_name("c"), *keeping->blob_by_name("c"), false, tolerance,
                    "top of the chain" + at);
        ExpectClose(*copy->blob_by_name("c"), *keeping->blob_by_name("c (BatchNorm input)"), true,
                    tolerance, "gradient at the chain's input" + at);
      }
      ExpectSameStatistics(*copy, *keeping, tolerance, at);
    }
  }
}

// A second consumer of the chain's output, through a Flatten: the net inserts a Split, whose tops
// (and the Flatten's top) share the output's data, and must follow it to the new top.
ChainOptions TwoConsumerChain() {
  ChainOptions o;
  o.more = R"(
    layer { name: "flat" type: "Flatten" bottom: "c" top: "flat" }
    layer { name: "ip2" type: "InnerProduct" bottom: "flat" top: "out2"
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.3 } } }
    layer { name: "loss2" type: "EuclideanLoss" bottom: "out2" bottom: "target" top: "loss2" })";
  return o;
}

// The CPU passes keep their copy and compute out of place as in place: the same bits.
TEST(BatchNormInputTest, SameBitsAsInPlace) {
  ChainOptions frozen;
  frozen.scale_spec = "param { lr_mult: 0 } param { lr_mult: 0 }";
  frozen.force_backward = false;
  for (const ChainOptions& o : {ChainOptions{}, LeakyOddChain(), frozen, TwoConsumerChain()}) {
    ExpectKeepingFollowsTheCopy(o, Device::Cpu(), NetOptions::BatchNormInputs::kAlways, 0.0f);
  }
}

// On a GPU (kOnGpus): the passes normalise the kept input again, rounded as the copy was: the
// same values up to float32's last bit.
TEST(BatchNormInputGpuTest, FollowsTheNormalisedCopy) {
  CORTADO_REQUIRE_GPU();
  for (const ChainOptions& o : {ChainOptions{}, LeakyOddChain(), TwoConsumerChain()}) {
    ExpectKeepingFollowsTheCopy(o, Device::Cuda(0), NetOptions::BatchNormInputs::kOnGpus, 1e-6f);
  }
}

// ---- a residual sum folded into the BatchNorm chain before it ---------------------------------

struct SumFoldOptions {
  bool chain_first = false;   // the sums' bottoms: (chain, residual), not the reverse
  std::string sum_relu = "";  // relu_param of the ReLU after each sum
  bool no_sum_relu = false;   // no ReLU after the sums
  std::string scale_param = "scale_param { bias_term: true }";  // of the blocks' last Scales
  std::string eltwise_param;                                    // of both sums
  std::string phase = "TRAIN";
  bool plan = false;  // both nets run with the training memory plan
  std::string more;   // layers appended to the net
  // Block 0's shortcut is a convolution 0p -> BatchNorm + Scale (bn0p, sc0p), as in ResNet's
  // first block of each stage (res2a_branch1), instead of the block's input.
  bool projection = false;
  // Both nets' BatchNorms keep their inputs (NetOptions::keep_batch_norm_inputs).
  NetOptions::BatchNormInputs keep = NetOptions::BatchNormInputs::kNever;
};

// Input x (4 channels) -> two residual blocks, each conv {n}a -> BatchNorm + Scale + ReLU ->
// conv {n}b -> BatchNorm + Scale (layers bn{n}b, sc{n}b) -> sum{n} of the block's input and the
// chain -> ReLU (in place on s{n}) -> InnerProduct -> EuclideanLoss, as ResNet's blocks; s0 is
// split between block 1's convolution and its sum.
caffe::NetParameter SumFoldNet(const SumFoldOptions& o) {
  std::string text = fmt::format(R"(
    name: "sum_fold" force_backward: true
    state {{ phase: {} }}
    layer {{ name: "in" type: "Input" top: "x" top: "target"
            input_param {{ shape {{ dim: 3 dim: 4 dim: 4 dim: 5 }} shape {{ dim: 3 dim: 2 }} }} }})",
                                 o.phase);
  std::string from = "x";
  for (int n = 0; n < 2; ++n) {
    auto conv = [](const std::string& name, const std::string& bottom) {
      return ConvLayer(name, bottom, 4, 0.4f);
    };
    const std::string a = fmt::format("{}a", n), b = fmt::format("{}b", n);
    // First, as ResNet's branch1 comes before its branch2a.
    std::string shortcut = from;
    if (n == 0 && o.projection) {
      shortcut = "0p";
      text += conv(shortcut, from);
      text += R"(
        layer { name: "bn0p" type: "BatchNorm" bottom: "0p" top: "0p" }
        layer { name: "sc0p" type: "Scale" bottom: "0p" top: "0p" scale_param { bias_term: true } })";
    }
    text += conv(a, from);
    text += fmt::format(R"(
      layer {{ name: "bn{0}" type: "BatchNorm" bottom: "{0}" top: "{0}" }}
      layer {{ name: "sc{0}" type: "Scale" bottom: "{0}" top: "{0}" scale_param {{ bias_term: true }} }}
      layer {{ name: "relu{0}" type: "ReLU" bottom: "{0}" top: "{0}" }})",
                        a);
    text += conv(b, a);
    text += fmt::format(R"(
      layer {{ name: "bn{0}" type: "BatchNorm" bottom: "{0}" top: "{0}" }}
      layer {{ name: "sc{0}" type: "Scale" bottom: "{0}" top: "{0}" {1} }})",
                        b, o.scale_param);
    const std::string sum = fmt::format("s{}", n);
    text += fmt::format(R"(
      layer {{ name: "sum{0}" type: "Eltwise" bottom: "{1}" bottom: "{2}" top: "{3}" {4} }})",
                        n, o.chain_first ? b : shortcut, o.chain_first ? shortcut : b, sum,
                        o.eltwise_param);
    if (!o.no_sum_relu) {
      text += fmt::format(R"(
        layer {{ name: "relu{0}" type: "ReLU" bottom: "{1}" top: "{1}" {2} }})",
                          n, sum, o.sum_relu);
    }
    from = sum;
  }
  text += fmt::format(R"(
    layer {{ name: "ip" type: "InnerProduct" bottom: "{}" top: "out"
            inner_product_param {{ num_output: 2 weight_filler {{ type: "gaussian" std: 0.3 }} }} }}
    layer {{ name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "target" top: "loss" }}
    {})",
                      from, o.more);
  caffe::NetParameter param;
  io::ReadProtoFromTextString(text, "<sum_fold>", &param);
  return param;
}

std::unique_ptr<Net> BuildFolding(
    const caffe::NetParameter& param, Context* ctx, bool fold, bool fuse = true,
    NetOptions::BatchNormInputs keep = NetOptions::BatchNormInputs::kNever) {
  NetOptions options;
  options.fuse = fuse;
  options.fold_sums_into_batch_norms =
      fold ? NetOptions::SumFolds::kAlways : NetOptions::SumFolds::kNever;
  options.keep_batch_norm_inputs = keep;
  return std::make_unique<Net>(param, ctx, options);
}

bool FoldsSum(const Net& net, const char* bn) {
  return static_cast<const BatchNormLayer*>(net.layer_by_name(bn))->folds_sum();
}

// By default a TRAIN net folds its sums and a TEST net keeps every blob (features).
TEST(SumFoldTest, ByDefaultTrainNetsFoldAndTestNetsDoNot) {
  Context ctx(Device::Cpu(), 1701);
  EXPECT_EQ(NetOptions{}.fold_sums_into_batch_norms, NetOptions::SumFolds::kTrainNets);
  Net train(SumFoldNet({}), &ctx);
  EXPECT_TRUE(FoldsSum(train, "bn0b") && FoldsSum(train, "bn1b"));
  EXPECT_FALSE(train.has_blob("0b"));
  SumFoldOptions test;
  test.phase = "TEST";
  Net test_net(SumFoldNet(test), &ctx);
  EXPECT_FALSE(FoldsSum(test_net, "bn0b") || FoldsSum(test_net, "bn1b"));
  EXPECT_TRUE(test_net.has_blob("0b") && test_net.has_blob("1b"));
  // kAlways folds both, kNever neither.
  EXPECT_TRUE(FoldsSum(*BuildFolding(SumFoldNet(test), &ctx, true), "bn0b"));
  EXPECT_FALSE(FoldsSum(*BuildFolding(SumFoldNet({}), &ctx, false), "bn0b"));
}

TEST(SumFoldTest, FoldsEachBlocksSumIntoItsLastBatchNorm) {
  Context ctx(Device::Cpu(), 1701);
  auto net = BuildFolding(SumFoldNet({}), &ctx, true);
  for (int n = 0; n < 2; ++n) {
    SCOPED_TRACE(n);
    const std::string bn = fmt::format("bn{}b", n);
    ASSERT_TRUE(FoldsSum(*net, bn.c_str()));
    EXPECT_FALSE(FoldsSum(*net, fmt::format("bn{}a", n).c_str()));
    const Layer* host = net->layer_by_name(bn);
    for (const std::string& layer :
         {fmt::format("sc{}b", n), fmt::format("sum{}", n), fmt::format("relu{}", n)}) {
      EXPECT_EQ(net->layer_by_name(layer)->fused_into(), host) << layer;
    }
    // The chain's blob holds its input alone, under a new name; its output is the sum's.
    EXPECT_FALSE(net->has_blob(fmt::format("{}b", n)));
    ASSERT_TRUE(net->has_blob(fmt::format("{}b (BatchNorm input)", n)));
    const auto& names = net->layer_names();
    const size_t i = std::find(names.begin(), names.end(), bn) - names.begin();
    const size_t k = std::find(names.begin(), names.end(), fmt::format("sum{}", n)) - names.begin();
    ASSERT_EQ(net->bottom_vecs()[i].size(), 2u);
    EXPECT_EQ(net->bottom_vecs()[i][0], net->blob_by_name(fmt::format("{}b (BatchNorm input)", n)));
    EXPECT_EQ(net->bottom_vecs()[i][1], net->bottom_vecs()[k][0]);  // the residual
    EXPECT_EQ(net->top_vecs()[i][0], net->blob_by_name(fmt::format("s{}", n)));
    EXPECT_TRUE(net->layers()[i]->BackwardReadsTopData(0));  // the sum's ReLU's mask
    EXPECT_FALSE(net->layers()[i]->BackwardReadsBottomData(1));
    EXPECT_FALSE(net->layers()[i]->CanRecomputeTops());
  }
  // The Split of s0 was folded into sum0, and goes with it.
  EXPECT_EQ(SplitsFoldedInto(*net, "bn0b"), 1);
  try {
    net->blob_by_name("0b");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(msg.find("'0b'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'sum0'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CORTADO_FOLD_SUMS=0"), std::string::npos) << msg;
  }
  // A TEST net folds too, and so does a sum with its bottoms the other way round or without a
  // ReLU.
  SumFoldOptions test;
  test.phase = "TEST";
  SumFoldOptions swapped;
  swapped.chain_first = true;
  swapped.no_sum_relu = true;
  for (const SumFoldOptions& o : {test, swapped}) {
    auto other = BuildFolding(SumFoldNet(o), &ctx, true);
    EXPECT_TRUE(FoldsSum(*other, "bn0b") && FoldsSum(*other, "bn1b")) << o.phase;
  }
  // Not folded: when not asked to, without fusion, a sum
  // with other coefficients or of another kind, a chain with a ReLU, a chain output read again.
  EXPECT_FALSE(FoldsSum(*BuildFolding(SumFoldNet({}), &ctx, false), "bn0b"));
  EXPECT_FALSE(FoldsSum(*BuildFolding(SumFoldNet({}), &ctx, true, false), "bn0b"));
  SumFoldOptions coeffs;
  coeffs.eltwise_param = "eltwise_param { coeff: 1 coeff: 2 }";
  SumFoldOptions product;
  product.eltwise_param = "eltwise_param { operation: PROD }";
  SumFoldOptions twice;
  twice.more = R"(
    layer { name: "ip2" type: "InnerProduct" bottom: "1b" top: "out2"
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.3 } } }
    layer { name: "loss2" type: "EuclideanLoss" bottom: "out2" bottom: "target" top: "loss2" })";
  for (const SumFoldOptions& o : {coeffs, product, twice}) {
    auto other = BuildFolding(SumFoldNet(o), &ctx, true);
    EXPECT_FALSE(FoldsSum(*other, "bn1b")) << o.eltwise_param << o.more;
    EXPECT_TRUE(other->has_blob("1b"));
  }
  caffe::NetParameter with_relu = SumFoldNet({});
  auto* relu = with_relu.add_layer();
  relu->set_name("relu1b");
  relu->set_type("ReLU");
  relu->add_bottom("1b");
  relu->add_top("1b");
  // Right after the chain's Scale, before the sum.
  auto* layers = with_relu.mutable_layer();
  const auto scale =
      std::find_if(layers->begin(), layers->end(),
                   [](const caffe::LayerParameter& l) { return l.name() == "sc1b"; });
  std::rotate(scale + 1, layers->end() - 1, layers->end());
  auto relu_net = BuildFolding(with_relu, &ctx, true);
  EXPECT_EQ(relu_net->layer_by_name("relu1b")->fused_into(), relu_net->layer_by_name("bn1b"));
  EXPECT_FALSE(FoldsSum(*relu_net, "bn1b"));
  EXPECT_TRUE(FoldsSum(*relu_net, "bn0b"));
}

// Every BatchNorm's running statistics in both nets.
void ExpectSameBatchNormStatistics(const Net& expected, const Net& actual, float tolerance,
                                   const std::string& at) {
  for (const char* bn : {"bn0a", "bn0b", "bn1a", "bn1b", "bn0p"}) {
    if (!expected.has_layer(bn)) continue;
    auto& expected_stats = expected.layer_by_name(bn)->blobs();
    auto& stats = actual.layer_by_name(bn)->blobs();
    for (size_t k = 0; k < stats.size(); ++k) {
      ExpectClose(*expected_stats[k], *stats[k], false, tolerance,
                  fmt::format("{} statistics blob {}{}", bn, k, at));
    }
  }
}

// The net folding its sums (`how`, on `device`) against `reference` (built by the caller in a
// context of its own or the same one), over three iterations with SGD steps between them: loss,
// input gradient, parameter gradients, running statistics and (unplanned) the blocks' outputs.
void ExpectSumFoldFollows(const SumFoldOptions& o, Net* reference, Net* folded, float tolerance) {
  ASSERT_TRUE(FoldsSum(*folded, "bn0b") && FoldsSum(*folded, "bn1b"));
  ASSERT_FALSE(FoldsSum(*reference, "bn0b"));
  if (o.plan) {
    ASSERT_GT(reference->ShareTrainingBuffers(), 0u);
    ASSERT_GT(folded->ShareTrainingBuffers(), 0u);
  }
  StartAlike(reference, folded);
  const bool train = o.phase == "TRAIN";
  for (int iteration = 0; iteration < 3; ++iteration) {
    const std::string at = fmt::format(" (iteration {})", iteration);
    if (train) {
      ExpectSameStep(reference, folded, tolerance, at);
    } else {
      const float expected = reference->Forward();
      EXPECT_NEAR(folded->Forward(), expected, tolerance * std::max(1.0f, std::fabs(expected)))
          << at;
    }
    if (!o.plan) {
      for (const char* blob : {"s0", "s1", "out"}) {
        ExpectClose(*reference->blob_by_name(blob), *folded->blob_by_name(blob), false, tolerance,
                    blob + at);
      }
    }
    ExpectSameBatchNormStatistics(*reference, *folded, tolerance, at);
    if (!train) continue;
    for (Net* net : {reference, folded}) {
      for (Tensor* p : net->learnable_params()) {
        math::Axpy(p->count(), -0.05f, p->cpu_diff(), p->mutable_cpu_data());
      }
    }
  }
}

std::vector<SumFoldOptions> SumFoldCases() {
  SumFoldOptions leaky;
  leaky.chain_first = true;
  leaky.sum_relu = "relu_param { negative_slope: 0.1 }";
  SumFoldOptions bare;
  bare.no_sum_relu = true;
  bare.scale_param = "";
  SumFoldOptions planned;
  planned.plan = true;
  SumFoldOptions leaky_planned = leaky;
  leaky_planned.plan = true;
  SumFoldOptions test;
  test.phase = "TEST";
  // A projection shortcut whose own BatchNorm chain, keeping its input, gets a new top after the
  // sum was folded: the folded pass must read and write that top, not the chain's input.
  SumFoldOptions projection;
  projection.projection = true;
  SumFoldOptions projection_keeping = projection;
  projection_keeping.keep = NetOptions::BatchNormInputs::kAlways;
  SumFoldOptions projection_keeping_planned = projection_keeping;
  projection_keeping_planned.plan = true;
  SumFoldOptions keeping_first = projection_keeping;
  keeping_first.chain_first = true;
  return {SumFoldOptions{},
          leaky,
          bare,
          planned,
          leaky_planned,
          test,
          projection,
          projection_keeping,
          projection_keeping_planned,
          keeping_first};
}

std::string Describe(const SumFoldOptions& o) {
  return fmt::format("chain first {}, relu '{}'{}, {}{}{}{}", o.chain_first, o.sum_relu,
                     o.no_sum_relu ? " (none)" : "", o.phase, o.plan ? ", planned" : "",
                     o.projection ? ", projection" : "",
                     o.keep != NetOptions::BatchNormInputs::kNever ? ", keeping inputs" : "");
}

// The folded sum adds and masks as the sum did, after the chain's value as the chain stored it:
// the same bits, planned (the sum's and the chain's gradients taking the folded Split's buffers)
// or not.
TEST(SumFoldTest, SameBitsAsTheSum) {
  for (const SumFoldOptions& o : SumFoldCases()) {
    SCOPED_TRACE(Describe(o));
    const caffe::NetParameter param = SumFoldNet(o);
    Context ctx(Device::Cpu(), 1701);
    auto reference = BuildFolding(param, &ctx, false, true, o.keep);
    auto folded = BuildFolding(param, &ctx, true, true, o.keep);
    ExpectSumFoldFollows(o, reference.get(), folded.get(), 0.0f);
  }
}

// Against every layer on its own (no fusion): the separate BatchNorm, Scale and ReLU passes sum
// in another order, and BatchNorm over 60 values a channel magnifies that through two SGD steps;
// on an AVX-512 machine the third iteration's gradients differed by up to 3e-5.
TEST(SumFoldTest, MatchesSeparateLayers) {
  const caffe::NetParameter param = SumFoldNet({});
  Context ctx(Device::Cpu(), 1701);
  auto reference = BuildFolding(param, &ctx, false, false);
  auto folded = BuildFolding(param, &ctx, true);
  ExpectSumFoldFollows({}, reference.get(), folded.get(), 1e-4f);
}

// The bytes of the distinct data and diff buffers of a net's blobs.
size_t BlobBufferBytes(const Net& net) {
  std::set<const SyncedMemory*> buffers;
  size_t bytes = 0;
  for (const auto& blob : net.blobs()) {
    for (const SyncedMemory* buffer : {blob->data().get(), blob->diff().get()}) {
      if (buffers.insert(buffer).second) bytes += buffer->size();
    }
  }
  return bytes;
}

// Planned, the folded net's buffers are no larger than the sums': the chain's and the residual's
// gradients, which the BatchNorm now writes, stay in the plan (net/memory_plan.cpp counts a fused
// layer's touches at its host).
TEST(SumFoldTest, PlanIsNoLargerThanTheSums) {
  const caffe::NetParameter param = SumFoldNet({});
  Context ctx(Device::Cpu(), 1701);
  auto reference = BuildFolding(param, &ctx, false);
  auto folded = BuildFolding(param, &ctx, true);
  const size_t unplanned = BlobBufferBytes(*folded);
  ASSERT_GT(reference->ShareTrainingBuffers(), 0u);
  ASSERT_GT(folded->ShareTrainingBuffers(), 0u);
  EXPECT_LT(BlobBufferBytes(*folded), unplanned);
  EXPECT_LE(BlobBufferBytes(*folded), BlobBufferBytes(*reference));
}

// On a GPU, float32 blobs (16-bit ones: buffer_sharing_test.cpp), in one context so that both
// nets run the same convolution kernels.
TEST(SumFoldGpuTest, SameValuesAsTheSum) {
  CORTADO_REQUIRE_GPU();
  for (const SumFoldOptions& o : SumFoldCases()) {
    SCOPED_TRACE(Describe(o));
    const caffe::NetParameter param = SumFoldNet(o);
    Context ctx(Device::Cuda(0), 1701);
    ctx.MakeCurrent();
    auto reference = BuildFolding(param, &ctx, false, true, o.keep);
    auto folded = BuildFolding(param, &ctx, true, true, o.keep);
    ExpectSumFoldFollows(o, reference.get(), folded.get(), 1e-6f);
  }
}

}  // namespace
}  // namespace cortado
