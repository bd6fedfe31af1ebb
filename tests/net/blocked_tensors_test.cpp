// SPDX-License-Identifier: Apache-2.0
// Channel blocks on the CPU (Tensor::set_cpu_block, Net::KeepBlockedTensors): a tensor's NCHW
// views and its blocked home hold the same values in their two orders; a Convolution and a
// BatchNorm given blocked bottoms and tops (blocks of 8 and of 16, whatever the machine's own)
// compute the same bits as with NCHW ones; and a net of convolutions, depthwise convolutions,
// fused BatchNorm chains, a residual sum, pooling and a classifier computes the same loss,
// tops and gradients with its blobs kept in blocks as with every blob NCHW
// (NetOptions::cpu_blocks), with and without the training memory plan, in TRAIN and in TEST.
// Channels that fill the last block in part (LeNet's 20 and 50) keep zeros in its extra lanes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "io/proto_io.hpp"
#include "layers/layer.hpp"
#include "math/convolution.hpp"
#include "math/math.hpp"
#include "net/net.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

// Where NCHW element (n, c, i) of an N x C x spatial tensor sits in nChw{block}c.
// A last block that the channels fill in part is padded to `block` lanes.
size_t BlockedIndex(int channels, int spatial, int block, int n, int c, int i) {
  const int blocks = (channels + block - 1) / block;
  return ((static_cast<size_t>(n) * blocks + c / block) * spatial + i) * block + c % block;
}

// Whether every padded lane of a tensor's blocked home (data and diff) holds +0.0f.
void ExpectZeroPadding(Tensor* t, const std::string& what) {
  if (!t->cpu_block_padded()) return;
  const int block = t->cpu_block(), channels = t->channels();
  const int blocks = (channels + block - 1) / block, spatial = t->height() * t->width();
  for (const float* home : {t->cpu_home_data(), t->cpu_home_diff()}) {
    int nonzero = 0;
    for (int n = 0; n < t->num(); ++n) {
      for (int c = channels; c < blocks * block; ++c) {
        for (int i = 0; i < spatial; ++i) {
          const float v = home[BlockedIndex(channels, spatial, block, n, c, i)];
          nonzero += std::signbit(v) || v != 0.0f;
        }
      }
    }
    EXPECT_EQ(nonzero, 0) << what << ": padded lanes that are not zero, " << t->ShapeString()
                          << (home == t->cpu_home_data() ? " (data)" : " (diff)");
  }
}

