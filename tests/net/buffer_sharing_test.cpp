// SPDX-License-Identifier: Apache-2.0
// The training memory plan (Net::ShareDiffBuffers, Net::ShareDataBuffers, and both at once with
// gradients in finished data, Net::ShareTrainingBuffers): with gradient and
// data buffers shared between blobs, a net computes bit for bit the same parameter gradients,
// input gradient and loss as without, over nets that exercise every kind of buffer use (branches
// through Split, Concat, Slice and Eltwise; in-place and fused chains; layers that alias their
// top's buffers to their bottom's; losses with labels; layers that do not propagate); and it
// does save memory. A Solver plans its training net unless NetOptions::share_buffers is false.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>

#include "io/proto_io.hpp"
#include "math/math.hpp"
#include "net/net.hpp"
#include "solvers/solver.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"
#include "support/scoped_env.hpp"

namespace cortado {
namespace {

using testing::NetParam;
using testing::ScopedEnv;

// Two branches off one input that meet again, with most of the layer kinds a training net has.
const char kBranchyNet[] = R"(
  name: "branchy" force_backward: true
  layer { name: "in" type: "Input" top: "x" top: "label" top: "ip1_target"
          input_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } shape { dim: 4 }
                        shape { dim: 4 dim: 12 } } }
  layer { name: "conv1" type: "Convolution" bottom: "x" top: "c1"
          convolution_param { num_output: 6 kernel_size: 3 pad: 1
                              weight_filler { type: "gaussian" std: 0.3 }
                              bias_filler { type: "gaussian" std: 0.1 } } }
  layer { name: "bn1" type: "BatchNorm" bottom: "c1" top: "c1" }
  layer { name: "sc1" type: "Scale" bottom: "c1" top: "c1" scale_param { bias_term: true } }
  layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" }
  layer { name: "slice" type: "Slice" bottom: "c1" top: "s1" top: "s2"
          slice_param { axis: 1 slice_point: 2 } }
  layer { name: "conv2" type: "Convolution" bottom: "s1" top: "c2"
          convolution_param { num_output: 4 kernel_size: 3 pad: 1
                              weight_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "tanh" type: "TanH" bottom: "c2" top: "c2" }
  layer { name: "conv3" type: "Convolution" bottom: "s2" top: "c3"
          convolution_param { num_output: 4 kernel_size: 1
                              weight_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "prelu" type: "PReLU" bottom: "c3" top: "p3" }
  layer { name: "sum" type: "Eltwise" bottom: "c2" bottom: "p3" top: "e" }
  layer { name: "concat" type: "Concat" bottom: "e" bottom: "c1" top: "cat" }
  layer { name: "pool" type: "Pooling" bottom: "cat" top: "pool"
          pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
  layer { name: "lrn" type: "LRN" bottom: "pool" top: "norm" lrn_param { local_size: 3 } }
  layer { name: "sig" type: "Sigmoid" bottom: "norm" top: "sig" }
  layer { name: "flat" type: "Flatten" bottom: "sig" top: "flat" }
  layer { name: "ip1" type: "InnerProduct" bottom: "flat" top: "ip1"
          inner_product_param { num_output: 12 weight_filler { type: "gaussian" std: 0.1 }
                                bias_filler { type: "gaussian" std: 0.1 } } }
  layer { name: "reshape" type: "Reshape" bottom: "ip1" top: "r"
          reshape_param { shape { dim: 0 dim: 3 dim: 4 } } }
  layer { name: "ip2" type: "InnerProduct" bottom: "r" top: "scores"
          inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "scores" bottom: "label" top: "loss" }
  layer { name: "aux" type: "EuclideanLoss" bottom: "ip1" bottom: "ip1_target" top: "aux"
          loss_weight: 0.5 propagate_down: true propagate_down: false }
)";

void FillInputs(Net* net) {
  Rng rng(99);
  Tensor* x = net->blob_by_name("x");
  math::RngGaussian(x->count(), 0.0f, 1.0f, rng, x->mutable_cpu_data());
  Tensor* label = net->blob_by_name("label");
  for (int i = 0; i < label->count(); ++i) label->mutable_cpu_data()[i] = static_cast<float>(i % 5);
  if (net->has_blob("ip1_target")) {
    Tensor* t = net->blob_by_name("ip1_target");
    math::RngGaussian(t->count(), 0.0f, 1.0f, rng, t->mutable_cpu_data());
  }
}

int DistinctDiffBuffers(const Net& net) {
  std::set<const SyncedMemory*> buffers;
  for (const auto& blob : net.blobs()) buffers.insert(blob->diff().get());
  return static_cast<int>(buffers.size());
}

int DistinctDataBuffers(const Net& net) {
  std::set<const SyncedMemory*> buffers;
  for (const auto& blob : net.blobs()) buffers.insert(blob->data().get());
  return static_cast<int>(buffers.size());
}

// Two nets built from one NetParameter, with the same weights: one to leave as built, one to
// plan.
struct TwinNets {
  explicit TwinNets(const caffe::NetParameter& param, const NetOptions& options = {},
                    Device device = Device::Cpu())
      : ctx_a(device, 5),
        ctx_b(device, 5),
        plain(param, &ctx_a, options),
        shared(param, &ctx_b, options) {
    caffe::NetParameter weights;
    plain.ToProto(&weights);
    shared.CopyTrainedLayersFrom(weights);
  }
  Context ctx_a;
  Context ctx_b;
  Net plain;
  Net shared;
};

// The distinct buffers of a net's blobs, data and diffs together.
std::set<const SyncedMemory*> AllBuffers(const Net& net) {
  std::set<const SyncedMemory*> buffers;
  for (const auto& blob : net.blobs()) {
    buffers.insert(blob->data().get());
    buffers.insert(blob->diff().get());
  }
  return buffers;
}

// Bytes of the distinct buffers of a net's blobs.
size_t BlobBufferBytes(const Net& net) {
  size_t bytes = 0;
  for (const SyncedMemory* memory : AllBuffers(net)) bytes += memory->size();
  return bytes;
}

// The learnable parameters' gradients of two twins: equal bit for bit (tolerance 0), or within
// `tolerance` relative to the larger of 1 and the expected value. `where` names the step.
void ExpectSameParamDiffs(const Net& expected, const Net& actual, float tolerance,
                          const std::string& where) {
  for (size_t k = 0; k < expected.learnable_params().size(); ++k) {
    const Tensor& e = *expected.learnable_params()[k];
    const Tensor& a = *actual.learnable_params()[k];
    for (int i = 0; i < e.count(); ++i) {
      if (tolerance == 0.0f) {
        ASSERT_EQ(e.cpu_diff()[i], a.cpu_diff()[i])
            << expected.param_display_names()[k] << " element " << i << ", " << where;
      } else {
        ASSERT_NEAR(e.cpu_diff()[i], a.cpu_diff()[i],
                    tolerance * std::max(1.0f, std::fabs(e.cpu_diff()[i])))
            << expected.param_display_names()[k] << " element " << i << ", " << where;
      }
    }
  }
}

// Each parameter's gradient within `tolerance` of that parameter's largest (at least 1e-3): for
// nets whose values differ by a 16-bit type's rounding.
void ExpectParamDiffsWithinLargest(const Net& expected, const Net& actual, float tolerance,
                                   const std::string& where) {
  for (size_t k = 0; k < expected.learnable_params().size(); ++k) {
    const Tensor& e = *expected.learnable_params()[k];
    const Tensor& a = *actual.learnable_params()[k];
    float scale = 0.0f, worst = 0.0f;
    for (int i = 0; i < e.count(); ++i) {
      scale = std::max(scale, std::fabs(e.cpu_diff()[i]));
      worst = std::max(worst, std::fabs(e.cpu_diff()[i] - a.cpu_diff()[i]));
    }
    EXPECT_LE(worst, tolerance * std::max(scale, 1e-3f))
        << expected.param_display_names()[k] << where;
  }
}

// The plan a test applies: the two separate ones, or the joint one a Solver uses.
enum class Plan { kSeparate, kJoint };

void ExpectSameGradients(const std::string& text, bool shares_data, Plan how = Plan::kSeparate,
                         const NetOptions& options = {}) {
  caffe::NetParameter param = NetParam(text);
  param.mutable_state()->set_phase(caffe::TRAIN);
  TwinNets twins(param, options);
  Net& plain = twins.plain;
  Net& shared = twins.shared;
  const int diffs_before = DistinctDiffBuffers(shared);
  const int data_before = DistinctDataBuffers(shared);
  if (how == Plan::kSeparate) {
    EXPECT_GT(shared.ShareDiffBuffers(), 0u);
    EXPECT_LT(DistinctDiffBuffers(shared), diffs_before);
    const size_t data_saved = shared.ShareDataBuffers();
    if (shares_data) {
      EXPECT_GT(data_saved, 0u);
      EXPECT_LT(DistinctDataBuffers(shared), data_before);
    }
  } else {
    const size_t before = BlobBufferBytes(shared);
    const size_t saved = shared.ShareTrainingBuffers();
    EXPECT_GT(saved, 0u);
    EXPECT_LT(BlobBufferBytes(shared), before);
    // Some gradient lives in a buffer that is also some blob's data.
    std::set<const SyncedMemory*> data;
    for (const auto& blob : shared.blobs()) data.insert(blob->data().get());
    int diffs_in_data = 0;
    for (const auto& blob : shared.blobs()) diffs_in_data += data.count(blob->diff().get());
    EXPECT_GT(diffs_in_data, 0);
  }
  FillInputs(&plain);
  FillInputs(&shared);
  for (int iteration = 0; iteration < 2; ++iteration) {
    const float expected = plain.ForwardBackward();
    const float loss = shared.ForwardBackward();
    EXPECT_EQ(loss, expected) << "iteration " << iteration;
    ASSERT_NO_FATAL_FAILURE(
        ExpectSameParamDiffs(plain, shared, 0.0f, "iteration " + std::to_string(iteration)));
    const Tensor& ex = *plain.blob_by_name("x");
    const Tensor& ax = *shared.blob_by_name("x");
    for (int i = 0; i < ex.count(); ++i) {
      ASSERT_EQ(ex.cpu_diff()[i], ax.cpu_diff()[i]) << "input gradient element " << i;
    }
  }
}

TEST(BufferSharingTest, BranchyNetHasTheSameGradients) { ExpectSameGradients(kBranchyNet, false); }

// A residual stage: Split, Eltwise and fused BatchNorm chains, as ResNet has them.
std::string ResidualNet() {
  std::string text = R"(
    name: "residual"
    layer { name: "in" type: "Input" top: "x" top: "label"
            input_param { shape { dim: 2 dim: 4 dim: 6 dim: 6 } shape { dim: 2 } } }
  )";
  std::string from = "x";
  for (int block = 0; block < 3; ++block) {
    const std::string b = "b" + std::to_string(block);
    for (int k = 0; k < 2; ++k) {
      const std::string bottom = k == 0 ? from : b + "c0";
      text += fmt::format(R"(
        layer {{ name: "{0}c{1}" type: "Convolution" bottom: "{2}" top: "{0}c{1}"
                convolution_param {{ num_output: 4 kernel_size: 3 pad: 1 bias_term: false
                                    weight_filler {{ type: "msra" }} }} }}
        layer {{ name: "{0}bn{1}" type: "BatchNorm" bottom: "{0}c{1}" top: "{0}c{1}" }}
        layer {{ name: "{0}sc{1}" type: "Scale" bottom: "{0}c{1}" top: "{0}c{1}"
                scale_param {{ bias_term: true }} }}
      )",
                          b, k, bottom);
      if (k == 0) {
        text += fmt::format(
            R"(layer {{ name: "{0}relu0" type: "ReLU" bottom: "{0}c0" top: "{0}c0" }})", b);
      }
    }
    text += fmt::format(R"(
      layer {{ name: "{0}sum" type: "Eltwise" bottom: "{1}" bottom: "{0}c1" top: "{0}" }}
      layer {{ name: "{0}relu" type: "ReLU" bottom: "{0}" top: "{0}" }}
    )",
                        b, from);
    from = b;
  }
  text += fmt::format(R"(
    layer {{ name: "pool" type: "Pooling" bottom: "{}" top: "pool"
            pooling_param {{ pool: AVE global_pooling: true }} }}
    layer {{ name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
            inner_product_param {{ num_output: 3 weight_filler {{ type: "xavier" }} }} }}
    layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }}
  )",
                      from);
  return text;
}

