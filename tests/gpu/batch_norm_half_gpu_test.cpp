// SPDX-License-Identifier: Apache-2.0
// BatchNorm's GPU passes in float16 and bfloat16 (Layer::HalfTensors): x, the top, dy, dx and the
// kept x_norm in the 16-bit type, the arithmetic in float32. Against the same layer on the CPU in
// float32, given inputs and top diffs that the 16-bit type holds exactly (so what differs is the
// layer's own rounding): the top and the bottom diff within four units of the type's rounding, the
// running statistics (float32 on both sides) within float32's. With the GPU tensors kept in
// float32 (the layer works on their 16-bit twins) and kept in the 16-bit type; out of place and in
// place; batch and stored statistics; spatial sizes that take 4 values at a time and that do not;
// fused with a Scale (and a ReLU). RecomputeTops gives Forward's top bit for bit. Each test skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/half_type.hpp"
#include "core/tensor.hpp"
#include "layers/batch_norm_layer.hpp"
#include "layers/scale_layer.hpp"
#include "math/half_host.hpp"
#include "support/gpu_check.hpp"
#include "support/scoped_env.hpp"

namespace cortado::testing {
namespace {

// Half the distance from 1 to the next value: 2^-11 for float16, 2^-8 for bfloat16.
float UnitRoundoff(HalfType type) {
  return std::ldexp(1.0f, type == HalfType::kFloat16 ? -11 : -8);
}
// Four units: float16 about 2e-3, bfloat16 about 1.6e-2.
float Tolerance(HalfType type) { return 4.0f * UnitRoundoff(type); }

float Rounded(HalfType type, float v) {
  return type == HalfType::kFloat16 ? math::Float16ToFloat(math::FloatToFloat16(v))
                                    : math::BFloat16ToFloat(math::FloatToBFloat16(v));
}

// Gaussian (mean 0.5, std 2) values snapped to multiples of 1/8 in [-15, 15]: both 16-bit types
// hold them exactly, and a ReLU threshold between two of them (an odd multiple of 1/16, see
// FusedAffine) is at least 1/16 from every one.
std::vector<float> Inputs(int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gaussian(0.5f, 2.0f);
  std::vector<float> v(count);
  for (float& x : v) x = std::clamp(std::round(gaussian(rng) * 8.0f), -120.0f, 120.0f) / 8.0f;
  return v;
}

// Uniform in [-1, 1], rounded to `type`.
std::vector<float> TopDiffs(HalfType type, int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = Rounded(type, uniform(rng));
  return v;
}

void Write(const std::vector<float>& values, float* out) {
  std::copy(values.begin(), values.end(), out);
}

// The 16-bit values of a tensor's data (its home or its twin), for comparing bits.
std::vector<uint16_t> HalfValues(const Tensor& t, HalfType type) {
  const auto* p = static_cast<const uint16_t*>(t.cpu_half_data(type));
  return std::vector<uint16_t>(p, p + t.count());
}

struct Case {
  std::vector<int> shape;
  bool global_stats = false;
  bool in_place = false;
  // The GPU bottom and top kept in the 16-bit type; else in float32, through their twins.
  bool half_home = false;
  // A Scale with bias fused into the BatchNorm, and a ReLU of slope relu_slope after it.
  bool fused = false;
  bool relu = false;
  float relu_slope = 0.0f;
  // The GPU bottom and top (16-bit homes) kept channels-last (Tensor::home_nhwc).
  bool nhwc = false;
};

std::string Describe(const Case& c) {
  std::string s = ::testing::PrintToString(c.shape);
  s += c.global_stats ? " stored statistics" : " batch statistics";
  s += c.in_place ? ", in place" : ", separate top";
  s += c.half_home ? (c.nhwc ? ", 16-bit NHWC tensors" : ", 16-bit tensors") : ", float32 tensors";
  if (c.fused)
    s += c.relu ? ", Scale + ReLU " + std::to_string(c.relu_slope) + " fused" : ", Scale fused";
  return s;
}

std::string BatchNormText(bool global_stats) {
  return std::string(
             "name: 'bn' type: 'BatchNorm' batch_norm_param { moving_average_fraction: "
             "0.9 use_global_stats: ") +
         (global_stats ? "true" : "false") + " }";
}

// One side (CPU or GPU) of a comparison: the layers and tensors on one context.
struct Side {
  Tensor bottom, top_store;
  Tensor* top = nullptr;
  std::unique_ptr<Layer> bn, scale;
};

// The per-channel mean and std (sqrt(var + eps)) the layer will use: of the batch (population
// variance), or from the stored statistics.
void ChannelStatistics(const Case& c, const std::vector<float>& x, Layer& cpu_bn,
                       std::vector<double>* mean, std::vector<double>* sd) {
  const int num = c.shape[0], channels = c.shape[1];
  const int spatial = static_cast<int>(x.size()) / (num * channels);
  mean->assign(channels, 0.0);
  sd->assign(channels, 0.0);
  auto& blobs = cpu_bn.blobs();
  for (int ch = 0; ch < channels; ++ch) {
    double mu = 0.0, var = 0.0;
    if (c.global_stats) {
      const double norm = blobs[2]->cpu_data()[0];
      mu = blobs[0]->cpu_data()[ch] / norm;
      var = blobs[1]->cpu_data()[ch] / norm;
    } else {
      for (int n = 0; n < num; ++n) {
        for (int i = 0; i < spatial; ++i) mu += x[(n * channels + ch) * spatial + i];
      }
      mu /= num * spatial;
      for (int n = 0; n < num; ++n) {
        for (int i = 0; i < spatial; ++i) {
          const double d = x[(n * channels + ch) * spatial + i] - mu;
          var += d * d;
        }
      }
      var /= num * spatial;
    }
    (*mean)[ch] = mu;
    (*sd)[ch] = std::sqrt(var + 1e-5);
  }
}

// Scale s in [0.5, 1.5] and a bias that puts the ReLU's threshold (x_norm * s + b = 0) at an odd
// multiple of 1/16 in x near the channel's centre: no input lies within 1/16 of it, so rounding
// x_norm to 16 bits (error at most 2^-8 * 0.6 there) cannot move a value across it, and the
// ReLU's mask is the CPU's.
void FusedAffine(const std::vector<double>& mean, const std::vector<double>& sd, unsigned seed,
                 Tensor* scale, Tensor* bias) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-0.5, 0.5);
  for (size_t ch = 0; ch < mean.size(); ++ch) {
    const double s = 1.0 + uniform(rng);
    const double threshold = (std::floor((mean[ch] + sd[ch] * uniform(rng)) * 8.0) + 0.5) / 8.0;
    scale->mutable_cpu_data()[ch] = static_cast<float>(s);
    bias->mutable_cpu_data()[ch] = static_cast<float>(-s * (threshold - mean[ch]) / sd[ch]);
  }
}

