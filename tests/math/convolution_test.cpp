// SPDX-License-Identifier: Apache-2.0
// The fast CPU convolution (oneDNN) against a direct six-loop convolution written from the
// definition, forward and both backward passes, over groups, stride, padding, dilation, bias
// and shapes where Caffe's floor leaves input rows unused.
#include "math/convolution.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace cortado::math {
namespace {

struct Direct {
  const ConvolutionShape& s;
  int oh() const { return s.output_h(); }
  int ow() const { return s.output_w(); }
  int cg() const { return s.channels / s.group; }
  int og() const { return s.num_output / s.group; }
  size_t src(int n, int c, int y, int x) const {
    return ((static_cast<size_t>(n) * s.channels + c) * s.height + y) * s.width + x;
  }
  size_t dst(int n, int o, int y, int x) const {
    return ((static_cast<size_t>(n) * s.num_output + o) * oh() + y) * ow() + x;
  }
  size_t wei(int o, int c, int ky, int kx) const {
    return ((static_cast<size_t>(o) * cg() + c) * s.kernel_h + ky) * s.kernel_w + kx;
  }
  // Calls f(src index, dst index, weight index) for every multiply of the convolution.
  template <typename F>
  void Each(F f) const {
    for (int n = 0; n < s.num; ++n)
      for (int o = 0; o < s.num_output; ++o)
        for (int y = 0; y < oh(); ++y)
          for (int x = 0; x < ow(); ++x)
            for (int c = 0; c < cg(); ++c)
              for (int ky = 0; ky < s.kernel_h; ++ky)
                for (int kx = 0; kx < s.kernel_w; ++kx) {
                  const int iy = y * s.stride_h - s.pad_h + ky * s.dilation_h;
                  const int ix = x * s.stride_w - s.pad_w + kx * s.dilation_w;
                  if (iy < 0 || iy >= s.height || ix < 0 || ix >= s.width) continue;
                  const int ic = (o / og()) * cg() + c;
                  f(src(n, ic, iy, ix), dst(n, o, y, x), wei(o, c, ky, kx));
                }
  }
};

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-4f * std::max(1.0f, std::fabs(b[i]))) << what << " element " << i;
  }
}

class FastConvolutionTest : public ::testing::TestWithParam<ConvolutionShape> {};