TEST(BufferSharingTest, ResidualBlocksHaveTheSameGradients) {
  // The blocks' last BatchNorm + Scale outputs feed only a sum, whose gradient needs no data.
  ExpectSameGradients(ResidualNet(), true);
}

// The joint plan: gradients also take the buffers of data Backward is done with.
TEST(BufferSharingTest, JointPlanHasTheSameGradients) {
  ExpectSameGradients(kBranchyNet, false, Plan::kJoint);
  ExpectSameGradients(ResidualNet(), true, Plan::kJoint);
}

// The joint plan without recomputing (with it, the test above).
TEST(BufferSharingTest, JointPlanWithoutRecomputingHasTheSameGradients) {
  NetOptions options;
  options.recompute = false;
  ExpectSameGradients(kBranchyNet, false, Plan::kJoint, options);
  ExpectSameGradients(ResidualNet(), true, Plan::kJoint, options);
}

// The fused BatchNorm + Scale + ReLU outputs that the next convolution's Backward reads are
// written again in Backward rather than kept: the plan saves more, the gradients keep their bits
// (the test above), and so they do after the batch grows past the plan.
TEST(BufferSharingTest, RecomputedTopsSaveMoreAndSurviveALargerBatch) {
  caffe::NetParameter param = NetParam(ResidualNet());
  param.mutable_state()->set_phase(caffe::TRAIN);
  NetOptions keep;
  keep.recompute = false;
  TwinNets kept(param, keep);
  TwinNets twins(param);
  const size_t saved_keeping = kept.shared.ShareTrainingBuffers();
  const size_t saved = twins.shared.ShareTrainingBuffers();
  EXPECT_GT(saved, saved_keeping);
  // The three blocks' first BatchNorm + Scale + ReLU outputs (b*c0) are what it recomputes:
  // 2 x 4 x 6 x 6 floats each, and none of them needs a buffer of its own through Backward.
  EXPECT_GE(saved - saved_keeping, 3 * sizeof(float) * 2 * 4 * 6 * 6);

  Net& plain = twins.plain;
  Net& shared = twins.shared;
  for (int batch : {2, 5, 3}) {
    for (Net* net : {&plain, &shared}) {
      net->blob_by_name("x")->Reshape({batch, 4, 6, 6});
      net->blob_by_name("label")->Reshape({batch});
      FillInputs(net);
      Tensor* label = net->blob_by_name("label");
      for (int i = 0; i < batch; ++i) label->mutable_cpu_data()[i] = static_cast<float>(i % 3);
    }
    for (int iteration = 0; iteration < 2; ++iteration) {
      const float expected = plain.ForwardBackward();
      EXPECT_EQ(shared.ForwardBackward(), expected) << "batch " << batch;
      ASSERT_NO_FATAL_FAILURE(
          ExpectSameParamDiffs(plain, shared, 0.0f, "batch " + std::to_string(batch)));
    }
  }
}

