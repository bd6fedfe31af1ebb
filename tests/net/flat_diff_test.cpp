// SPDX-License-Identifier: Apache-2.0
// The learnable parameters' gradients in one buffer (Net::flat_diff): the layout (in order,
// aligned, shared parameters once), writes through the flat buffer and through each parameter
// seen by the other, the same gradients as parameters with buffers of their own, zeroing, and the
// same on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "core/synced_memory.hpp"
#include "math/math.hpp"
#include "net/net.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::NetParam;

// Convolution (weights and bias), a BatchNorm (three parameters of lr_mult 0), two
// InnerProducts sharing their weights and biases, an InnerProduct without bias: parameters of
// many sizes, few of them multiples of the alignment.
const char kNet[] = R"(
  name: "flat"
  force_backward: true
  layer { name: "in" type: "Input" top: "x" top: "target"
          input_param { shape { dim: 2 dim: 3 dim: 5 dim: 5 } shape { dim: 2 dim: 3 } } }
  layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
          convolution_param { num_output: 3 kernel_size: 3
                              weight_filler { type: "gaussian" std: 0.3 }
                              bias_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "bn" type: "BatchNorm" bottom: "c" top: "c" }
  layer { name: "ip_a" type: "InnerProduct" bottom: "c" top: "a"
          param { name: "w" } param { name: "b" }
          inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 }
                                bias_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "relu" type: "ReLU" bottom: "a" top: "a" }
  layer { name: "ip_b" type: "InnerProduct" bottom: "c" top: "b"
          param { name: "w" } param { name: "b" }
          inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 }
                                bias_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "s" }
  layer { name: "ip_c" type: "InnerProduct" bottom: "s" top: "out"
          inner_product_param { num_output: 3 bias_term: false
                                weight_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "target" top: "loss" }
)";

caffe::NetParameter TrainNet() {
  caffe::NetParameter param = NetParam(kNet);
  param.mutable_state()->set_phase(caffe::TRAIN);
  return param;
}

void FillInputs(Net* net) {
  Rng rng(31);
  for (const char* name : {"x", "target"}) {
    Tensor* t = net->blob_by_name(name);
    math::RngGaussian(t->count(), 0.0f, 1.0f, rng, t->mutable_cpu_data());
  }
}

size_t RoundUp(size_t n) {
  return (n + Net::kFlatDiffAlignment - 1) / Net::kFlatDiffAlignment * Net::kFlatDiffAlignment;
}

TEST(FlatDiffTest, OffsetsFollowLearnableParamsInOrder) {
  Context ctx(Device::Cpu(), 3);
  Net net(TrainNet(), &ctx);
  const auto& params = net.learnable_params();
  const auto& offsets = net.learnable_param_offsets();
  // conv (2), bn (3), the shared w and b once, ip_c (1).
  ASSERT_EQ(params.size(), 8u);
  ASSERT_EQ(offsets.size(), params.size());
  EXPECT_EQ(offsets[0], 0u);
  for (size_t i = 1; i < params.size(); ++i) {
    // Each right after the one before, rounded up to the alignment.
    EXPECT_EQ(offsets[i], RoundUp(offsets[i - 1] + params[i - 1]->count())) << "param " << i;
  }
  EXPECT_EQ(net.flat_diff_count(), offsets.back() + params.back()->count());
  ASSERT_NE(net.flat_diff(), nullptr);
  EXPECT_EQ(net.flat_diff()->size(), sizeof(float) * net.flat_diff_count());
  const float* flat = net.flat_cpu_diff();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i]->cpu_diff(), flat + offsets[i]) << "param " << i;
    EXPECT_EQ(params[i]->diff()->parent(), net.flat_diff());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(params[i]->cpu_diff()) % 64, 0u) << "param " << i;
  }
}

TEST(FlatDiffTest, SharedParametersAppearOnceThroughTheirOwner) {
  Context ctx(Device::Cpu(), 3);
  Net net(TrainNet(), &ctx);
  Layer& a = *net.layer_by_name("ip_a");
  Layer& b = *net.layer_by_name("ip_b");
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(a.blobs()[j]->diff(), b.blobs()[j]->diff()) << "blob " << j;
    EXPECT_EQ(a.blobs()[j]->diff()->parent(), net.flat_diff());
    const auto& learnable = net.learnable_params();
    EXPECT_EQ(std::count(learnable.begin(), learnable.end(), a.blobs()[j].get()), 1);
    EXPECT_EQ(std::count(learnable.begin(), learnable.end(), b.blobs()[j].get()), 0);
  }
}

TEST(FlatDiffTest, WritesThroughEitherSideAreSeenByTheOther) {
  Context ctx(Device::Cpu(), 3);
  Net net(TrainNet(), &ctx);
  const auto& params = net.learnable_params();
  const auto& offsets = net.learnable_param_offsets();
  float* flat = net.mutable_flat_cpu_diff();
  for (size_t i = 0; i < net.flat_diff_count(); ++i) flat[i] = static_cast<float>(i);
  for (size_t k = 0; k < params.size(); ++k) {
    for (int i = 0; i < params[k]->count(); ++i) {
      ASSERT_EQ(params[k]->cpu_diff()[i], static_cast<float>(offsets[k] + i));
    }
  }
  for (size_t k = 0; k < params.size(); ++k) {
    float* diff = params[k]->mutable_cpu_diff();
    for (int i = 0; i < params[k]->count(); ++i) diff[i] = -1.0f - static_cast<float>(k);
  }
  const float* read = net.flat_cpu_diff();
  for (size_t k = 0; k < params.size(); ++k) {
    for (int i = 0; i < params[k]->count(); ++i) {
      ASSERT_EQ(read[offsets[k] + i], -1.0f - static_cast<float>(k));
    }
  }
}

