// SPDX-License-Identifier: Apache-2.0
#include "layers/im2col_layer.hpp"

#include <gtest/gtest.h>

#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::LayerParam;

std::string Im2colText(const std::string& fields) {
  return "name: 'im2col' type: 'Im2col' convolution_param { " + fields + " }";
}

struct Geometry {
  std::vector<int> kernel, stride, pad, dilation;
};

// The definition, for one image of `channels` x `in` (spatial shape): row (c, k...) and column
// (o...) hold image[c, o * stride - pad + k * dilation], 0 outside the image. Fills `out` with
// the output spatial shape.
std::vector<float> NaiveIm2col(const float* image, int channels, const std::vector<int>& in,
                               const Geometry& g, std::vector<int>* out) {
  const int axes = static_cast<int>(in.size());
  out->assign(axes, 0);
  int kernel_count = 1, out_count = 1;
  for (int a = 0; a < axes; ++a) {
    (*out)[a] = (in[a] + 2 * g.pad[a] - (g.dilation[a] * (g.kernel[a] - 1) + 1)) / g.stride[a] + 1;
    kernel_count *= g.kernel[a];
    out_count *= (*out)[a];
  }
  std::vector<float> columns(static_cast<size_t>(channels) * kernel_count * out_count);
  for (int c = 0; c < channels; ++c) {
    for (int k = 0; k < kernel_count; ++k) {
      for (int o = 0; o < out_count; ++o) {
        // Unflatten k and o row-major over the axes, then locate the pixel.
        int kr = k, orest = o, pixel = c;
        bool inside = true;
        std::vector<int> kidx(axes), oidx(axes);
        for (int a = axes - 1; a >= 0; --a) {
          kidx[a] = kr % g.kernel[a];
          kr /= g.kernel[a];
          oidx[a] = orest % (*out)[a];
          orest /= (*out)[a];
        }
        for (int a = 0; a < axes; ++a) {
          const int p = oidx[a] * g.stride[a] - g.pad[a] + kidx[a] * g.dilation[a];
          inside = inside && p >= 0 && p < in[a];
          pixel = pixel * in[a] + (inside ? p : 0);
        }
        columns[(static_cast<size_t>(c) * kernel_count + k) * out_count + o] =
            inside ? image[pixel] : 0.0f;
      }
    }
  }
  return columns;
}

// Runs the layer on a gaussian bottom and compares every image with NaiveIm2col.
void ExpectMatchesNaive(const std::string& fields, const std::vector<int>& shape, int channel_axis,
                        const Geometry& g) {
  SCOPED_TRACE(fields);
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Im2colText(fields)), &ctx);
  Tensor bottom(shape), top;
  testing::FillGaussian(&bottom);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  const int num = bottom.count(0, channel_axis);
  const int channels = bottom.shape(channel_axis);
  const std::vector<int> in(shape.begin() + channel_axis + 1, shape.end());
  std::vector<int> out;
  for (int n = 0; n < num; ++n) {
    const std::vector<float> expected =
        NaiveIm2col(bottom.cpu_data() + static_cast<size_t>(n) * bottom.count(channel_axis),
                    channels, in, g, &out);
    if (n == 0) {
      std::vector<int> top_shape(shape.begin(), shape.begin() + channel_axis);
      top_shape.push_back(static_cast<int>(expected.size()) / [&] {
        int p = 1;
        for (int o : out) p *= o;
        return p;
      }());
      top_shape.insert(top_shape.end(), out.begin(), out.end());
      ASSERT_EQ(top.shape(), top_shape);
    }
    const float* actual = top.cpu_data() + static_cast<size_t>(n) * top.count(channel_axis);
    for (size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(actual[i], expected[i]) << "image " << n << " element " << i;
    }
  }
}

TEST(Im2colLayerTest, TopShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Im2colText("kernel_size: 3 stride: 2 pad: 1")), &ctx);
  Tensor bottom({2, 3, 6, 5}), top;
  layer->Initialize({&bottom}, {&top});
  // out = (6 + 2 - 3) / 2 + 1 = 3 and (5 + 2 - 3) / 2 + 1 = 3; rows 3 * 3 * 3
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 27, 3, 3}));
}

TEST(Im2colLayerTest, ForwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({1, 1, 3, 3}), top;
  testing::SetData(&bottom, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto layer = CreateLayer(LayerParam(Im2colText("kernel_size: 2")), &ctx);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{1, 4, 2, 2}));
  // Rows are the kernel offsets (0,0), (0,1), (1,0), (1,1); columns the 2x2 output positions.
  EXPECT_EQ(Data(top), (std::vector<float>{1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9}));

  // Pad 1, stride 2: the output positions read pixels (2 oh - 1 + kh, 2 ow - 1 + kw).
  auto padded = CreateLayer(LayerParam(Im2colText("kernel_size: 2 pad: 1 stride: 2")), &ctx);
  padded->Initialize({&bottom}, {&top});
  padded->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{1, 4, 2, 2}));
  EXPECT_EQ(Data(top), (std::vector<float>{0, 0, 0, 5, 0, 0, 4, 6, 0, 2, 0, 8, 1, 3, 7, 9}));
}