TEST(BufferSharingTest, JointPlanTakesLessThanTheTwoPlans) {
  caffe::NetParameter param = NetParam(ResidualNet());
  param.mutable_state()->set_phase(caffe::TRAIN);
  TwinNets twins(param);
  twins.plain.ShareDiffBuffers();
  twins.plain.ShareDataBuffers();
  twins.shared.ShareTrainingBuffers();
  EXPECT_LT(BlobBufferBytes(twins.shared), BlobBufferBytes(twins.plain));
}

TEST(BufferSharingTest, ForwardOnlyNetsShareAllButTheirOutputs) {
  for (const std::string& text : {std::string(kBranchyNet), ResidualNet()}) {
    caffe::NetParameter param = NetParam(text);
    param.set_force_backward(false);
    param.mutable_state()->set_phase(caffe::TEST);
    TwinNets twins(param);
    Net& plain = twins.plain;
    Net& shared = twins.shared;
    shared.SetForwardOnly();
    const int before = DistinctDataBuffers(shared);
    EXPECT_GT(shared.ShareDataBuffers(), 0u) << param.name();
    EXPECT_LT(DistinctDataBuffers(shared), before) << param.name();
    FillInputs(&plain);
    FillInputs(&shared);
    for (int iteration = 0; iteration < 2; ++iteration) {
      EXPECT_EQ(shared.Forward(), plain.Forward()) << param.name();
      for (size_t k = 0; k < plain.output_blobs().size(); ++k) {
        const Tensor& e = *plain.output_blobs()[k];
        const Tensor& a = *shared.output_blobs()[k];
        for (int i = 0; i < e.count(); ++i) {
          ASSERT_EQ(e.cpu_data()[i], a.cpu_data()[i]) << param.name() << " output " << k;
        }
      }
    }
  }
}