void ExpectSameBits(const float* expected, const float* actual, int count,
                    const std::string& what) {
  int mismatches = 0;
  for (int i = 0; i < count && mismatches < 5; ++i) {
    if (std::memcmp(&expected[i], &actual[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected "
                    << expected[i];
      ++mismatches;
    }
  }
}

// Writes value i + first to element i of the NCHW data view (its negative to the diff view) and
// expects each in its place in the blocked home.
void WriteViewsAndExpectTheHome(Tensor* t, int first) {
  const int block = t->cpu_block(), channels = t->channels();
  const int spatial = t->height() * t->width();
  float* view = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) view[i] = static_cast<float>(i + first);
  float* grad = t->mutable_cpu_diff();
  for (int i = 0; i < t->count(); ++i) grad[i] = static_cast<float>(-i - first);
  const float* home = t->cpu_home_data();
  const float* home_diff = t->cpu_home_diff();
  for (int n = 0; n < t->num(); ++n) {
    for (int c = 0; c < channels; ++c) {
      for (int i = 0; i < spatial; ++i) {
        const size_t at = BlockedIndex(channels, spatial, block, n, c, i);
        const float expected = static_cast<float>((n * channels + c) * spatial + i + first);
        ASSERT_EQ(home[at], expected) << "n " << n << " c " << c << " i " << i;
        ASSERT_EQ(home_diff[at], -expected) << "n " << n << " c " << c << " i " << i;
      }
    }
  }
}

class TensorBlocks : public ::testing::TestWithParam<int> {};

TEST_P(TensorBlocks, NchwViewsAndTheBlockedHomeHoldTheSameValues) {
  const int block = GetParam();
  const int num = 2, channels = 2 * block, height = 3, width = 5, spatial = height * width;
  Tensor t({num, channels, height, width});
  t.set_cpu_block(block);
  ASSERT_EQ(t.cpu_block(), block);
  // Written through the views: the home holds the same values in blocks.
  WriteViewsAndExpectTheHome(&t, 0);
  // Written through the home: the views follow.
  float* mutable_home = t.mutable_cpu_home_data();
  for (int n = 0; n < num; ++n) {
    for (int c = 0; c < channels; ++c) {
      for (int i = 0; i < spatial; ++i) {
        mutable_home[BlockedIndex(channels, spatial, block, n, c, i)] =
            static_cast<float>(1000 * n + 10 * c + i);
      }
    }
  }
  EXPECT_EQ(t.data_at(1, block + 1, 2, 3), 1000.0f + 10 * (block + 1) + 13);
  EXPECT_EQ(t.data_at(0, 0, 0, 1), 1.0f);
  EXPECT_EQ(t.asum_diff(), static_cast<float>(t.count() * (t.count() - 1) / 2));
  // Another batch size keeps the blocks; a shape without whole blocks drops them.
  t.Reshape({1, channels, height, width});
  EXPECT_EQ(t.cpu_block(), block);
  t.Reshape({num, channels * spatial});
  EXPECT_EQ(t.cpu_block(), 0);
}

INSTANTIATE_TEST_SUITE_P(Blocks, TensorBlocks, ::testing::Values(8, 16));

TEST_P(TensorBlocks, ChannelsThatFillTheLastBlockInPartArePaddedWithZeros) {
  const int block = GetParam();
  const int num = 2, channels = block + 3, spatial = 4 * 3;
  Tensor t({num, channels, 4, 3});
  t.set_cpu_block(block);
  ASSERT_TRUE(t.cpu_block_padded());
  EXPECT_EQ(t.home_count(), num * 2 * block * spatial);
  EXPECT_EQ(t.home_bytes(), sizeof(float) * t.home_count());
  EXPECT_FALSE(SameCpuBlocks({&t}));  // element-wise passes take the NCHW views
  // Garbage in the whole home first: writing through the views leaves zeros in the padding.
  std::fill_n(t.mutable_cpu_home_data(), t.home_count(), std::numeric_limits<float>::quiet_NaN());
  std::fill_n(t.mutable_cpu_home_diff(), t.home_count(), -1.0f);
  WriteViewsAndExpectTheHome(&t, 1);
  ExpectZeroPadding(&t, "written through the views");
  // Written through the home: the views follow.
  t.mutable_cpu_home_data()[BlockedIndex(channels, spatial, block, 1, block + 2, 5)] = -7.0f;
  EXPECT_EQ(t.data_at(1, block + 2, 1, 2), -7.0f);
  EXPECT_EQ(t.data_at(1, block + 1, 1, 2), static_cast<float>((channels + block + 1) * 12 + 6));
  // Another batch size keeps the padded blocks (and a home large enough for them).
  t.Reshape({3, channels, 4, 3});
  EXPECT_EQ(t.cpu_block(), block);
  EXPECT_EQ(t.home_count(), 3 * 2 * block * spatial);
  // A tensor with whole blocks does not become padded by a reshape: it drops the blocks.
  Tensor whole({2, 2 * block, 3, 3});
  whole.set_cpu_block(block);
  whole.Reshape({2, block + 1, 3, 3});
  EXPECT_EQ(whole.cpu_block(), 0);
}

TEST(TensorBlocksTest, ShapesThatCannotBeBlockedAreRefused) {
  Tensor t({2, 12, 3, 3});
  EXPECT_THROW(t.set_cpu_block(5), Error);  // not a block oneDNN uses
  Tensor flat({2, 16});
  EXPECT_THROW(flat.set_cpu_block(16), Error);  // not 4-D
  t.set_cpu_block(0);
  EXPECT_EQ(t.cpu_block(), 0);
}

// Runs `layer_text` forward and backward on NCHW tensors and on tensors kept in blocks of
// `block`, from the same values, and expects the same bits in the top, the bottom's gradient
// and the parameters' gradients.
void ExpectLayerSameInBlocks(const std::string& layer_text, std::vector<int> bottom_shape,
                             int block, bool bottom_blocked = true, bool top_blocked = true) {
  SCOPED_TRACE(::testing::Message() << "bottom " << (bottom_blocked ? "in blocks" : "NCHW")
                                    << ", top " << (top_blocked ? "in blocks" : "NCHW"));
  Context ctx(Device::Cpu(), 1701);
  Rng rng(99);
  Tensor plain_in(bottom_shape), blocked_in(bottom_shape), plain_top, blocked_top;
  math::RngGaussian(plain_in.count(), 0.0f, 1.0f, rng, plain_in.mutable_cpu_data());
  if (bottom_blocked) blocked_in.set_cpu_block(block);
  std::memcpy(blocked_in.mutable_cpu_data(), plain_in.cpu_data(), sizeof(float) * plain_in.count());
  auto plain = CreateLayer(testing::LayerParam(layer_text), &ctx);
  auto blocked = CreateLayer(testing::LayerParam(layer_text), &ctx);
  plain->Initialize({&plain_in}, {&plain_top});
  blocked->Initialize({&blocked_in}, {&blocked_top});
  if (top_blocked) blocked_top.set_cpu_block(block);
  // Garbage where the passes write: padded lanes must come out zero.
  if (blocked_top.cpu_block_padded()) {
    std::fill_n(blocked_top.mutable_cpu_home_data(), blocked_top.home_count(),
                std::numeric_limits<float>::quiet_NaN());
  }
  // Every pass tested here writes the whole bottom diff (none accumulates into it).
  std::fill_n(blocked_in.mutable_cpu_home_diff(), blocked_in.home_count(),
              std::numeric_limits<float>::quiet_NaN());
  for (size_t p = 0; p < plain->blobs().size(); ++p) {
    blocked->blobs()[p]->CopyFrom(*plain->blobs()[p]);
  }
  plain->Forward({&plain_in}, {&plain_top});
  blocked->Forward({&blocked_in}, {&blocked_top});
  ExpectSameBits(plain_top.cpu_data(), blocked_top.cpu_data(), plain_top.count(), "top");
  for (size_t p = 0; p < plain->blobs().size(); ++p) {  // BatchNorm's running statistics
    ExpectSameBits(plain->blobs()[p]->cpu_data(), blocked->blobs()[p]->cpu_data(),
                   plain->blobs()[p]->count(), "blob " + std::to_string(p));
  }
  math::RngGaussian(plain_top.count(), 0.0f, 1.0f, rng, plain_top.mutable_cpu_diff());
  std::memcpy(blocked_top.mutable_cpu_diff(), plain_top.cpu_diff(),
              sizeof(float) * plain_top.count());
  plain->Backward({&plain_top}, {true}, {&plain_in});
  blocked->Backward({&blocked_top}, {true}, {&blocked_in});
  ExpectSameBits(plain_in.cpu_diff(), blocked_in.cpu_diff(), plain_in.count(), "bottom diff");
  ExpectZeroPadding(&blocked_top, "top");
  ExpectZeroPadding(&blocked_in, "bottom");
  for (size_t p = 0; p < plain->blobs().size(); ++p) {
    ExpectSameBits(plain->blobs()[p]->cpu_diff(), blocked->blobs()[p]->cpu_diff(),
                   plain->blobs()[p]->count(), "param " + std::to_string(p) + " diff");
  }
}

class LayerBlocks : public ::testing::TestWithParam<int> {};

TEST_P(LayerBlocks, ConvolutionComputesTheSameBits) {
  if (math::CpuChannelBlock() == 0) GTEST_SKIP() << "no oneDNN convolutions in this build";
  ExpectLayerSameInBlocks(R"(name: "conv" type: "Convolution" convolution_param {
      num_output: 32 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 }
      bias_filler { type: "gaussian" std: 0.1 } })",
                          {2, 16, 7, 9}, GetParam());
  // Depthwise, strided.
  ExpectLayerSameInBlocks(R"(name: "dw" type: "Convolution" convolution_param {
      num_output: 16 group: 16 kernel_size: 3 pad: 1 stride: 2 bias_term: false
      weight_filler { type: "gaussian" std: 0.3 } })",
                          {2, 16, 9, 8}, GetParam());
  // LeNet's channels, 20 in and 50 out: padded last blocks on both sides, and each alone.
  for (const auto& [bottom, top] : {std::pair{true, true}, {true, false}, {false, true}}) {
    ExpectLayerSameInBlocks(R"(name: "conv" type: "Convolution" convolution_param {
        num_output: 50 kernel_size: 5 weight_filler { type: "gaussian" std: 0.1 }
        bias_filler { type: "gaussian" std: 0.1 } })",
                            {3, 20, 12, 12}, GetParam(), bottom, top);
  }
}