TEST(Im2colLayerTest, BackwardAddsOverlapsByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Im2colText("kernel_size: 2")), &ctx);
  Tensor bottom({1, 1, 3, 3}), top;
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  std::fill_n(top.mutable_cpu_diff(), top.count(), 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // Each pixel's diff counts the windows that cover it.
  EXPECT_EQ(testing::Diff(bottom), (std::vector<float>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
}

TEST(Im2colLayerTest, TwoDimensionalMatchesDefinition) {
  ExpectMatchesNaive("kernel_size: 3 stride: 2 pad: 1", {2, 3, 7, 6}, 1,
                     {{3, 3}, {2, 2}, {1, 1}, {1, 1}});
  ExpectMatchesNaive("kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 2 pad_h: 0 pad_w: 1",
                     {2, 2, 5, 6}, 1, {{2, 3}, {1, 2}, {0, 1}, {1, 1}});
  ExpectMatchesNaive("kernel_size: 3 kernel_size: 2 dilation: 2 dilation: 1 pad: 2 pad: 0",
                     {1, 2, 7, 5}, 1, {{3, 2}, {1, 1}, {2, 0}, {2, 1}});
  // The N-D routine on a 2-D input gives the same columns.
  ExpectMatchesNaive("kernel_size: 3 stride: 2 pad: 1 dilation: 2 force_nd_im2col: true",
                     {2, 3, 7, 6}, 1, {{3, 3}, {2, 2}, {1, 1}, {2, 2}});
}

TEST(Im2colLayerTest, ChannelAxisAfterSeveralSampleAxes) {
  ExpectMatchesNaive("axis: 2 kernel_size: 2 stride: 1", {2, 3, 2, 4, 4}, 2,
                     {{2, 2}, {1, 1}, {0, 0}, {1, 1}});
  ExpectMatchesNaive("axis: -3 kernel_size: 2 pad: 1", {2, 3, 2, 4, 4}, 2,
                     {{2, 2}, {1, 1}, {1, 1}, {1, 1}});
}

TEST(Im2colLayerTest, NdMatchesDefinition) {
  ExpectMatchesNaive("kernel_size: 2 stride: 1 pad: 1 pad: 0 pad: 1", {2, 2, 4, 5, 3}, 1,
                     {{2, 2, 2}, {1, 1, 1}, {1, 0, 1}, {1, 1, 1}});
  ExpectMatchesNaive("kernel_size: 3 kernel_size: 1 kernel_size: 2 stride: 2 dilation: 2",
                     {1, 2, 7, 3, 5}, 1, {{3, 1, 2}, {2, 2, 2}, {0, 0, 0}, {2, 2, 2}});
  ExpectMatchesNaive("kernel_size: 2 stride: 2", {3, 2, 9}, 1, {{2}, {2}, {0}, {1}});  // 1-D
}

TEST(Im2colLayerTest, GradientMatchesNumeric) {
  for (const char* fields : {"kernel_size: 3 stride: 2 pad: 1", "kernel_size: 2 dilation: 2",
                             "kernel_size: 2 pad: 1 force_nd_im2col: true"}) {
    SCOPED_TRACE(fields);
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(LayerParam(Im2colText(fields)), &ctx);
    Tensor bottom({2, 2, 4, 5}), top;
    testing::FillGaussian(&bottom);
    testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
  }
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Im2colText("kernel_size: 2 pad: 1 stride: 2")), &ctx);
  Tensor bottom({1, 2, 3, 4, 3}), top;  // 3-D
  testing::FillGaussian(&bottom);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

void ExpectIm2colError(const std::string& fields, const std::vector<int>& shape,
                       const std::string& needle) {
  SCOPED_TRACE(fields);
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Im2colText(fields)), &ctx);
  Tensor bottom(shape), top;
  try {
    layer->Initialize({&bottom}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'im2col' (Im2col)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(Im2colLayerTest, BadGeometryIsAnError) {
  ExpectIm2colError("stride: 1", {1, 2, 5, 5}, "kernel_size");
  ExpectIm2colError("kernel_size: 0", {1, 2, 5, 5}, "kernel must be positive");
  ExpectIm2colError("kernel_size: 3 stride: 0", {1, 2, 5, 5}, "stride must be positive");
  ExpectIm2colError("kernel_size: 3 dilation: 0", {1, 2, 5, 5}, "dilation must be positive");
  ExpectIm2colError("kernel_size: 2 kernel_size: 2 kernel_size: 2", {1, 2, 5, 5},
                    "once per spatial axis (2), got 3");
  ExpectIm2colError("kernel_h: 2 kernel_w: 2", {1, 2, 5, 5, 5}, "2-D");
  ExpectIm2colError("kernel_size: 2 kernel_h: 2 kernel_w: 2", {1, 2, 5, 5}, "not both");
  ExpectIm2colError("kernel_size: 7", {1, 2, 5, 5}, "1 2 5 5 (50)");
  ExpectIm2colError("kernel_size: 3 dilation: 3", {1, 2, 6, 6}, "extent 7");
  ExpectIm2colError("axis: 3 kernel_size: 2", {1, 2, 5, 5}, "spatial axis");
  ExpectIm2colError("axis: 4 kernel_size: 2", {1, 2, 5, 5}, "out of range");
}

}  // namespace
}  // namespace cortado