TEST(BufferSharingTest, KeptBlobsKeepTheirData) {
  caffe::NetParameter param = NetParam(ResidualNet());
  param.mutable_state()->set_phase(caffe::TEST);
  TwinNets twins(param);
  twins.shared.SetForwardOnly();
  EXPECT_THROW(twins.shared.ShareDataBuffers({"no_such_blob"}), Error);
  twins.shared.ShareDataBuffers({"b0c1", "b1"});
  FillInputs(&twins.plain);
  FillInputs(&twins.shared);
  twins.plain.Forward();
  twins.shared.Forward();
  for (const char* name : {"b0c1", "b1"}) {
    const Tensor& e = *twins.plain.blob_by_name(name);
    const Tensor& a = *twins.shared.blob_by_name(name);
    for (int i = 0; i < e.count(); ++i) ASSERT_EQ(e.cpu_data()[i], a.cpu_data()[i]) << name;
  }
  // Without keeping it, b0c1's buffer is taken over by a later blob.
  Context ctx(Device::Cpu(), 5);
  Net net(param, &ctx);
  net.SetForwardOnly();
  net.ShareDataBuffers();
  const SyncedMemory* b0c1 = net.blob_by_name("b0c1")->data().get();
  int users = 0;
  for (const auto& blob : net.blobs()) users += blob->data().get() == b0c1 ? 1 : 0;
  EXPECT_GT(users, 1);
}

TEST(BufferSharingTest, GrowingABlobGivesItItsOwnBuffer) {
  caffe::NetParameter param = NetParam(kBranchyNet);
  param.mutable_state()->set_phase(caffe::TRAIN);
  Context ctx(Device::Cpu(), 5);
  Net net(param, &ctx);
  net.ShareDiffBuffers();
  net.ShareDataBuffers();
  const int before = DistinctDiffBuffers(net);
  // A larger batch: every planned blob outgrows its buffer and gets its own again.
  net.blob_by_name("x")->Reshape({8, 3, 8, 8});
  net.blob_by_name("label")->Reshape({8});
  net.blob_by_name("ip1_target")->Reshape({8, 12});
  net.Reshape();
  EXPECT_GT(DistinctDiffBuffers(net), before);
  for (const auto& blob : net.blobs()) {
    EXPECT_GE(blob->diff()->size(), sizeof(float) * blob->count());
    EXPECT_GE(blob->data()->size(), sizeof(float) * blob->count());
  }
  FillInputs(&net);
  EXPECT_TRUE(std::isfinite(net.ForwardBackward()));
}