// Builds both sides, runs Forward on each and compares them; then, unless forward_only, Backward.
void RunCase(HalfType type, const Case& c, unsigned seed, bool forward_only = false) {
  SCOPED_TRACE(Describe(c));
  ScopedEnv half_tensors("CORTADO_HALF_TENSORS", "1");
  Context cpu_ctx(Device::Cpu(), 1701);
  Context gpu_ctx(Device::Cuda(0), 1701);
  gpu_ctx.MakeCurrent();
  gpu_ctx.set_half_compute(type);
  const float tolerance = Tolerance(type);
  Side cpu, gpu;
  if (c.half_home) {
    gpu.bottom.set_home_type(type);
    gpu.top_store.set_home_type(type);
  }
  for (Side* side : {&cpu, &gpu}) {
    side->bottom.Reshape(c.shape);
    side->top = c.in_place ? &side->bottom : &side->top_store;
  }
  if (c.nhwc) {
    gpu.bottom.set_home_nhwc(true);
    gpu.top_store.Reshape(c.shape);
    gpu.top_store.set_home_nhwc(true);
  }
  const int count = cpu.bottom.count();
  const std::vector<float> x = Inputs(count, seed);
  Write(x, cpu.bottom.mutable_cpu_data());
  Write(x, gpu.bottom.mutable_cpu_data());

  const caffe::LayerParameter bn_param = LayerParam(BatchNormText(c.global_stats));
  cpu.bn = CreateLayer(bn_param, &cpu_ctx);
  gpu.bn = CreateLayer(bn_param, &gpu_ctx);
  ASSERT_EQ(gpu.bn->HalfTensors(), type);
  ASSERT_EQ(cpu.bn->HalfTensors(), HalfType::kNone);
  cpu.bn->Initialize({&cpu.bottom}, {cpu.top});
  gpu.bn->Initialize({&gpu.bottom}, {gpu.top});
  if (c.global_stats) {  // stored statistics: means in [-1, 1], variances in [0.5, 4], norm 2
    std::mt19937 rng(seed + 1);
    std::uniform_real_distribution<float> means(-1.0f, 1.0f), variances(0.5f, 4.0f);
    auto& blobs = cpu.bn->blobs();
    for (int ch = 0; ch < c.shape[1]; ++ch) {
      blobs[0]->mutable_cpu_data()[ch] = 2.0f * means(rng);
      blobs[1]->mutable_cpu_data()[ch] = 2.0f * variances(rng);
    }
    blobs[2]->mutable_cpu_data()[0] = 2.0f;
  }
  for (size_t i = 0; i < cpu.bn->blobs().size(); ++i) {
    gpu.bn->blobs()[i]->CopyFrom(*cpu.bn->blobs()[i]);
  }
  std::vector<double> mean, sd;
  ChannelStatistics(c, x, *cpu.bn, &mean, &sd);
  if (c.fused) {
    const caffe::LayerParameter scale_param =
        LayerParam("name: 'scale' type: 'Scale' scale_param { bias_term: true }");
    cpu.scale = CreateLayer(scale_param, &cpu_ctx);
    gpu.scale = CreateLayer(scale_param, &gpu_ctx);
    cpu.scale->Initialize({cpu.top}, {cpu.top});
    gpu.scale->Initialize({gpu.top}, {gpu.top});
    FusedAffine(mean, sd, seed + 2, cpu.scale->blobs()[0].get(), cpu.scale->blobs()[1].get());
    for (Side* side : {&cpu, &gpu}) {
      for (size_t i = 0; i < 2; ++i) side->scale->blobs()[i]->CopyFrom(*cpu.scale->blobs()[i]);
      auto* bn = dynamic_cast<BatchNormLayer*>(side->bn.get());
      auto* scale = dynamic_cast<ScaleLayer*>(side->scale.get());
      ASSERT_NE(bn, nullptr);
      ASSERT_NE(scale, nullptr);
      bn->FuseScale(scale, /*scale_backward=*/true, c.relu, c.relu_slope);
    }
  }
  if (forward_only) {
    for (Side* side : {&cpu, &gpu}) dynamic_cast<BatchNormLayer&>(*side->bn).DropBackwardState();
  }

  cpu.bn->Forward({&cpu.bottom}, {cpu.top});
  gpu.bn->Forward({&gpu.bottom}, {gpu.top});
  ASSERT_EQ(gpu.top->home_type(), c.half_home ? type : HalfType::kNone);
  ASSERT_EQ(gpu.top->home_nhwc(), c.nhwc);
  detail::ExpectClose(cpu.top->cpu_data(), gpu.top->cpu_data(), count, tolerance, "top");
  for (size_t i = 0; i < cpu.bn->blobs().size(); ++i) {
    detail::ExpectClose(cpu.bn->blobs()[i]->cpu_data(), gpu.bn->blobs()[i]->cpu_data(),
                        cpu.bn->blobs()[i]->count(), 1e-4f, "statistics blob " + std::to_string(i));
  }
  if (forward_only) return;

  const std::vector<float> dy = TopDiffs(type, count, seed + 3);
  Write(dy, cpu.top->mutable_cpu_diff());
  Write(dy, gpu.top->mutable_cpu_diff());
  for (Side* side : {&cpu, &gpu}) {
    if (side->scale == nullptr) continue;
    for (auto& blob : side->scale->blobs()) {
      std::fill_n(blob->mutable_cpu_diff(), blob->count(), 0.0f);
    }
  }
  cpu.bn->Backward({cpu.top}, {true}, {&cpu.bottom});
  gpu.bn->Backward({gpu.top}, {true}, {&gpu.bottom});
  detail::ExpectClose(cpu.bottom.cpu_diff(), gpu.bottom.cpu_diff(), count, tolerance,
                      "bottom diff");
  if (!c.fused) return;
  // The Scale's diffs are float32 sums over a channel's values: the bias's, sum(g), of the same
  // masked g on both sides; the scale's, sum(g * x_norm), with x_norm rounded on the GPU, each
  // term by at most the unit roundoff.
  const int num = c.shape[0], channels = c.shape[1], spatial = count / (num * channels);
  const float* cpu_ds = cpu.scale->blobs()[0]->cpu_diff();
  const float* gpu_ds = gpu.scale->blobs()[0]->cpu_diff();
  detail::ExpectClose(cpu.scale->blobs()[1]->cpu_diff(), gpu.scale->blobs()[1]->cpu_diff(),
                      channels, 1e-4f, "bias diff");
  for (int ch = 0; ch < channels; ++ch) {
    double bound = 0.0;
    for (int n = 0; n < num; ++n) {
      for (int i = 0; i < spatial; ++i) {
        const int at = (n * channels + ch) * spatial + i;
        bound += std::fabs(dy[at] * (x[at] - mean[ch]) / sd[ch]);
      }
    }
    bound = 1e-4 * std::max(1.0, std::fabs(static_cast<double>(cpu_ds[ch]))) +
            1.5 * UnitRoundoff(type) * bound;
    EXPECT_LE(std::fabs(static_cast<double>(cpu_ds[ch]) - gpu_ds[ch]), bound)
        << "scale diff, channel " << ch << ": CPU " << cpu_ds[ch] << ", GPU " << gpu_ds[ch];
  }
}

