// SPDX-License-Identifier: Apache-2.0
#include "layers/pooling_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "math/math.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakePool(Context* ctx, const std::string& pooling_param,
                                const std::string& name = "pool") {
  return CreateLayer(testing::LayerParam("name: '" + name + "' type: 'Pooling' pooling_param { " +
                                         pooling_param + " }"),
                     ctx);
}

std::vector<int> TopShape(const std::string& pooling_param, const std::vector<int>& bottom_shape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakePool(&ctx, pooling_param);
  Tensor bottom(bottom_shape), top;
  layer->Initialize({&bottom}, {&top});
  return top.shape();
}

// Distinct values 0.1 apart in shuffled order, so a +-0.01 finite-difference step never
// changes which element is the maximum of a window.
void FillDistinct(Tensor* t, unsigned seed) {
  std::vector<int> order(t->count());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  float* data = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) data[i] = 0.1f * order[i] - 0.05f * t->count();
}

TEST(PoolingLayerTest, ShapesRoundUpAndClip) {
  // ceil((6 - 3) / 2) + 1 = 3 (floor would give 2).
  EXPECT_EQ(TopShape("kernel_size: 3 stride: 2", {2, 3, 6, 6}), (std::vector<int>{2, 3, 3, 3}));
  EXPECT_EQ(TopShape("kernel_size: 3 stride: 2 round_mode: FLOOR", {2, 3, 6, 6}),
            (std::vector<int>{2, 3, 2, 2}));
  // With pad 1: ceil((6 + 2 - 3) / 2) + 1 = 4; the last window starts at 6 - 1 = 5 < 6 + 1.
  EXPECT_EQ(TopShape("kernel_size: 3 stride: 2 pad: 1", {1, 1, 6, 6}),
            (std::vector<int>{1, 1, 4, 4}));
  // ceil((5 + 2 - 2) / 3) + 1 = 3, but the third window would start at padded position
  // 2 * 3 = 6 >= 5 + 1, i.e. in the trailing padding, so it is dropped: 2.
  EXPECT_EQ(TopShape("kernel_size: 2 stride: 3 pad: 1", {1, 1, 5, 5}),
            (std::vector<int>{1, 1, 2, 2}));
  // _h / _w forms.
  EXPECT_EQ(
      TopShape("kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 1 pad_w: 0", {1, 2, 4, 5}),
      (std::vector<int>{1, 2, 4, 3}));
  // Global pooling covers the whole image.
  EXPECT_EQ(TopShape("pool: AVE global_pooling: true", {2, 4, 5, 7}),
            (std::vector<int>{2, 4, 1, 1}));
}

TEST(PoolingLayerTest, MaskTopHasTheOutputShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakePool(&ctx, "pool: MAX kernel_size: 2 stride: 2");
  Tensor bottom(std::vector<int>{2, 3, 4, 5}), top, mask;
  layer->Initialize({&bottom}, {&top, &mask});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 3, 2, 3}));
  EXPECT_EQ(mask.shape(), top.shape());
}

TEST(PoolingLayerTest, MaxForwardBackwardByHand) {
  // x = [1 5 2 0; 3 4 8 6; 7 2 9 1; 0 6 3 5], 2x2 windows, stride 2:
  // maxima 5 (index 1), 8 (index 6), 7 (index 8), 9 (index 10).
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakePool(&ctx, "pool: MAX kernel_size: 2 stride: 2");
  Tensor bottom(std::vector<int>{1, 1, 4, 4}), top, mask;
  const float x[] = {1, 5, 2, 0, 3, 4, 8, 6, 7, 2, 9, 1, 0, 6, 3, 5};
  std::copy(x, x + 16, bottom.mutable_cpu_data());
  layer->Initialize({&bottom}, {&top, &mask});
  layer->Forward({&bottom}, {&top, &mask});
  const float max[] = {5, 8, 7, 9};
  const float index[] = {1, 6, 8, 10};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(top.cpu_data()[i], max[i]) << i;
    EXPECT_EQ(mask.cpu_data()[i], index[i]) << i;
  }
  // Top diffs 10, 20, 30, 40 go to the maxima; every other bottom diff is 0.
  for (int i = 0; i < 4; ++i) top.mutable_cpu_diff()[i] = 10.0f * (i + 1);
  math::Set(bottom.count(), 99.0f, bottom.mutable_cpu_diff());
  layer->Backward({&top, &mask}, {true}, {&bottom});
  for (int i = 0; i < 16; ++i) {
    float expected = 0.0f;
    for (int j = 0; j < 4; ++j) {
      if (index[j] == i) expected = 10.0f * (j + 1);
    }
    EXPECT_EQ(bottom.cpu_diff()[i], expected) << i;
  }
}