TEST(BufferSharingTest, SolverPlansItsTrainingNetUnlessTurnedOff) {
  caffe::SolverParameter param;
  *param.mutable_net_param() = NetParam(ResidualNet());
  param.set_base_lr(0.01f);
  param.set_lr_policy("fixed");
  param.set_max_iter(1);
  param.set_random_seed(3);
  Context ctx(Device::Cpu(), 3);
  auto solver = CreateSolver(param, &ctx);
  const int planned = DistinctDiffBuffers(*solver->net());
  const int planned_data = DistinctDataBuffers(*solver->net());
  std::unique_ptr<Solver> unplanned;
  {
    NetOptions off;
    off.share_buffers = false;
    unplanned = CreateSolver(param, &ctx, off);
  }
  EXPECT_LT(planned, DistinctDiffBuffers(*unplanned->net()));
  EXPECT_LT(planned_data, DistinctDataBuffers(*unplanned->net()));
}

// The same on the GPU (BatchNorm's recomputation there is its own kernel): the planned net's
// loss and gradients match the unplanned twin's. cuDNN may pick other algorithms for the twin,
// hence a tolerance.
TEST(BufferSharingGpuTest, RecomputedTopsGiveTheUnplannedGradients) {
  CORTADO_REQUIRE_GPU();
  caffe::NetParameter param = NetParam(ResidualNet());
  param.mutable_state()->set_phase(caffe::TRAIN);
  TwinNets twins(param, NetOptions{}, Device::Cuda(0));
  ASSERT_GT(twins.shared.ShareTrainingBuffers(), 0u);
  // 6 x 6 as planned (the kernel's float4 path), then 5 x 5 (one value at a time) and 7 x 7
  // (grown past the plan).
  for (int side : {6, 5, 7}) {
    for (Net* net : {&twins.plain, &twins.shared}) {
      net->blob_by_name("x")->Reshape({2, 4, side, side});
      FillInputs(net);
    }
    const float expected = twins.plain.ForwardBackward();
    EXPECT_NEAR(twins.shared.ForwardBackward(), expected, 1e-5f * std::max(1.0f, expected))
        << side << " x " << side;
    ASSERT_NO_FATAL_FAILURE(ExpectSameParamDiffs(
        twins.plain, twins.shared, 1e-4f, std::to_string(side) + " x " + std::to_string(side)));
  }
}

// The CPU computes in float32 whatever the precision: no blob of a CPU net is kept in 16 bits.
TEST(HalfTensorsTest, CpuNetsKeepEveryBlobInFloat32) {
  caffe::NetParameter param = NetParam(ResidualNet());
  param.mutable_state()->set_phase(caffe::TRAIN);
  Context ctx(Device::Cpu(), 5);
  ctx.set_half_compute(HalfType::kFloat16);
  Net net(param, &ctx);
  EXPECT_EQ(net.num_half_blobs(), 0);
  for (const auto& blob : net.blobs()) EXPECT_EQ(blob->home_type(), HalfType::kNone);
  FillInputs(&net);
  EXPECT_TRUE(std::isfinite(net.ForwardBackward()));
}