class BatchNormHalfGpuTest : public ::testing::TestWithParam<HalfType> {};

// 64 values per plane take the 8-at-a-time path (16-byte accesses), 20 the 4-at-a-time one, 35
// the one-at-a-time one.
const std::vector<std::vector<int>> kShapes = {{2, 3, 5, 4}, {4, 16, 8, 8}, {3, 5, 7, 5}};

TEST_P(BatchNormHalfGpuTest, BatchStatisticsMatchCpu) {
  CORTADO_REQUIRE_GPU();
  unsigned seed = 10;
  for (const auto& shape : kShapes) {
    for (bool half_home : {false, true}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.shape = shape;
        c.half_home = half_home;
        c.in_place = in_place;
        RunCase(GetParam(), c, seed += 10);
      }
    }
  }
}

TEST_P(BatchNormHalfGpuTest, StoredStatisticsMatchCpu) {
  CORTADO_REQUIRE_GPU();
  unsigned seed = 210;
  for (const auto& shape : kShapes) {
    for (bool half_home : {false, true}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.shape = shape;
        c.global_stats = true;
        c.half_home = half_home;
        c.in_place = in_place;
        RunCase(GetParam(), c, seed += 10);
      }
    }
  }
}

// In place, as a Net fuses them: Scale alone, with a ReLU, with a leaky ReLU; both statistics.
TEST_P(BatchNormHalfGpuTest, FusedScaleAndReluMatchCpu) {
  CORTADO_REQUIRE_GPU();
  unsigned seed = 410;
  for (const auto& shape : kShapes) {
    for (bool half_home : {false, true}) {
      for (bool global_stats : {false, true}) {
        for (float slope : {-1.0f, 0.0f, 0.1f}) {  // -1: no ReLU
          Case c;
          c.shape = shape;
          c.half_home = half_home;
          c.global_stats = global_stats;
          c.in_place = true;
          c.fused = true;
          c.relu = slope >= 0.0f;
          c.relu_slope = std::max(slope, 0.0f);
          RunCase(GetParam(), c, seed += 10);
        }
      }
    }
  }
}

