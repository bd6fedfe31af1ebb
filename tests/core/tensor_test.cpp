// SPDX-License-Identifier: Apache-2.0
#include "core/tensor.hpp"

#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "proto/caffe.pb.h"

namespace cortado {
namespace {

TEST(TensorTest, ReshapeAndCounts) {
  Tensor t({2, 3, 4, 5});
  EXPECT_EQ(t.count(), 120);
  EXPECT_EQ(t.count(1), 60);
  EXPECT_EQ(t.count(1, 3), 12);
  EXPECT_EQ(t.shape(-1), 5);
  EXPECT_EQ(t.num(), 2);
  EXPECT_EQ(t.channels(), 3);
  EXPECT_EQ(t.offset(1, 2, 3, 4), 119);
  EXPECT_EQ(t.ShapeString(), "2 3 4 5 (120)");
  EXPECT_THROW(t.shape(4), Error);
  EXPECT_THROW(t.Reshape({2, -1}), Error);
}

TEST(TensorTest, ReshapeKeepsAllocationWhenSmaller) {
  Tensor t({4, 4});
  float* before = t.mutable_cpu_data();
  t.Reshape({2, 2});
  EXPECT_EQ(t.mutable_cpu_data(), before);
  EXPECT_EQ(t.count(), 4);
}

TEST(TensorTest, UpdateSubtractsDiff) {
  Tensor t({3});
  float* d = t.mutable_cpu_data();
  float* g = t.mutable_cpu_diff();
  for (int i = 0; i < 3; ++i) {
    d[i] = static_cast<float>(i);
    g[i] = 0.5f;
  }
  t.Update();
  EXPECT_FLOAT_EQ(t.cpu_data()[0], -0.5f);
  EXPECT_FLOAT_EQ(t.cpu_data()[2], 1.5f);
  EXPECT_FLOAT_EQ(t.asum_diff(), 1.5f);
  EXPECT_FLOAT_EQ(t.sumsq_data(), 0.25f + 0.25f + 2.25f);
}

TEST(TensorTest, ProtoRoundTripAndLegacyShape) {
  Tensor t({1, 2, 1, 3});
  for (int i = 0; i < 6; ++i) t.mutable_cpu_data()[i] = i * 1.5f;
  caffe::BlobProto proto;
  t.ToProto(&proto);
  Tensor u;
  u.FromProto(proto);
  EXPECT_EQ(u.shape(), t.shape());
  EXPECT_FLOAT_EQ(u.cpu_data()[5], 7.5f);

  caffe::BlobProto legacy;
  legacy.set_num(1);
  legacy.set_channels(2);
  legacy.set_height(1);
  legacy.set_width(3);
  for (int i = 0; i < 6; ++i) legacy.add_double_data(i);
  EXPECT_TRUE(t.ShapeEquals(legacy));
  t.FromProto(legacy, false);
  EXPECT_FLOAT_EQ(t.cpu_data()[4], 4.0f);

  caffe::BlobProto wrong;
  wrong.mutable_shape()->add_dim(7);
  for (int i = 0; i < 7; ++i) wrong.add_data(0);
  EXPECT_THROW(t.FromProto(wrong, false), Error);
}

// A stored dimension beyond int (4294967301 = 2^32 + 5) is not read as 5.
TEST(TensorTest, AStoredDimensionBeyondIntIsNeverTruncated) {
  Tensor t({5});
  caffe::BlobProto proto;
  proto.mutable_shape()->add_dim(4294967301LL);
  for (int i = 0; i < 5; ++i) proto.add_data(1.0f);
  EXPECT_FALSE(t.ShapeEquals(proto));
  try {
    t.FromProto(proto, false);
    FAIL() << "the shape matched";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "shape mismatch: stored blob is 4294967301 (4294967301), expected 5 (5)");
  }
  try {
    t.FromProto(proto, true);
    FAIL() << "reshaped to a truncated dimension";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("dimension 4294967301, outside 0 to 2147483647"),
              std::string::npos)
        << e.what();
  }
}

TEST(TensorTest, ShareDataAliases) {
  Tensor a({2, 2});
  Tensor b({4});
  b.ShareData(a);
  a.mutable_cpu_data()[3] = 9.0f;
  EXPECT_FLOAT_EQ(b.cpu_data()[3], 9.0f);
  Tensor c({5});
  EXPECT_THROW(c.ShareData(a), Error);
}

}  // namespace
}  // namespace cortado