// Gives every learnable parameter a diff buffer of its own again (sharers take their owner's),
// as the parameters had before the flat buffer.
void DetachDiffs(Net* net) {
  for (size_t i = 0; i < net->params().size(); ++i) {
    if (net->param_owners()[i] >= 0) continue;
    Tensor* p = net->params()[i].get();
    p->UseDiffBuffer(std::make_shared<SyncedMemory>(sizeof(float) * p->count()));
  }
  for (size_t i = 0; i < net->params().size(); ++i) {
    const int owner = net->param_owners()[i];
    if (owner >= 0) net->params()[i]->ShareDiff(*net->params()[owner]);
  }
}

TEST(FlatDiffTest, BackwardGivesTheSameGradientsAsSeparateBuffers) {
  Context ctx_a(Device::Cpu(), 5);
  Context ctx_b(Device::Cpu(), 5);
  Net flat(TrainNet(), &ctx_a);
  Net separate(TrainNet(), &ctx_b);
  caffe::NetParameter weights;
  flat.ToProto(&weights);
  separate.CopyTrainedLayersFrom(weights);
  DetachDiffs(&separate);
  EXPECT_THROW(separate.flat_cpu_diff(), Error);  // the layout no longer holds
  FillInputs(&flat);
  FillInputs(&separate);
  for (int iteration = 0; iteration < 2; ++iteration) {
    EXPECT_EQ(flat.ForwardBackward(), separate.ForwardBackward());
    const float* all = flat.flat_cpu_diff();
    for (size_t k = 0; k < flat.learnable_params().size(); ++k) {
      const Tensor& e = *separate.learnable_params()[k];
      const float* a = all + flat.learnable_param_offsets()[k];
      ASSERT_NE(e.cpu_diff(), flat.learnable_params()[k]->cpu_diff());
      for (int i = 0; i < e.count(); ++i) {
        ASSERT_EQ(a[i], e.cpu_diff()[i]) << flat.param_display_names()[k] << " element " << i;
      }
    }
  }
}

TEST(FlatDiffTest, ZeroingTheFlatBufferIsClearParamDiffs) {
  Context ctx(Device::Cpu(), 3);
  Net net(TrainNet(), &ctx);
  FillInputs(&net);
  net.ForwardBackward();
  ASSERT_GT(math::Asum(static_cast<int>(net.flat_diff_count()), net.flat_cpu_diff()), 0.0f);
  net.ClearParamDiffs();
  const float* flat = net.flat_cpu_diff();
  EXPECT_TRUE(std::all_of(flat, flat + net.flat_diff_count(), [](float v) { return v == 0.0f; }));
  net.Forward();
  net.Backward();
  float* mutable_flat = net.mutable_flat_cpu_diff();
  std::fill(mutable_flat, mutable_flat + net.flat_diff_count(), 0.0f);
  for (Tensor* p : net.learnable_params()) {
    EXPECT_EQ(math::Asum(p->count(), p->cpu_diff()), 0.0f);
  }
}

TEST(FlatDiffTest, NetWithoutParametersHasNoBuffer) {
  Context ctx(Device::Cpu(), 3);
  Net net(NetParam(R"(
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "relu" type: "ReLU" bottom: "x" top: "y" }
  )"),
          &ctx);
  EXPECT_EQ(net.flat_diff(), nullptr);
  EXPECT_EQ(net.flat_diff_count(), 0u);
  EXPECT_EQ(net.flat_cpu_diff(), nullptr);
  net.ClearParamDiffs();
}

TEST(FlatDiffGpuTest, DevicePointersAreTheFlatBufferAndMatchTheHost) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 7);
  ctx.MakeCurrent();
  Net net(TrainNet(), &ctx);
  FillInputs(&net);
  net.ForwardBackward();
  const float* device = net.flat_gpu_diff();
  const auto& params = net.learnable_params();
  for (size_t k = 0; k < params.size(); ++k) {
    EXPECT_EQ(params[k]->gpu_diff(), device + net.learnable_param_offsets()[k]) << "param " << k;
  }
  // One copy brings every gradient to the host.
  const float* host = net.flat_cpu_diff();
  for (size_t k = 0; k < params.size(); ++k) {
    EXPECT_EQ(params[k]->cpu_diff(), host + net.learnable_param_offsets()[k]);
  }
  EXPECT_GT(math::Asum(static_cast<int>(net.flat_diff_count()), host), 0.0f);
  net.ClearParamDiffs();
  host = net.flat_cpu_diff();
  EXPECT_EQ(math::Asum(static_cast<int>(net.flat_diff_count()), host), 0.0f);
}

}  // namespace
}  // namespace cortado