TEST_P(LayerBlocks, BatchNormComputesTheSameBits) {
  // 70 values per channel and image: whole blocks of LaneSum's 64 and a tail.
  ExpectLayerSameInBlocks(R"(name: "bn" type: "BatchNorm")", {3, 32, 7, 10}, GetParam());
  ExpectLayerSameInBlocks(R"(name: "bn" type: "BatchNorm" batch_norm_param {
      use_global_stats: false eps: 0.001 })",
                          {2, 16, 1, 3}, GetParam());
}

TEST_P(LayerBlocks, PoolingComputesTheSameBits) {
  // Windows that overlap, padding, Caffe's ceil (a last window cut by the edge), a global one;
  // each with the bottom and the top in blocks, and each side alone.
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"pool: MAX kernel_size: 3 stride: 2 pad: 1", {2, 16, 9, 8}},
      {"pool: MAX kernel_size: 2 stride: 2", {3, 32, 7, 7}},
      // Windows that tile the plane but for a remainder (rounding down).
      {"pool: MAX kernel_size: 2 stride: 2 round_mode: FLOOR", {2, 16, 7, 6}},
      {"pool: AVE kernel_size: 3 stride: 2 pad: 1", {2, 16, 9, 8}},
      {"pool: AVE kernel_size: 3 stride: 1", {2, 16, 6, 7}},
      {"pool: AVE global_pooling: true", {2, 32, 7, 7}},
      {"pool: MAX global_pooling: true", {2, 16, 3, 5}},
      // Channels that end in a padded block (LeNet's 20 and 50).
      {"pool: MAX kernel_size: 2 stride: 2", {3, 20, 8, 8}},
      {"pool: MAX kernel_size: 3 stride: 2 pad: 1", {2, 50, 7, 6}},
      {"pool: AVE kernel_size: 3 stride: 2 pad: 1", {2, 20, 9, 8}}};
  for (const auto& [params, shape] : cases) {
    SCOPED_TRACE(params);
    const std::string layer = R"(name: "pool" type: "Pooling" pooling_param { )" + params + " }";
    for (const auto& [bottom, top] : {std::pair{true, true}, {true, false}, {false, true}}) {
      ExpectLayerSameInBlocks(layer, shape, GetParam(), bottom, top);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, LayerBlocks, ::testing::Values(8, 16));

// A small net with what ResNet-50 and MobileNet v1 have between their convolutions.
caffe::NetParameter BlockNet(const std::string& phase) {
  std::string text = R"(
    name: "blocks" force_backward: true
    state { phase: )" +
                     phase + R"( }
    layer { name: "in" type: "Input" top: "x" top: "label"
            input_param { shape { dim: 2 dim: 3 dim: 12 dim: 12 } shape { dim: 2 } } }
  )";
  auto conv = [&text](const std::string& name, const std::string& bottom, int out, int kernel,
                      int group, int stride) {
    text += "layer { name: '" + name + "' type: 'Convolution' bottom: '" + bottom + "' top: '" +
            name + "' convolution_param { num_output: " + std::to_string(out) +
            " kernel_size: " + std::to_string(kernel) + " pad: " + std::to_string(kernel / 2) +
            " group: " + std::to_string(group) + " stride: " + std::to_string(stride) +
            " bias_term: false weight_filler { type: 'msra' } } }\n";
  };
  auto bn = [&text](const std::string& blob, bool relu) {
    text += "layer { name: '" + blob + "_bn' type: 'BatchNorm' bottom: '" + blob + "' top: '" +
            blob + "' }\n";
    text += "layer { name: '" + blob + "_scale' type: 'Scale' bottom: '" + blob + "' top: '" +
            blob +
            "' scale_param { bias_term: true filler { type: 'uniform' min: 0.5 max: 1.5 } "
            "bias_filler { type: 'uniform' min: -0.5 max: 0.5 } } }\n";
    if (relu) {
      text += "layer { name: '" + blob + "_relu' type: 'ReLU' bottom: '" + blob + "' top: '" +
              blob + "' }\n";
    }
  };
  conv("conv1", "x", 16, 3, 1, 1);
  bn("conv1", true);
  conv("dw", "conv1", 16, 3, 16, 1);
  bn("dw", true);
  conv("pw", "dw", 32, 1, 1, 1);
  bn("pw", true);
  // A residual block: two branches, their sum, its ReLU.
  conv("branch1", "pw", 32, 1, 1, 1);
  bn("branch1", false);
  conv("branch2a", "pw", 16, 1, 1, 1);
  bn("branch2a", true);
  conv("branch2b", "branch2a", 32, 3, 1, 1);
  bn("branch2b", false);
  text += R"(
    layer { name: "sum" type: "Eltwise" bottom: "branch1" bottom: "branch2b" top: "sum" }
    layer { name: "sum_relu" type: "ReLU" bottom: "sum" top: "sum" }
    layer { name: "pool" type: "Pooling" bottom: "sum" top: "pool"
            pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
  )";
  conv("conv2", "pool", 32, 3, 1, 2);
  bn("conv2", true);
  text += R"(
    layer { name: "gap" type: "Pooling" bottom: "conv2" top: "gap"
            pooling_param { pool: AVE global_pooling: true } }
    layer { name: "fc" type: "InnerProduct" bottom: "gap" top: "fc"
            inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
  )";
  caffe::NetParameter param;
  io::ReadProtoFromTextString(text, "<blocks>", &param);
  return param;
}

