// SPDX-License-Identifier: Apache-2.0
// A tensor's home type and its twins (core/tensor.hpp), on the host, where a CPU machine can
// check them: every view reads what the last write through any view of this tensor (or, through
// the home, of a tensor sharing its buffer) put there, rounded to the type read.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "math/half_host.hpp"
#include "proto/caffe.pb.h"

namespace cortado {
namespace {

// Values that float16 and bfloat16 round differently, and some they keep exactly.
std::vector<float> Values(int n, float offset) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = offset + 0.1f * static_cast<float>(i) - 1.0f / 3.0f;
  return v;
}

float Rounded(HalfType type, float v) {
  return type == HalfType::kFloat16 ? math::Float16ToFloat(math::FloatToFloat16(v))
                                    : math::BFloat16ToFloat(math::FloatToBFloat16(v));
}
uint16_t Bits(HalfType type, float v) {
  return type == HalfType::kFloat16 ? math::FloatToFloat16(v) : math::FloatToBFloat16(v);
}

class TensorTwinTest : public ::testing::TestWithParam<HalfType> {};

TEST_P(TensorTwinTest, AHalfHomeTakesTwoBytesPerValueAndReadsBackRounded) {
  const HalfType type = GetParam();
  Tensor t;
  t.set_home_type(type);
  t.Reshape({2, 3, 5});
  EXPECT_EQ(t.value_bytes(), 2u);
  EXPECT_EQ(t.data()->size(), 2u * 30);
  EXPECT_EQ(t.diff()->size(), 2u * 30);
  const std::vector<float> v = Values(30, 0.5f);
  std::memcpy(t.mutable_cpu_data(), v.data(), sizeof(float) * 30);
  // The float twin's write reaches the home at the next 16-bit access.
  const auto* half = static_cast<const uint16_t*>(t.cpu_half_data(type));
  for (int i = 0; i < 30; ++i) EXPECT_EQ(half[i], Bits(type, v[i])) << i;
  // And the float view now reads the rounded values.
  for (int i = 0; i < 30; ++i) EXPECT_EQ(t.cpu_data()[i], Rounded(type, v[i])) << i;
}

TEST_P(TensorTwinTest, HalfWritesReachTheFloatViewAndTensorsSharingTheBuffer) {
  const HalfType type = GetParam();
  Tensor a({4, 7}), b({4, 7});
  a.set_home_type(type);
  b.set_home_type(type);
  b.ShareData(a);
  std::vector<float> v = Values(28, 2.0f);
  std::memcpy(a.mutable_cpu_data(), v.data(), sizeof(float) * 28);
  a.cpu_half_data(type);  // converts a's written twin into the shared home
  EXPECT_EQ(b.cpu_data()[5], Rounded(type, v[5]));
  // Through b's home: a's float twin was made at an older version of the buffer.
  auto* half = static_cast<uint16_t*>(b.mutable_cpu_half_data(type));
  half[5] = Bits(type, -3.0f);
  EXPECT_EQ(a.cpu_data()[5], -3.0f);
  EXPECT_EQ(a.cpu_data()[6], Rounded(type, v[6]));
}

TEST_P(TensorTwinTest, AFloatHomeKeepsAHalfTwinCurrent) {
  const HalfType type = GetParam();
  Tensor t({3, 11});
  EXPECT_EQ(t.home_type(), HalfType::kNone);
  std::vector<float> v = Values(33, -1.0f);
  std::memcpy(t.mutable_cpu_data(), v.data(), sizeof(float) * 33);
  const auto* half = static_cast<const uint16_t*>(t.cpu_half_data(type));
  for (int i = 0; i < 33; ++i) EXPECT_EQ(half[i], Bits(type, v[i])) << i;
  // A later float write makes the twin stale; the next read converts again.
  t.mutable_cpu_data()[4] = 7.25f;
  EXPECT_EQ(static_cast<const uint16_t*>(t.cpu_half_data(type))[4], Bits(type, 7.25f));
  // A write through the twin reaches the float home, rounded values and all.
  auto* twin = static_cast<uint16_t*>(t.mutable_cpu_half_data(type));
  twin[9] = Bits(type, 0.5f);
  EXPECT_EQ(t.cpu_data()[9], 0.5f);
  EXPECT_EQ(t.cpu_data()[10], Rounded(type, v[10]));
  // The whole twin is converted back: every value is now the twin's, rounded.
  EXPECT_EQ(t.cpu_data()[0], Rounded(type, v[0]));
}

TEST_P(TensorTwinTest, AWrittenTwinReachesTheHomeBeforeAReshape) {
  const HalfType type = GetParam();
  Tensor u({2, 8});
  static_cast<uint16_t*>(u.mutable_cpu_half_data(type))[3] = Bits(type, 1.5f);
  u.Reshape({1, 8});
  EXPECT_EQ(u.cpu_data()[3], 1.5f);
}

TEST_P(TensorTwinTest, OneHalfTypeHasNoViewInTheOther) {
  const HalfType type = GetParam();
  const HalfType other = type == HalfType::kFloat16 ? HalfType::kBFloat16 : HalfType::kFloat16;
  Tensor t({5});
  t.set_home_type(type);
  EXPECT_THROW(t.cpu_half_data(other), Error);
  Tensor f({5});
  EXPECT_THROW(f.ShareData(t), Error) << "sharing between homes of different types";
}

TEST_P(TensorTwinTest, ProtoAndCopiesGoThroughTheFloatView) {
  const HalfType type = GetParam();
  Tensor t({6});
  t.set_home_type(type);
  for (int i = 0; i < 6; ++i) t.mutable_cpu_data()[i] = 0.1f * static_cast<float>(i);
  // Until the home is next used, the float view reads what was written to it.
  EXPECT_EQ(t.cpu_data()[1], 0.1f);
  t.cpu_half_data(type);
  caffe::BlobProto proto;
  t.ToProto(&proto);
  ASSERT_EQ(proto.data_size(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(proto.data(i), Rounded(type, 0.1f * i)) << i;
  Tensor copy({6});
  copy.CopyFrom(t);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(copy.cpu_data()[i], Rounded(type, 0.1f * i)) << i;
}

// Channels-last homes (Tensor::set_home_nhwc): the 16-bit home is [n][h][w][c], the float32
// views NCHW; writes through either land where the other expects them.
TEST_P(TensorTwinTest, ChannelsLastHomeIsTheFloatViewTransposed) {
  const HalfType type = GetParam();
  const int n = 2, c = 3, h = 4, w = 5, count = n * c * h * w;
  Tensor t;
  t.set_home_type(type);
  t.Reshape({n, c, h, w});
  t.set_home_nhwc(true);
  EXPECT_TRUE(t.home_nhwc());
  const std::vector<float> v = Values(count, 0.25f);
  std::memcpy(t.mutable_cpu_data(), v.data(), sizeof(float) * count);
  const auto* home = static_cast<const uint16_t*>(t.cpu_half_data(type));
  for (int in = 0; in < n; ++in) {
    for (int ch = 0; ch < c; ++ch) {
      for (int p = 0; p < h * w; ++p) {
        ASSERT_EQ(home[(in * h * w + p) * c + ch], Bits(type, v[(in * c + ch) * h * w + p]))
            << in << " " << ch << " " << p;
      }
    }
  }
  // Back: a write to the home in NHWC order reads as NCHW floats.
  auto* writable = static_cast<uint16_t*>(t.mutable_cpu_half_data(type));
  for (int i = 0; i < count; ++i) writable[i] = Bits(type, static_cast<float>(i));
  for (int in = 0; in < n; ++in) {
    for (int ch = 0; ch < c; ++ch) {
      for (int p = 0; p < h * w; ++p) {
        ASSERT_EQ(t.cpu_data()[(in * c + ch) * h * w + p],
                  Rounded(type, static_cast<float>((in * h * w + p) * c + ch)));
      }
    }
  }
}

TEST_P(TensorTwinTest, ChannelsLastNeedsA16BitHomeAnd4Axes) {
  const HalfType type = GetParam();
  Tensor float_home({2, 3, 4, 5});
  EXPECT_THROW(float_home.set_home_nhwc(true), Error);
  Tensor three_axes;
  three_axes.set_home_type(type);
  three_axes.Reshape({2, 3, 4});
  EXPECT_THROW(three_axes.set_home_nhwc(true), Error);
  Tensor t;
  t.set_home_type(type);
  t.Reshape({2, 3, 4, 5});
  t.set_home_nhwc(true);
  t.Reshape({1, 3, 2, 2});  // still 4-D: fine
  EXPECT_THROW(t.Reshape({12}), Error);
  t.set_home_type(HalfType::kNone);
  EXPECT_FALSE(t.home_nhwc());
}

INSTANTIATE_TEST_SUITE_P(Types, TensorTwinTest,
                         ::testing::Values(HalfType::kFloat16, HalfType::kBFloat16),
                         [](const auto& param_info) {
                           return std::string(HalfTypeName(param_info.param));
                         });

}  // namespace
}  // namespace cortado