TEST(PoolingLayerTest, MaxOverlappingWindowsAndTies) {
  // 3x3 windows, stride 1 on x = [1 1 1; 1 1 1; 1 1 2] padded by 1: 3x3 output. Ties keep the
  // first maximum in row-major order; the 2 at (2, 2) wins the four windows containing it.
  // Without a mask top the layer keeps the indices itself; backward sums the top diffs
  // landing on the same element.
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakePool(&ctx, "pool: MAX kernel_size: 3 stride: 1 pad: 1");
  Tensor bottom(std::vector<int>{1, 1, 3, 3}), top;
  math::Set(9, 1.0f, bottom.mutable_cpu_data());
  bottom.mutable_cpu_data()[8] = 2.0f;
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  const float expected[] = {1, 1, 1, 1, 2, 2, 1, 2, 2};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(top.cpu_data()[i], expected[i]) << i;
  math::Set(9, 1.0f, top.mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  // Windows at (0,0), (0,1), (1,0) pick index 0 (first of the ties); (0,2) picks 1;
  // (2,0) picks 3; (1,1), (1,2), (2,1), (2,2) pick 8.
  const float dx[] = {3, 1, 0, 1, 0, 0, 0, 0, 4};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(bottom.cpu_diff()[i], dx[i]) << i;
}

TEST(PoolingLayerTest, MaxMatchesCaffesLoopWithPaddingClippedWindowsAndTies) {
  // Values from five levels (many ties), windows clipped by the padding and by Caffe's rounding
  // up; the top and the mask top against Caffe's loop over each window (rows, then columns,
  // the first maximum kept).
  for (const char* param :
       {"pool: MAX kernel_size: 3 stride: 2 pad: 1",
        "pool: MAX kernel_h: 2 kernel_w: 3 stride_h: 2 stride_w: 1 pad_h: 0 pad_w: 1",
        "pool: MAX kernel_size: 2 stride: 2"}) {
    SCOPED_TRACE(param);
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakePool(&ctx, param);
    Tensor bottom(std::vector<int>{2, 3, 9, 11}), top, mask;
    std::mt19937 random(7);
    float* x = bottom.mutable_cpu_data();
    for (int i = 0; i < bottom.count(); ++i) x[i] = static_cast<float>(random() % 5);
    layer->Initialize({&bottom}, {&top, &mask});
    layer->Forward({&bottom}, {&top, &mask});
    const auto& p = layer->layer_param().pooling_param();
    const int kh = p.has_kernel_h() ? p.kernel_h() : p.kernel_size();
    const int kw = p.has_kernel_w() ? p.kernel_w() : p.kernel_size();
    const int sh = p.has_stride_h() ? p.stride_h() : p.stride();
    const int sw = p.has_stride_w() ? p.stride_w() : p.stride();
    const int pad_h = p.has_pad_h() ? p.pad_h() : p.pad();
    const int pad_w = p.has_pad_w() ? p.pad_w() : p.pad();
    const int oh = top.shape(2), ow = top.shape(3);
    int checked = 0;
    for (int plane = 0; plane < 6; ++plane) {
      const float* src = x + plane * 99;
      for (int ph = 0; ph < oh; ++ph) {
        for (int pw = 0; pw < ow; ++pw) {
          const int h0 = std::max(ph * sh - pad_h, 0), h1 = std::min(ph * sh - pad_h + kh, 9);
          const int w0 = std::max(pw * sw - pad_w, 0), w1 = std::min(pw * sw - pad_w + kw, 11);
          float best = -FLT_MAX;
          int index = -1;
          for (int h = h0; h < h1; ++h) {
            for (int w = w0; w < w1; ++w) {
              if (src[h * 11 + w] > best) {
                best = src[h * 11 + w];
                index = h * 11 + w;
              }
            }
          }
          const int out = (plane * oh + ph) * ow + pw;
          ASSERT_EQ(top.cpu_data()[out], index < 0 ? 0.0f : best) << out;
          ASSERT_EQ(mask.cpu_data()[out], static_cast<float>(index)) << out;
          ++checked;
        }
      }
    }
    EXPECT_EQ(checked, top.count());
  }
}

TEST(PoolingLayerTest, AveForwardByHandCountsPaddingWithinPaddedBounds) {
  // x = 4x4 of 1..16, kernel 3, stride 2, pad 1: 3x3 output, windows start at -1, 1, 3.
  // The divisor is the window clipped to [-1, 5): 3 for the first two starts, 2 for the last.
  // y[0][0] = (1+2+5+6)/9, y[0][1] = (2+3+4+6+7+8)/9, y[0][2] = (4+8)/6,
  // y[1][0] = (5+6+9+10+13+14)/9, y[1][1] = (6+7+8+10+11+12+14+15+16)/9, y[1][2] = (8+12+16)/6,
  // y[2][0] = (13+14)/6, y[2][1] = (14+15+16)/6, y[2][2] = 16/4.
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakePool(&ctx, "pool: AVE kernel_size: 3 stride: 2 pad: 1");
  Tensor bottom(std::vector<int>{1, 1, 4, 4}), top;
  for (int i = 0; i < 16; ++i) bottom.mutable_cpu_data()[i] = static_cast<float>(i + 1);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{1, 1, 3, 3}));
  const float expected[] = {14.0f / 9, 30.0f / 9, 2.0f, 57.0f / 9, 11.0f, 6.0f, 4.5f, 7.5f, 4.0f};
  for (int i = 0; i < 9; ++i) EXPECT_FLOAT_EQ(top.cpu_data()[i], expected[i]) << i;

  // Backward: each bottom element gets sum over its windows of top_diff / divisor. With top
  // diffs of 1: x[0][0] is only in window (0,0): 1/9; x[3][3] is in windows (1,1), (1,2),
  // (2,1), (2,2): 1/9 + 1/6 + 1/6 + 1/4.
  math::Set(top.count(), 1.0f, top.mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_FLOAT_EQ(bottom.cpu_diff()[0], 1.0f / 9);
  EXPECT_FLOAT_EQ(bottom.cpu_diff()[15], 1.0f / 9 + 1.0f / 6 + 1.0f / 6 + 1.0f / 4);
}