// Channels-last 16-bit tensors (Tensor::home_nhwc), whose float32 views the comparison reads in
// NCHW: against the CPU as above, on shapes that take each path of the NHWC passes: 8 channels a
// unit with several rows per column of threads (64 and 16 channels), with more than 256 units a
// row (2056 channels), and one channel a unit (3 channels; 300, more than 256 a row). Batch and
// stored statistics, fused Scale and ReLU, in place and not, and without backward state.
TEST_P(BatchNormHalfGpuTest, ChannelsLastTensorsMatchCpu) {
  CORTADO_REQUIRE_GPU();
  unsigned seed = 1010;
  const std::vector<std::vector<int>> shapes = {
      {2, 64, 5, 4}, {4, 16, 8, 8}, {2, 2056, 2, 2}, {2, 3, 5, 4}, {3, 300, 3, 3}};
  for (const auto& shape : shapes) {
    for (bool global_stats : {false, true}) {
      for (int variant = 0; variant < 4; ++variant) {
        Case c;
        c.shape = shape;
        c.half_home = true;
        c.nhwc = true;
        c.global_stats = global_stats;
        c.in_place = variant != 1;
        c.fused = variant >= 2;
        c.relu = variant == 3;
        c.relu_slope = 0.1f;
        RunCase(GetParam(), c, seed += 10);
        if (variant == 3) RunCase(GetParam(), c, seed += 10, /*forward_only=*/true);
      }
    }
  }
}