// Mixed precision: a residual net on the GPU keeps the blobs that only convolutions, BatchNorm
// (with its fused Scale and ReLU), the residual sums, the Splits and pooling touch in the 16-bit
// type,
// and its loss and gradients follow the same net with float32 blobs (CORTADO_HALF_TENSORS=0, the
// convolutions still computing in the half type) within that type's rounding; planned, its
// buffers take half the bytes where the blobs are half, and it gives the unplanned net's
// gradients. Blobs between two convolutions are kept channels-last (net/channels_last.hpp).
TEST(HalfTensorsGpuTest, ResidualNetKeepsHalfBlobsAndFollowsFloat32Blobs) {
  CORTADO_REQUIRE_GPU();
  caffe::NetParameter param = NetParam(ResidualNet());
  param.mutable_state()->set_phase(caffe::TRAIN);
  for (HalfType type : {HalfType::kFloat16, HalfType::kBFloat16}) {
    SCOPED_TRACE(HalfTypeName(type));
    // Of the largest gradient of each parameter. bfloat16 keeps 8 significant bits to float16's
    // 11, and BatchNorm's backward pass over the 72 values of a channel here subtracts nearly
    // equal sums: on an H200 its worst was 0.26 (b1c0), float16's under 0.02.
    const float tolerance = type == HalfType::kFloat16 ? 2e-2f : 0.35f;
    Context ctx_float(Device::Cuda(0), 5), ctx_half(Device::Cuda(0), 5),
        ctx_plan(Device::Cuda(0), 5);
    for (Context* ctx : {&ctx_float, &ctx_half, &ctx_plan}) ctx->set_half_compute(type);
    ctx_float.MakeCurrent();
    std::unique_ptr<Net> reference;
    {
      ScopedEnv off("CORTADO_HALF_TENSORS", "0");
      reference = std::make_unique<Net>(param, &ctx_float);
      EXPECT_EQ(reference->num_half_blobs(), 0);
    }
    caffe::NetParameter weights;
    reference->ToProto(&weights);
    ctx_half.MakeCurrent();
    Net half(param, &ctx_half);
    half.CopyTrainedLayersFrom(weights);
    ctx_plan.MakeCurrent();
    Net planned(param, &ctx_plan);
    planned.CopyTrainedLayersFrom(weights);
    ASSERT_GT(planned.ShareTrainingBuffers(), 0u);

    // The blocks' convolutions, sums and splits are half, and the pooling's top, which the inner
    // product reads in half; the input, the inner product's top (the loss reads it) and the loss
    // are not.
    EXPECT_GT(half.num_half_blobs(), 10);
    EXPECT_EQ(half.blob_by_name("b0c0")->home_type(), type);
    EXPECT_EQ(half.blob_by_name("b1")->home_type(), type);
    EXPECT_EQ(half.blob_by_name("x")->home_type(), HalfType::kNone);
    EXPECT_EQ(half.blob_by_name("b2")->home_type(), type);
    EXPECT_EQ(half.blob_by_name("pool")->home_type(), type);
    EXPECT_EQ(half.blob_by_name("fc")->home_type(), HalfType::kNone);
    EXPECT_EQ(half.blob_by_name("loss")->home_type(), HalfType::kNone);
    EXPECT_EQ(half.blob_by_name("b0c0")->data()->size(), 2u * half.blob_by_name("b0c0")->count());
    // Channels-last: each block's inner blob (convolution, BatchNorm + Scale + ReLU,
    // convolution) is NHWC; the residual path is not, since the float32 input x is its first
    // sum's bottom.
    EXPECT_EQ(half.num_nhwc_blobs(), 3);
    for (const char* name : {"b0c0", "b1c0", "b2c0"}) {
      EXPECT_TRUE(half.blob_by_name(name)->home_nhwc()) << name;
    }
    for (const char* name : {"b0c1", "b1", "pool"}) {
      EXPECT_FALSE(half.blob_by_name(name)->home_nhwc()) << name;
    }

    float expected = 0.0f;
    {
      ScopedEnv off("CORTADO_HALF_TENSORS", "0");
      ctx_float.MakeCurrent();
      FillInputs(reference.get());
      expected = reference->ForwardBackward();
      ctx_float.Synchronize();
    }
    for (Net* net : {&half, &planned}) {
      (net == &half ? ctx_half : ctx_plan).MakeCurrent();
      FillInputs(net);
      const float loss = net->ForwardBackward();
      EXPECT_NEAR(loss, expected, tolerance * std::max(1.0f, expected));
      ExpectParamDiffsWithinLargest(*reference, *net, tolerance, net == &half ? "" : ", planned");
    }
  }
}

// `other` from `reference`'s weights, both planned if asked, over two iterations with an SGD
// step of `reference`'s gradients copied to both between them: the same loss and parameter
// gradients up to float32's last bit (nets in one context run the same convolution kernels).
void ExpectFollowsOverTwoSteps(Net* reference, Net* other, bool plan) {
  caffe::NetParameter weights;
  reference->ToProto(&weights);
  other->CopyTrainedLayersFrom(weights);
  if (plan) {
    ASSERT_GT(reference->ShareTrainingBuffers(), 0u);
    ASSERT_GT(other->ShareTrainingBuffers(), 0u);
  }
  for (int iteration = 0; iteration < 2; ++iteration) {
    FillInputs(reference);
    FillInputs(other);
    const float expected = reference->ForwardBackward();
    EXPECT_NEAR(other->ForwardBackward(), expected, 1e-6f * std::max(1.0f, expected));
    ASSERT_NO_FATAL_FAILURE(
        ExpectSameParamDiffs(*reference, *other, 1e-6f, "iteration " + std::to_string(iteration)));
    for (size_t k = 0; k < reference->learnable_params().size(); ++k) {
      Tensor& e = *reference->learnable_params()[k];
      e.scale_diff(0.1f);
      e.Update();
      other->learnable_params()[k]->CopyFrom(e);
    }
  }
}