TEST(PoolingLayerTest, GlobalPoolingByHand) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom(std::vector<int>{1, 2, 2, 3}), top;
  // Channel 0: 1..6 (mean 3.5, max 6); channel 1: -1..-6 (mean -3.5, max -1).
  for (int i = 0; i < 6; ++i) {
    bottom.mutable_cpu_data()[i] = static_cast<float>(i + 1);
    bottom.mutable_cpu_data()[6 + i] = -static_cast<float>(i + 1);
  }
  auto ave = MakePool(&ctx, "pool: AVE global_pooling: true");
  ave->Initialize({&bottom}, {&top});
  ave->Forward({&bottom}, {&top});
  EXPECT_FLOAT_EQ(top.cpu_data()[0], 3.5f);
  EXPECT_FLOAT_EQ(top.cpu_data()[1], -3.5f);
  auto max = MakePool(&ctx, "pool: MAX global_pooling: true");
  max->Initialize({&bottom}, {&top});
  max->Forward({&bottom}, {&top});
  EXPECT_FLOAT_EQ(top.cpu_data()[0], 6.0f);
  EXPECT_FLOAT_EQ(top.cpu_data()[1], -1.0f);
}

void CheckPoolGradient(const std::string& pooling_param, const std::vector<int>& shape,
                       int num_tops) {
  SCOPED_TRACE(pooling_param);
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakePool(&ctx, pooling_param);
  Tensor bottom(shape), top, mask;
  FillDistinct(&bottom, 5);
  std::vector<Tensor*> tops = {&top};
  if (num_tops == 2) tops.push_back(&mask);
  testing::GradientCheckOptions options;
  options.step = 1e-2f;
  options.threshold = 1e-2f;
  testing::GradientChecker checker(options);
  checker.Check(layer.get(), {&bottom}, tops);
}

TEST(PoolingLayerTest, MaxGradient) {
  CheckPoolGradient("pool: MAX kernel_size: 3 stride: 2", {2, 2, 7, 6}, 1);
  CheckPoolGradient("pool: MAX kernel_size: 3 stride: 2", {2, 2, 6, 6}, 2);
  CheckPoolGradient("pool: MAX kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 1 pad_w: 1",
                    {1, 2, 5, 6}, 1);
  CheckPoolGradient("pool: MAX global_pooling: true", {2, 3, 3, 4}, 1);
}

TEST(PoolingLayerTest, AveGradient) {
  CheckPoolGradient("pool: AVE kernel_size: 3 stride: 2", {2, 2, 7, 6}, 1);
  CheckPoolGradient("pool: AVE kernel_size: 3 stride: 2 pad: 1", {2, 2, 6, 6}, 1);
  CheckPoolGradient("pool: AVE kernel_h: 2 kernel_w: 3 stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 0",
                    {1, 2, 5, 4}, 1);
  CheckPoolGradient("pool: AVE global_pooling: true", {2, 3, 3, 4}, 1);
}