enum class Plan { kNone, kTraining };

// Two steps (the running statistics accumulate) of the same net with and without blocks, from
// the same weights and inputs: the same loss, parameter gradients, input gradient, and (without
// the memory plan, which reuses buffers) every blob's values.
// `param`'s input blob is "x", its labels "label" (5 classes); `expect_layouts` checks which
// blobs the blocked net keeps in blocks.
template <typename ExpectLayouts>
void ExpectSameWithAndWithoutBlocks(const caffe::NetParameter& param, const std::string& phase,
                                    Plan plan, ExpectLayouts expect_layouts) {
  Context ctx(Device::Cpu(), 1701);
  NetOptions plain_options, blocked_options;
  plain_options.cpu_blocks = false;
  Net plain(param, &ctx, plain_options), blocked(param, &ctx, blocked_options);
  EXPECT_EQ(plain.num_blocked_blobs(), 0);
  expect_layouts(blocked);
  if (plan == Plan::kTraining) {
    EXPECT_GT(plain.ShareTrainingBuffers(), 0u);
    EXPECT_GT(blocked.ShareTrainingBuffers(), 0u);
  }
  Rng rng(7);
  for (size_t p = 0; p < plain.learnable_params().size(); ++p) {
    blocked.learnable_params()[p]->CopyFrom(*plain.learnable_params()[p]);
  }
  for (int step = 0; step < 2; ++step) {
    Tensor* x = plain.blob_by_name("x");
    math::RngGaussian(x->count(), 0.0f, 1.0f, rng, x->mutable_cpu_data());
    float* label = plain.blob_by_name("label")->mutable_cpu_data();
    for (int n = 0; n < 2; ++n) label[n] = static_cast<float>((step + 3 * n) % 5);
    blocked.blob_by_name("x")->CopyFrom(*x);
    blocked.blob_by_name("label")->CopyFrom(*plain.blob_by_name("label"));
    const float plain_loss = plain.ForwardBackward();
    const float blocked_loss = blocked.ForwardBackward();
    const std::string at = " (" + phase + ", step " + std::to_string(step) + ")";
    ExpectSameBits(&plain_loss, &blocked_loss, 1, "loss" + at);
    for (size_t p = 0; p < plain.learnable_params().size(); ++p) {
      const Tensor& e = *plain.learnable_params()[p];
      ExpectSameBits(e.cpu_diff(), blocked.learnable_params()[p]->cpu_diff(), e.count(),
                     "parameter " + std::to_string(p) + " diff" + at);
    }
    ExpectSameBits(plain.blob_by_name("x")->cpu_diff(), blocked.blob_by_name("x")->cpu_diff(),
                   x->count(), "input diff" + at);
    if (plan == Plan::kNone) {
      for (size_t b = 0; b < plain.blobs().size(); ++b) {
        const Tensor& e = *plain.blobs()[b];
        ExpectSameBits(e.cpu_data(), blocked.blobs()[b]->cpu_data(), e.count(),
                       "blob '" + plain.blob_names()[b] + "'" + at);
      }
    }
    for (size_t l = 0; l < plain.layers().size(); ++l) {  // BatchNorm's running statistics
      const auto& e = plain.layers()[l]->blobs();
      const auto& a = blocked.layers()[l]->blobs();
      for (size_t k = 0; k < e.size(); ++k) {
        ExpectSameBits(e[k]->cpu_data(), a[k]->cpu_data(), e[k]->count(),
                       plain.layer_names()[l] + " blob " + std::to_string(k) + at);
      }
    }
  }
}