// BatchNorm chains keeping their input (NetOptions::keep_batch_norm_inputs kOnGpus) against the
// same net keeping BatchNorm's normalised copy (the default, kNever), in one context so
// both run the same convolution kernels: float32 blobs, and 16-bit blobs with each block's inner
// chain channels-last; planned (the tops recomputed from the kept input) and not. The passes
// normalise the input again rounded as the copy was: the same values up to float32's last bit.
TEST(HalfTensorsGpuTest, BatchNormKeepingItsInputFollowsTheNormalisedCopy) {
  CORTADO_REQUIRE_GPU();
  caffe::NetParameter param = NetParam(ResidualNet());
  param.mutable_state()->set_phase(caffe::TRAIN);
  NetOptions copying, keep_inputs;
  keep_inputs.keep_batch_norm_inputs = NetOptions::BatchNormInputs::kOnGpus;
  for (HalfType type : {HalfType::kNone, HalfType::kFloat16, HalfType::kBFloat16}) {
    for (bool plan : {false, true}) {
      SCOPED_TRACE(std::string(HalfTypeName(type)) + (plan ? ", planned" : ""));
      Context ctx(Device::Cuda(0), 5);
      ctx.set_half_compute(type);
      ctx.MakeCurrent();
      Net copy(param, &ctx, copying);
      Net keeping(param, &ctx, keep_inputs);
      EXPECT_FALSE(copy.has_blob("b0c0 (BatchNorm input)"));
      ASSERT_TRUE(keeping.has_blob("b0c0 (BatchNorm input)"));
      ASSERT_TRUE(keeping.has_blob("b2c1 (BatchNorm input)"));
      if (type != HalfType::kNone) {
        // Each inner chain's input and its top: twice the blobs channels-last.
        EXPECT_EQ(keeping.num_nhwc_blobs(), 2 * copy.num_nhwc_blobs());
        EXPECT_TRUE(keeping.blob_by_name("b0c0 (BatchNorm input)")->home_nhwc());
        EXPECT_TRUE(keeping.blob_by_name("b0c0")->home_nhwc());
      }
      ExpectFollowsOverTwoSteps(&copy, &keeping, plan);
    }
  }
}

// Residual sums folded into the BatchNorm chains before them
// (NetOptions::fold_sums_into_batch_norms) against the same net computing them apart (the
// default), in one context: float32 and 16-bit blobs, planned and not, with BatchNorm keeping its
// normalised copy or its input. The folded pass rounds the chain's value to the blobs' type before
// adding, as the chain's stored output was: the same values up to float32's last bit.
TEST(HalfTensorsGpuTest, SumsFoldedIntoBatchNormsFollowTheSums) {
  CORTADO_REQUIRE_GPU();
  caffe::NetParameter param = NetParam(ResidualNet());
  param.mutable_state()->set_phase(caffe::TRAIN);
  using BatchNormInputs = NetOptions::BatchNormInputs;
  for (HalfType type : {HalfType::kNone, HalfType::kFloat16, HalfType::kBFloat16}) {
    for (BatchNormInputs inputs : {BatchNormInputs::kNever, BatchNormInputs::kOnGpus}) {
      for (bool plan : {false, true}) {
        SCOPED_TRACE(fmt::format("{}{}{}", HalfTypeName(type),
                                 inputs == BatchNormInputs::kNever ? "" : ", keeping inputs",
                                 plan ? ", planned" : ""));
        NetOptions apart, folding;
        apart.fold_sums_into_batch_norms = NetOptions::SumFolds::kNever;
        folding.fold_sums_into_batch_norms = NetOptions::SumFolds::kAlways;
        apart.keep_batch_norm_inputs = folding.keep_batch_norm_inputs = inputs;
        Context ctx(Device::Cuda(0), 5);
        ctx.set_half_compute(type);
        ctx.MakeCurrent();
        Net sums(param, &ctx, apart);
        Net folded(param, &ctx, folding);
        EXPECT_TRUE(sums.has_blob("b2c1"));
        EXPECT_FALSE(folded.has_blob("b2c1"));
        ASSERT_TRUE(folded.has_blob("b2c1 (BatchNorm input)"));
        if (type != HalfType::kNone) {
          EXPECT_EQ(folded.blob_by_name("b2c1 (BatchNorm input)")->home_type(), type);
          EXPECT_EQ(folded.blob_by_name("b1")->home_type(), type);
          EXPECT_EQ(folded.num_nhwc_blobs(), sums.num_nhwc_blobs());
        }
        ExpectFollowsOverTwoSteps(&sums, &folded, plan);
      }
    }
  }
}

