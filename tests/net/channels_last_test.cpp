// SPDX-License-Identifier: Apache-2.0
// Which 16-bit blobs a net keeps channels-last (net/channels_last.hpp), on graphs written out by
// hand: the choice is a pure function of the graph, so a CPU machine checks it; the GPU tests
// check the layers' passes on such blobs and a whole net with them.
#include "net/channels_last.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace cortado {
namespace {

using Use = Layer::NhwcUse;

LayoutUser User(Use use, std::vector<int> blobs, bool convolution = false) {
  LayoutUser u;
  u.use = use;
  u.convolution = convolution;
  u.blobs = std::move(blobs);
  return u;
}

std::vector<int> OwnGroups(int n) {
  std::vector<int> g(n);
  for (int i = 0; i < n; ++i) g[i] = i;
  return g;
}

// A residual block as ResNet-50 writes it, blob ids in brackets:
//   data[0] -conv1-> c1[1] -BN,ReLU (in place)- -pool1-> p1[2] -split-> s_a[3], s_b[4]
//   s_a -conv2a-> a[5] -BN- -conv2b-> b[6]
//   s_b -conv1x1-> sc[7]
//   b + sc -Eltwise-> sum[8] -pool5 (global AVE)-> g[9] -InnerProduct-> fc[10] -loss-> l[11]
// data is float32 (an Input layer), g and after are 1x1 or 2-D, fc and l float32.
TEST(ChannelsLastTest, ResidualBlockBetweenPoolingsGoesNhwcAndStopsAtTheInnerProduct) {
  const std::vector<bool> may = {false, true, true, true,  true,  true,
                                 true,  true, true, false, false, false};
  std::vector<LayoutUser> layers = {
      User(Use::kEach, {0, 1}, true),  // conv1: float32 data in
      User(Use::kSame, {1, 1}),        // BatchNorm in place
      User(Use::kSame, {1, 1}),        // ReLU (fused) in place
      User(Use::kEach, {1, 2}),        // pool1
      User(Use::kSame, {2, 3, 4}),     // Split
      User(Use::kEach, {3, 5}, true),  // conv2a
      User(Use::kSame, {5, 5}),        // BatchNorm
      User(Use::kEach, {5, 6}, true),  // conv2b
      User(Use::kEach, {4, 7}, true),  // shortcut conv
      User(Use::kSame, {6, 7, 8}),     // Eltwise
      User(Use::kEach, {8, 9}),        // pool5
      User(Use::kNo, {9, 10}),         // InnerProduct
      User(Use::kNo, {10, 11}),        // loss
  };
  const std::vector<bool> nhwc = ChannelsLastBlobs(may, OwnGroups(12), layers);
  const std::vector<bool> expected = {false, true, true, true,  true,  true,
                                      true,  true, true, false, false, false};
  EXPECT_EQ(nhwc, expected);
}

TEST(ChannelsLastTest, OneLayerThatTakesOnlyNchwKeepsItsWholeSetNchw) {
  // conv -> a[1] -ReLU-> b[2] -LRN (kNo)-> c[3] -conv-> d[4]
  const std::vector<bool> may(5, true);
  std::vector<LayoutUser> layers = {User(Use::kEach, {0, 1}, true), User(Use::kSame, {1, 2}),
                                    User(Use::kNo, {2, 3}), User(Use::kEach, {3, 4}, true)};
  std::vector<bool> nhwc = ChannelsLastBlobs(may, OwnGroups(5), layers);
  // 0 is only a convolution's bottom: nothing stops it; a and b are LRN's set; c its top; d a
  // convolution's top with nothing else.
  EXPECT_EQ(nhwc, (std::vector<bool>{true, false, false, false, true}));
  // The LRN replaced by a kSame layer: the whole chain may go.
  layers[2].use = Use::kSame;
  nhwc = ChannelsLastBlobs(may, OwnGroups(5), layers);
  EXPECT_EQ(nhwc, (std::vector<bool>(5, true)));
}

TEST(ChannelsLastTest, SetsWithoutAConvolutionStayNchw) {
  // pool -> a[1] -ReLU-> b[2] -pool-> c[3]: no convolution anywhere.
  const std::vector<bool> may(4, true);
  const std::vector<LayoutUser> layers = {User(Use::kEach, {0, 1}), User(Use::kSame, {1, 2}),
                                          User(Use::kEach, {2, 3})};
  EXPECT_EQ(ChannelsLastBlobs(may, OwnGroups(4), layers), std::vector<bool>(4, false));
}

TEST(ChannelsLastTest, BlobsSharingABufferAndOneThatMayNotKeepTheirSetNchw) {
  // conv -> a[1]; b[2] shares a's buffer (a Flatten-like view) and may not be NHWC (2-D).
  const std::vector<bool> may = {true, true, false};
  const std::vector<LayoutUser> layers = {User(Use::kEach, {0, 1}, true)};
  EXPECT_EQ(ChannelsLastBlobs(may, {0, 1, 1}, layers), (std::vector<bool>{true, false, false}));
  // Without the shared buffer, a goes alone.
  EXPECT_EQ(ChannelsLastBlobs(may, {0, 1, 2}, layers), (std::vector<bool>{true, true, false}));
}

}  // namespace
}  // namespace cortado