TEST(PoolingLayerTest, BatchMatchesPlaneByPlane) {
  // Every (image, channel) plane of a batch is pooled as if it were alone (plane offsets in
  // the input, output and argmax indices).
  Context ctx(Device::Cpu(), 1701);
  for (const char* method : {"MAX", "AVE"}) {
    SCOPED_TRACE(method);
    const std::string p = std::string("pool: ") + method + " kernel_size: 3 stride: 2 pad: 1";
    auto big = MakePool(&ctx, p);
    Tensor bottom(std::vector<int>{4, 3, 9, 9}), top;
    testing::FillGaussian(&bottom);
    big->Initialize({&bottom}, {&top});
    big->Forward({&bottom}, {&top});
    math::Set(top.count(), 1.0f, top.mutable_cpu_diff());
    big->Backward({&top}, {true}, {&bottom});
    auto small = MakePool(&ctx, p);
    Tensor plane(std::vector<int>{1, 1, 9, 9}), plane_top;
    small->Initialize({&plane}, {&plane_top});
    math::Set(plane_top.count(), 1.0f, plane_top.mutable_cpu_diff());
    for (int n = 0; n < 12; ++n) {
      math::Copy(81, bottom.cpu_data() + n * 81, plane.mutable_cpu_data());
      small->Forward({&plane}, {&plane_top});
      small->Backward({&plane_top}, {true}, {&plane});
      for (int i = 0; i < plane_top.count(); ++i) {
        ASSERT_EQ(top.cpu_data()[n * plane_top.count() + i], plane_top.cpu_data()[i]) << n;
      }
      for (int i = 0; i < 81; ++i) {
        ASSERT_EQ(bottom.cpu_diff()[n * 81 + i], plane.cpu_diff()[i]) << n;
      }
    }
  }
}

void ExpectError(ErrorCode code, const std::function<void()>& fn,
                 const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' missing from: " << e.what();
    }
  }
}

void SetupWith(const std::string& pooling_param, const std::vector<int>& shape, int tops = 1) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakePool(&ctx, pooling_param, "bad");
  Tensor bottom(shape), top, mask;
  std::vector<Tensor*> t = {&top};
  if (tops == 2) t.push_back(&mask);
  layer->Initialize({&bottom}, t);
}

TEST(PoolingLayerTest, StochasticIsUnimplemented) {
  ExpectError(ErrorCode::kUnimplemented,
              [] {
                SetupWith("pool: STOCHASTIC kernel_size: 2", {1, 1, 4, 4});
              },
              {"'bad'", "STOCHASTIC"});
}

TEST(PoolingLayerTest, BadParameters) {
  const auto invalid = ErrorCode::kInvalidArgument;
  ExpectError(invalid,
              [] {
                SetupWith("kernel_size: 2 kernel_h: 2 kernel_w: 2", {1, 1, 4, 4});
              },
              {"'bad'", "Pooling", "not both"});
  ExpectError(invalid,
              [] {
                SetupWith("kernel_h: 2", {1, 1, 4, 4});
              },
              {"'bad'", "kernel_h and kernel_w"});
  ExpectError(invalid, [] { SetupWith("stride: 1", {1, 1, 4, 4}); }, {"'bad'", "kernel_size"});
  ExpectError(invalid,
              [] {
                SetupWith("global_pooling: true kernel_size: 2", {1, 1, 4, 4});
              },
              {"'bad'", "global_pooling"});
  ExpectError(invalid,
              [] {
                SetupWith("global_pooling: true stride: 2", {1, 1, 4, 4});
              },
              {"'bad'", "stride 2x2"});
  ExpectError(invalid,
              [] {
                SetupWith("kernel_size: 2 pad: 2", {1, 1, 4, 4});
              },
              {"'bad'", "pad 2x2", "kernel 2x2"});
  ExpectError(invalid,
              [] {
                SetupWith("kernel_size: 2 pad_h: 1", {1, 1, 4, 4});
              },
              {"'bad'", "pad_h and pad_w"});
  ExpectError(invalid,
              [] {
                SetupWith("kernel_size: 2 stride: 1 stride_h: 1 stride_w: 1", {1, 1, 4, 4});
              },
              {"'bad'", "stride_h and stride_w"});
  ExpectError(invalid,
              [] {
                SetupWith("kernel_size: 2 stride: 0", {1, 1, 4, 4});
              },
              {"'bad'", "stride must be positive"});
  ExpectError(invalid,
              [] {
                SetupWith("kernel_size: 5", {1, 1, 4, 6});
              },
              {"'bad'", "kernel 5x5", "1 1 4 6"});
  ExpectError(invalid,
              [] {
                SetupWith("kernel_size: 2", {1, 4, 4});
              },
              {"'bad'", "4 axes", "1 4 4"});
  ExpectError(invalid,
              [] {
                SetupWith("pool: AVE kernel_size: 2", {1, 1, 4, 4}, 2);
              },
              {"'bad'", "at most 1 top"});
}

}  // namespace
}  // namespace cortado