void ExpectBlockNetLayouts(const Net& blocked) {
  // conv1, dw, pw, branch2a and conv2 with their chains, and the two branches' outputs.
  EXPECT_GE(blocked.num_blocked_blobs(), 6);
  EXPECT_EQ(blocked.blob_by_name("x")->cpu_block(), 0);  // 3 channels, the Input's top
  EXPECT_EQ(blocked.blob_by_name("pw")->cpu_block(), math::CpuChannelBlock());
  EXPECT_EQ(blocked.blob_by_name("gap")->cpu_block(), 0);  // 1x1: global pooling's top
  // Pooling reads and writes blocks: the sum before it and its output stay blocked, and so does
  // conv2's output, which the global pooling reads.
  EXPECT_EQ(blocked.blob_by_name("sum")->cpu_block(), math::CpuChannelBlock());
  EXPECT_EQ(blocked.blob_by_name("pool")->cpu_block(), math::CpuChannelBlock());
  EXPECT_EQ(blocked.blob_by_name("conv2")->cpu_block(), math::CpuChannelBlock());
}

TEST(NetBlocksTest, TrainingNetComputesTheSameBitsInBlocks) {
  if (math::CpuChannelBlock() == 0) GTEST_SKIP() << "no oneDNN convolutions in this build";
  ExpectSameWithAndWithoutBlocks(BlockNet("TRAIN"), "TRAIN", Plan::kNone, ExpectBlockNetLayouts);
}