// Every pass of `plan` (made for `s`) against the six loops.
void ExpectMatchesDirect(const ConvolutionShape& s, ConvolutionPlan* plan) {
  Direct d{s};
  const size_t src_n = static_cast<size_t>(s.num) * s.channels * s.height * s.width;
  const size_t dst_n = static_cast<size_t>(s.num) * s.num_output * d.oh() * d.ow();
  const size_t wei_n = static_cast<size_t>(s.num_output) * d.cg() * s.kernel_h * s.kernel_w;
  const auto src = Random(src_n, 1), wei = Random(wei_n, 2), bias = Random(s.num_output, 3);
  const auto diff_dst = Random(dst_n, 4);

  std::vector<float> want_dst(dst_n, 0.0f), want_diff_src(src_n, 0.0f), want_diff_wei(wei_n, 0.5f),
      want_diff_bias(s.num_output, 0.25f);
  d.Each([&](size_t i, size_t o, size_t w) {
    want_dst[o] += src[i] * wei[w];
    want_diff_src[i] += diff_dst[o] * wei[w];
    want_diff_wei[w] += diff_dst[o] * src[i];
  });
  if (s.bias) {
    for (int n = 0; n < s.num; ++n)
      for (int o = 0; o < s.num_output; ++o)
        for (int p = 0; p < d.oh() * d.ow(); ++p) {
          want_dst[d.dst(n, o, 0, 0) + p] += bias[o];
          want_diff_bias[o] += diff_dst[d.dst(n, o, 0, 0) + p];
        }
  }

  std::vector<float> dst(dst_n), diff_src(src_n), diff_wei(wei_n, 0.5f),
      diff_bias(s.num_output, 0.25f);
  plan->Forward(src.data(), wei.data(), bias.data(), dst.data());
  ExpectClose(dst, want_dst, "forward");
  plan->BackwardData(diff_dst.data(), wei.data(), diff_src.data());
  ExpectClose(diff_src, want_diff_src, "backward data");
  // Starts from 0.5 / 0.25: checks that gradients accumulate rather than overwrite.
  plan->BackwardWeights(src.data(), diff_dst.data(), diff_wei.data(), diff_bias.data());
  ExpectClose(diff_wei, want_diff_wei, "backward weights");
  if (s.bias) ExpectClose(diff_bias, want_diff_bias, "backward bias");

  // Both passes in one call (diff_dst put in the primitives' layout once): the same gradients,
  // accumulated onto the weights' again; and each pass alone where the other's output is null.
  std::vector<float> both_src(src_n, 7.0f), both_wei(diff_wei), both_bias(diff_bias);
  plan->Backward(src.data(), diff_dst.data(), wei.data(), both_wei.data(), both_bias.data(),
                 both_src.data());
  ExpectClose(both_src, want_diff_src, "backward (both passes): data");
  std::vector<float> twice_wei(wei_n), twice_bias(s.num_output);
  for (size_t i = 0; i < wei_n; ++i) twice_wei[i] = 2 * want_diff_wei[i] - 0.5f;
  for (int o = 0; o < s.num_output; ++o) twice_bias[o] = 2 * want_diff_bias[o] - 0.25f;
  ExpectClose(both_wei, twice_wei, "backward (both passes): weights");
  if (s.bias) ExpectClose(both_bias, twice_bias, "backward (both passes): bias");
  std::vector<float> data_only(src_n, 7.0f);
  plan->Backward(src.data(), diff_dst.data(), wei.data(), nullptr, nullptr, data_only.data());
  ExpectClose(data_only, want_diff_src, "backward (data alone)");
  std::vector<float> weights_only(wei_n, 0.5f);
  plan->Backward(src.data(), diff_dst.data(), wei.data(), weights_only.data(), nullptr, nullptr);
  ExpectClose(weights_only, want_diff_wei, "backward (weights alone)");
}

TEST_P(FastConvolutionTest, MatchesDirectConvolution) {
  const ConvolutionShape s = GetParam();
  auto plan = MakeFastConvolution(s);
  if (!CORTADO_WITH_ONEDNN) {
    EXPECT_EQ(plan, nullptr);
    GTEST_SKIP() << "built without oneDNN";
  }
  ASSERT_NE(plan, nullptr);
  ExpectMatchesDirect(s, plan.get());
}

ConvolutionShape Shape(int n, int c, int h, int w, int oc, int k, int pad, int stride, int dilation,
                       int group, bool bias) {
  ConvolutionShape s;
  s.num = n;
  s.channels = c;
  s.height = h;
  s.width = w;
  s.num_output = oc;
  s.kernel_h = s.kernel_w = k;
  s.pad_h = s.pad_w = pad;
  s.stride_h = s.stride_w = stride;
  s.dilation_h = s.dilation_w = dilation;
  s.group = group;
  s.bias = bias;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FastConvolutionTest,
    ::testing::Values(Shape(2, 3, 7, 6, 4, 3, 0, 1, 1, 1, true),    // plain
                      Shape(2, 4, 9, 9, 6, 3, 1, 2, 1, 2, true),    // groups, pad, stride
                      Shape(1, 2, 10, 8, 3, 3, 2, 1, 2, 1, false),  // dilation, no bias
                      Shape(2, 3, 8, 8, 5, 3, 0, 2, 1, 1, true),    // floor drops a row
                      Shape(3, 1, 12, 12, 4, 5, 0, 1, 1, 1, true),  // LeNet-like
                      Shape(2, 6, 5, 5, 6, 1, 0, 1, 1, 3, true),    // 1x1 grouped
                      // Channels in blocks of 16: the primitives' own (blocked) layouts, the
                      // weights' gradient added as it is reordered back.
                      Shape(2, 16, 7, 7, 32, 3, 1, 1, 1, 1, true),
                      Shape(2, 32, 6, 6, 16, 1, 0, 1, 1, 1, false),
                      Shape(2, 16, 8, 8, 16, 3, 1, 2, 1, 16, false)));  // depthwise