// Without backward state (DropBackwardState) the normalised values go to the top directly.
TEST_P(BatchNormHalfGpuTest, ForwardWithoutBackwardStateMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  unsigned seed = 610;
  for (const auto& shape : kShapes) {
    for (bool fused : {false, true}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.shape = shape;
        c.half_home = in_place;
        c.in_place = in_place;
        c.fused = fused;
        c.relu = fused;
        RunCase(GetParam(), c, seed += 10, /*forward_only=*/true);
      }
    }
  }
}

// RecomputeTops (the Net's recomputation of a top it let another blob overwrite) writes what
// Forward wrote, bit for bit: the top from the stored (rounded) x_norm, as Forward computes it.
TEST_P(BatchNormHalfGpuTest, RecomputeTopsGivesForwardsTopBitForBit) {
  CORTADO_REQUIRE_GPU();
  const HalfType type = GetParam();
  ScopedEnv half_tensors("CORTADO_HALF_TENSORS", "1");
  unsigned seed = 810;
  for (const auto& shape : kShapes) {
    for (bool fused : {false, true}) {
      for (bool half_home : {false, true}) {
        for (bool in_place : {false, true}) {
          Case c;
          c.shape = shape;
          c.fused = fused;
          c.relu = fused;
          c.relu_slope = 0.1f;
          c.half_home = half_home;
          c.in_place = in_place;
          SCOPED_TRACE(Describe(c));
          seed += 10;
          Context ctx(Device::Cuda(0), 1701);
          ctx.MakeCurrent();
          ctx.set_half_compute(type);
          Tensor bottom, top_store;
          if (half_home) {
            bottom.set_home_type(type);
            top_store.set_home_type(type);
          }
          bottom.Reshape(shape);
          // 16-bit homes in the second of each pair of seeds: channels-last.
          const bool nhwc = half_home && (seed / 10) % 2 == 0;
          if (nhwc) {
            bottom.set_home_nhwc(true);
            top_store.Reshape(shape);
            top_store.set_home_nhwc(true);
          }
          Tensor* top = in_place ? &bottom : &top_store;
          Write(Inputs(bottom.count(), seed), bottom.mutable_cpu_data());
          auto layer = CreateLayer(LayerParam(BatchNormText(false)), &ctx);
          layer->Initialize({&bottom}, {top});
          std::unique_ptr<Layer> scale;
          if (fused) {
            scale = CreateLayer(
                LayerParam("name: 'scale' type: 'Scale' scale_param { bias_term: true }"), &ctx);
            scale->Initialize({top}, {top});
            FillUniform(scale->blobs()[0].get(), 0.5f, 1.5f, seed + 1);
            FillUniform(scale->blobs()[1].get(), -0.5f, 0.5f, seed + 2);
            dynamic_cast<BatchNormLayer&>(*layer).FuseScale(dynamic_cast<ScaleLayer*>(scale.get()),
                                                            true, c.relu, c.relu_slope);
          }
          ASSERT_TRUE(layer->CanRecomputeTops());
          layer->Forward({&bottom}, {top});
          const std::vector<uint16_t> forward = HalfValues(*top, type);
          std::fill_n(top->mutable_cpu_data(), top->count(), 123.0f);
          layer->RecomputeTops({top});
          const std::vector<uint16_t> recomputed = HalfValues(*top, type);
          int mismatches = 0;
          for (int i = 0; i < top->count(); ++i) mismatches += forward[i] != recomputed[i];
          EXPECT_EQ(mismatches, 0) << "of " << top->count();
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BatchNormHalfGpuTest,
                         ::testing::Values(HalfType::kFloat16, HalfType::kBFloat16),
                         [](const auto& p) { return std::string(HalfTypeName(p.param)); });

}  // namespace
}  // namespace cortado::testing