// A net shaped as ResNet's stem and a block: a convolution on the float32 input, BatchNorm +
// Scale + ReLU, max pooling, a bottleneck beside a 1x1 shortcut, their sum, global average
// pooling and an inner product. Every blob from the stem's convolution to the global pooling's
// bottom goes channels-last, pooling included, and the net's loss and gradients follow the same
// net with NCHW blobs (CORTADO_NHWC_BLOBS=0) within the type's rounding, over two iterations of
// plain SGD steps, planned (shared buffers, recomputed tops) and not.
TEST(HalfTensorsGpuTest, ChannelsLastBlobsFollowNchwBlobs) {
  CORTADO_REQUIRE_GPU();
  std::string text = R"(
    name: "stem"
    layer { name: "in" type: "Input" top: "x" top: "label"
            input_param { shape { dim: 4 dim: 3 dim: 16 dim: 16 } shape { dim: 4 } } }
    layer { name: "conv1" type: "Convolution" bottom: "x" top: "conv1"
            convolution_param { num_output: 16 kernel_size: 3 stride: 2 pad: 1 bias_term: false
                                weight_filler { type: "msra" } } }
    layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
    layer { name: "sc1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
    layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
    layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
            pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
  )";
  const char* block[][4] = {{"a", "pool1", "8", "1"},
                            {"b", "a", "8", "3"},
                            {"c", "b", "32", "1"},
                            {"s", "pool1", "32", "1"}};
  for (const auto& conv : block) {
    text += fmt::format(R"(
      layer {{ name: "{0}" type: "Convolution" bottom: "{1}" top: "{0}"
              convolution_param {{ num_output: {2} kernel_size: {3} pad: {4} bias_term: {5}
                                  weight_filler {{ type: "msra" }} }} }}
      layer {{ name: "{0}bn" type: "BatchNorm" bottom: "{0}" top: "{0}" }}
      layer {{ name: "{0}sc" type: "Scale" bottom: "{0}" top: "{0}" scale_param {{ bias_term: true }} }}
    )",
                        conv[0], conv[1], conv[2], conv[3], conv[3][0] == '3' ? 1 : 0,
                        conv[0][0] == 'a' ? "true" : "false");
    if (conv[0][0] == 'a' || conv[0][0] == 'b') {
      text += fmt::format(R"(layer {{ name: "{0}relu" type: "ReLU" bottom: "{0}" top: "{0}" }})",
                          conv[0]);
    }
  }
  text += R"(
    layer { name: "sum" type: "Eltwise" bottom: "c" bottom: "s" top: "sum" }
    layer { name: "relu" type: "ReLU" bottom: "sum" top: "sum" }
    layer { name: "pool" type: "Pooling" bottom: "sum" top: "pool"
            pooling_param { pool: AVE global_pooling: true } }
    layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
            inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
  )";
  caffe::NetParameter param = NetParam(text);
  param.mutable_state()->set_phase(caffe::TRAIN);
  for (HalfType type : {HalfType::kFloat16, HalfType::kBFloat16}) {
    for (bool plan : {false, true}) {
      SCOPED_TRACE(std::string(HalfTypeName(type)) + (plan ? ", planned" : ""));
      const float tolerance = type == HalfType::kFloat16 ? 3e-2f : 0.35f;
      Context ctx_nchw(Device::Cuda(0), 5), ctx_nhwc(Device::Cuda(0), 5);
      for (Context* ctx : {&ctx_nchw, &ctx_nhwc}) ctx->set_half_compute(type);
      std::unique_ptr<Net> nchw;
      {
        ScopedEnv off("CORTADO_NHWC_BLOBS", "0");
        ctx_nchw.MakeCurrent();
        nchw = std::make_unique<Net>(param, &ctx_nchw);
      }
      EXPECT_EQ(nchw->num_nhwc_blobs(), 0);
      caffe::NetParameter weights;
      nchw->ToProto(&weights);
      ctx_nhwc.MakeCurrent();
      Net nhwc(param, &ctx_nhwc);
      nhwc.CopyTrainedLayersFrom(weights);
      if (plan) {
        ASSERT_GT(nchw->ShareTrainingBuffers(), 0u);
        ASSERT_GT(nhwc.ShareTrainingBuffers(), 0u);
      }
      // The shortcut's chain computes the sum (folded by default in training nets), so its blob
      // holds only its input.
      ASSERT_FALSE(nhwc.has_blob("s"));
      for (const char* name : {"conv1", "pool1", "a", "b", "c", "s (BatchNorm input)", "sum"}) {
        EXPECT_TRUE(nhwc.blob_by_name(name)->home_nhwc()) << name;
      }
      for (const char* name : {"x", "pool", "fc"}) {
        EXPECT_FALSE(nhwc.blob_by_name(name)->home_nhwc()) << name;
      }
      for (int iteration = 0; iteration < 2; ++iteration) {
        float expected = 0.0f, loss = 0.0f;
        for (Net* net : {nchw.get(), &nhwc}) {
          (net == &nhwc ? ctx_nhwc : ctx_nchw).MakeCurrent();
          FillInputs(net);
          for (const auto& p : net->learnable_params()) {
            std::fill_n(p->mutable_cpu_diff(), p->count(), 0.0f);
          }
          (net == &nhwc ? loss : expected) = net->ForwardBackward();
        }
        EXPECT_NEAR(loss, expected, tolerance * std::max(1.0f, expected)) << iteration;
        ExpectParamDiffsWithinLargest(*nchw, nhwc, tolerance,
                                      ", iteration " + std::to_string(iteration));
        // The same step on both (the NCHW net's gradients), so the next iteration starts alike.
        for (size_t k = 0; k < nchw->learnable_params().size(); ++k) {
          Tensor& e = *nchw->learnable_params()[k];
          Tensor& a = *nhwc.learnable_params()[k];
          e.scale_diff(0.1f);
          e.Update();
          a.CopyFrom(e);
        }
      }
    }
  }
}

}  // namespace
}  // namespace cortado