// The weights' gradient is added to the layer's with one float addition per element (what
// Caffe's accumulation does), whichever way the plan brings it back from the primitive's
// layout: onto zeros it is the gradient g itself, onto values v exactly v + g. Channels in 16s
// (the tiles Cortado adds itself), and a shape that is not.
TEST(FastConvolutionAccumulationTest, WeightGradientsAddExactly) {
  if (!CORTADO_WITH_ONEDNN) GTEST_SKIP() << "built without oneDNN";
  for (const ConvolutionShape& s :
       {Shape(2, 32, 6, 6, 48, 1, 0, 1, 1, 1, false), Shape(2, 16, 7, 7, 32, 3, 1, 1, 1, 1, true),
        Shape(2, 3, 7, 6, 4, 3, 0, 1, 1, 1, true)}) {
    auto plan = MakeFastConvolution(s);
    ASSERT_NE(plan, nullptr);
    Direct d{s};
    const size_t src_n = static_cast<size_t>(s.num) * s.channels * s.height * s.width;
    const size_t dst_n = static_cast<size_t>(s.num) * s.num_output * d.oh() * d.ow();
    const size_t wei_n = static_cast<size_t>(s.num_output) * d.cg() * s.kernel_h * s.kernel_w;
    const auto src = Random(src_n, 5), diff_dst = Random(dst_n, 6), start = Random(wei_n, 7);
    std::vector<float> fresh(wei_n, 0.0f), added(start), bias_fresh(s.num_output, 0.0f),
        bias_added(s.num_output, 1.0f);
    plan->BackwardWeights(src.data(), diff_dst.data(), fresh.data(), bias_fresh.data());
    plan->BackwardWeights(src.data(), diff_dst.data(), added.data(), bias_added.data());
    for (size_t i = 0; i < wei_n; ++i) {
      ASSERT_EQ(added[i], start[i] + fresh[i]) << plan->Name() << ": weight " << i;
    }
  }
}

// Sets the algorithm of the plans made in a scope and puts the one before back.
class AlgorithmScope {
 public:
  explicit AlgorithmScope(CpuConvAlgorithm algorithm) : before_(SetCpuConvAlgorithm(algorithm)) {}
  ~AlgorithmScope() { SetCpuConvAlgorithm(before_); }
  AlgorithmScope(const AlgorithmScope&) = delete;
  AlgorithmScope& operator=(const AlgorithmScope&) = delete;

 private:
  CpuConvAlgorithm before_;
};

bool IsWinograd(const ConvolutionPlan& plan) {
  return plan.Name().find("wino") != std::string::npos;
}

// Whether oneDNN offers Winograd on this CPU (AVX-512): a plan of a shape it takes, forced.
bool WinogradOffered() {
  if (!CORTADO_WITH_ONEDNN) return false;
  AlgorithmScope scope(CpuConvAlgorithm::kWinograd);
  auto plan = MakeFastConvolution(Shape(1, 16, 8, 8, 16, 3, 1, 1, 1, 1, false));
  return plan != nullptr && IsWinograd(*plan);
}

// Winograd's F(4x4, 3x3), forced on shapes kAuto leaves direct: every pass against the six loops
// (to the same tolerance: its rounding is about 1e-6 of the values here), gradients accumulated.
class WinogradConvolutionTest : public ::testing::TestWithParam<ConvolutionShape> {};

TEST_P(WinogradConvolutionTest, MatchesDirectConvolution) {
  if (!WinogradOffered()) GTEST_SKIP() << "oneDNN offers no Winograd convolution on this CPU";
  const ConvolutionShape s = GetParam();
  AlgorithmScope scope(CpuConvAlgorithm::kWinograd);
  auto plan = MakeFastConvolution(s);
  ASSERT_NE(plan, nullptr);
  ASSERT_TRUE(IsWinograd(*plan)) << plan->Name();
  ExpectMatchesDirect(s, plan.get());
  // In blocked layouts (the nets' channel blocks) the same.
  auto blocked = MakeFastConvolution(s, CpuBlocks{16, 16});
  ASSERT_NE(blocked, nullptr);
  EXPECT_TRUE(IsWinograd(*blocked)) << blocked->Name();
}