TEST(NetBlocksTest, TrainingNetWithTheMemoryPlanComputesTheSameBitsInBlocks) {
  if (math::CpuChannelBlock() == 0) GTEST_SKIP() << "no oneDNN convolutions in this build";
  ExpectSameWithAndWithoutBlocks(BlockNet("TRAIN"), "TRAIN", Plan::kTraining,
                                 ExpectBlockNetLayouts);
}

TEST(NetBlocksTest, TestNetComputesTheSameBitsInBlocks) {
  if (math::CpuChannelBlock() == 0) GTEST_SKIP() << "no oneDNN convolutions in this build";
  ExpectSameWithAndWithoutBlocks(BlockNet("TEST"), "TEST", Plan::kNone, ExpectBlockNetLayouts);
}

// LeNet's layers (20 and 50 channels: padded last blocks), the classifier after a ReLU.
caffe::NetParameter LeNetBlocks() {
  caffe::NetParameter param;
  io::ReadProtoFromTextString(R"(
    name: "lenet" force_backward: true
    layer { name: "in" type: "Input" top: "x" top: "label"
            input_param { shape { dim: 4 dim: 1 dim: 28 dim: 28 } shape { dim: 4 } } }
    layer { name: "conv1" type: "Convolution" bottom: "x" top: "conv1"
            convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" }
                                bias_filler { type: "gaussian" std: 0.1 } } }
    layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
            pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
    layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
            convolution_param { num_output: 50 kernel_size: 5 weight_filler { type: "xavier" }
                                bias_filler { type: "gaussian" std: 0.1 } } }
    layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
            pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
    layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
            inner_product_param { num_output: 30 weight_filler { type: "xavier" } } }
    layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
    layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
            inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
  )",
                              "<lenet>", &param);
  return param;
}

void ExpectLeNetLayouts(const Net& blocked) {
  // The convolutions' outputs and the first pooling's, read only by convolutions and pooling,
  // in padded blocks; the second pooling's output, read by an InnerProduct, in NCHW.
  for (const char* blob : {"conv1", "pool1", "conv2"}) {
    EXPECT_EQ(blocked.blob_by_name(blob)->cpu_block(), math::CpuChannelBlock()) << blob;
    EXPECT_TRUE(blocked.blob_by_name(blob)->cpu_block_padded()) << blob;
  }
  EXPECT_EQ(blocked.blob_by_name("pool2")->cpu_block(), 0);
  EXPECT_EQ(blocked.blob_by_name("x")->cpu_block(), 0);
}

TEST(NetBlocksTest, LeNetComputesTheSameBitsInPaddedBlocks) {
  if (math::CpuChannelBlock() == 0) GTEST_SKIP() << "no oneDNN convolutions in this build";
  ExpectSameWithAndWithoutBlocks(LeNetBlocks(), "TRAIN", Plan::kNone, ExpectLeNetLayouts);
  // Buffers shared with other blobs: the padded lanes must not carry their values.
  ExpectSameWithAndWithoutBlocks(LeNetBlocks(), "TRAIN", Plan::kTraining, ExpectLeNetLayouts);
}

}  // namespace
}  // namespace cortado