INSTANTIATE_TEST_SUITE_P(Shapes, WinogradConvolutionTest,
                         ::testing::Values(Shape(2, 64, 9, 10, 64, 3, 1, 1, 1, 1, true),
                                           Shape(1, 32, 8, 7, 48, 3, 0, 1, 1, 1, false)));

TEST(WinogradRuleTest, ChoosesResNetsMiddleLayersAlone) {
  // ResNet-50's 3x3 layers at batch 8: Winograd from 56x56 to 14x14, direct at 7x7 (32 tiles).
  EXPECT_TRUE(WinogradSuits(Shape(8, 64, 56, 56, 64, 3, 1, 1, 1, 1, false)));
  EXPECT_TRUE(WinogradSuits(Shape(8, 128, 28, 28, 128, 3, 1, 1, 1, 1, false)));
  EXPECT_TRUE(WinogradSuits(Shape(8, 256, 14, 14, 256, 3, 1, 1, 1, 1, false)));
  EXPECT_FALSE(WinogradSuits(Shape(8, 512, 7, 7, 512, 3, 1, 1, 1, 1, false)));
  EXPECT_TRUE(WinogradSuits(Shape(16, 512, 7, 7, 512, 3, 1, 1, 1, 1, false)));
  // Few channels, strides, dilation, groups and other kernels: direct.
  EXPECT_FALSE(WinogradSuits(Shape(8, 32, 32, 32, 64, 3, 1, 1, 1, 1, false)));
  EXPECT_FALSE(WinogradSuits(Shape(8, 64, 32, 32, 32, 3, 1, 1, 1, 1, false)));
  EXPECT_FALSE(WinogradSuits(Shape(8, 64, 56, 56, 64, 3, 1, 2, 1, 1, false)));
  EXPECT_FALSE(WinogradSuits(Shape(8, 64, 56, 56, 64, 3, 2, 1, 2, 1, false)));
  EXPECT_FALSE(WinogradSuits(Shape(8, 64, 56, 56, 64, 3, 1, 1, 1, 2, false)));
  EXPECT_FALSE(WinogradSuits(Shape(8, 64, 56, 56, 64, 5, 2, 1, 1, 1, false)));
  EXPECT_FALSE(WinogradSuits(Shape(8, 64, 56, 56, 64, 1, 0, 1, 1, 1, false)));
}

TEST(WinogradRuleTest, PlansFollowTheAlgorithmSet) {
  if (!WinogradOffered()) GTEST_SKIP() << "oneDNN offers no Winograd convolution on this CPU";
  const ConvolutionShape suits = Shape(8, 64, 28, 28, 64, 3, 1, 1, 1, 1, false);
  const ConvolutionShape small = Shape(2, 16, 8, 8, 16, 3, 1, 1, 1, 1, false);
  {
    AlgorithmScope scope(CpuConvAlgorithm::kAuto);
    EXPECT_TRUE(IsWinograd(*MakeFastConvolution(suits)));
    EXPECT_FALSE(IsWinograd(*MakeFastConvolution(small)));
  }
  {
    AlgorithmScope scope(CpuConvAlgorithm::kDirect);
    EXPECT_FALSE(IsWinograd(*MakeFastConvolution(suits)));
  }
  {
    AlgorithmScope scope(CpuConvAlgorithm::kWinograd);
    EXPECT_TRUE(IsWinograd(*MakeFastConvolution(small)));
    // Where oneDNN has no Winograd (a stride of 2), the direct algorithm.
    EXPECT_FALSE(IsWinograd(*MakeFastConvolution(Shape(2, 16, 8, 8, 16, 3, 1, 2, 1, 1, false))));
  }
}

}  // namespace
}  // namespace cortado::math
