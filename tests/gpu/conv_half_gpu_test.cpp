// SPDX-License-Identifier: Apache-2.0
// Convolution on half tensors (Layer::HalfTensors): under mixed precision the cuDNN layer reads
// its bottoms and writes its tops (and their diffs) as float16 or bfloat16, the weights, bias and
// their gradients staying float32. Against the same layer on the CPU in float32, in both 16-bit
// types and both layouts cuDNN may see the tensors in (NHWC copies, or the NCHW tensors
// themselves: CORTADO_HALF_CONV_LAYOUT, set here through its test hook since the variable is read
// once per process), with the GPU blobs kept in the half type and kept in float32 (the layer then
// works on their 16-bit twins): the top, the bottom diffs and the weight and bias gradients. The
// shapes take every path of the copies between the layouts: a few channels, odd channel counts,
// even ones with tiles of 32 and 64 positions, one output position. Each test skips without a
// GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/context.hpp"
#include "core/half_type.hpp"
#include "core/tensor.hpp"
#include "math/convolution.hpp"
#include "support/gpu_check.hpp"
#include "support/scoped_env.hpp"

namespace cortado::testing {
namespace {

// Half the distance from 1 to the next value: 2^-11 for float16, 2^-8 for bfloat16.
float UnitRoundoff(HalfType type) {
  return std::ldexp(1.0f, type == HalfType::kFloat16 ? -11 : -8);
}

// The GPU side rounds the inputs and weights once each, cuDNN's float32 sums once into the half
// type, and the bias onto the output once more: the sums' errors grow with the magnitude of their
// terms, which the largest sum of a tensor stands for, so each element must be within eight units
// of the type's rounding of that (of 1 where the sums are all small).
float Tolerance(HalfType type) { return 8.0f * UnitRoundoff(type); }

void ExpectNear(const Tensor& expected, const Tensor& actual, bool diff, float tolerance,
                const std::string& what) {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  const float* e = diff ? expected.cpu_diff() : expected.cpu_data();
  const float* a = diff ? actual.cpu_diff() : actual.cpu_data();
  float scale = 1.0f;
  for (int i = 0; i < expected.count(); ++i) scale = std::max(scale, std::fabs(e[i]));
  int failures = 0;
  for (int i = 0; i < expected.count() && failures < 10; ++i) {
    if (!(std::fabs(e[i] - a[i]) <= tolerance * scale)) {  // NaN fails too
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": CPU " << e[i] << ", GPU " << a[i]
                    << " (tolerance " << tolerance << " x " << scale << ")";
    }
  }
}

// Plans made in its scope run cuDNN on half tensors in `layout`.
class ScopedLayout {
 public:
  explicit ScopedLayout(math::HalfConvLayout layout) {
#if CORTADO_WITH_CUDA
    previous_ = math::SetHalfTensorConvLayout(layout);
#else
    (void)layout;
#endif
  }
  ~ScopedLayout() {
#if CORTADO_WITH_CUDA
    math::SetHalfTensorConvLayout(previous_);
#endif
  }
  ScopedLayout(const ScopedLayout&) = delete;
  ScopedLayout& operator=(const ScopedLayout&) = delete;

 private:
  math::HalfConvLayout previous_ = math::HalfConvLayout::kAuto;
};

struct ConvCase {
  const char* what;
  std::string param;  // the convolution_param fields besides the fillers
  std::vector<int> shape;
  int bottoms = 1;
};

// Weights of variance 1 / fan-in (xavier) keep every sum near 1 whatever its length.
caffe::LayerParameter ConvParam(const std::string& fields) {
  return LayerParam("name: 'conv' type: 'Convolution' convolution_param { " + fields +
                    " weight_filler { type: 'xavier' } bias_filler { type: 'gaussian' std: 0.5 } "
                    "}");
}

// `c` on a CPU context and on `gpu` (whose half type is `type`), the GPU's blobs kept in `type`
// when `homes`: the GPU layer must take half tensors of `expected` (kNone: float32), and match.
// With `homes`, nhwc_src and nhwc_dst keep the GPU bottoms and tops channels-last
// (Tensor::home_nhwc), as a net's channels-last blobs are.
void CheckConvolution(Context& gpu, HalfType type, const ConvCase& c, bool homes, HalfType expected,
                      bool nhwc_src = false, bool nhwc_dst = false) {
  SCOPED_TRACE(std::string(c.what) + (homes ? ", blobs in " : ", float32 blobs, twins in ") +
               HalfTypeName(type) + (nhwc_src ? ", bottoms NHWC" : "") +
               (nhwc_dst ? ", tops NHWC" : ""));
  Context cpu(Device::Cpu(), 1701);
  const caffe::LayerParameter param = ConvParam(c.param);
  std::mt19937 rng(97);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::unique_ptr<Tensor>> store;
  std::vector<Tensor*> cpu_bottom, gpu_bottom, cpu_top, gpu_top;
  const auto make = [&](bool half_home) {
    store.push_back(std::make_unique<Tensor>());
    if (half_home) store.back()->set_home_type(type);
    return store.back().get();
  };
  for (int b = 0; b < c.bottoms; ++b) {
    cpu_bottom.push_back(make(false));
    gpu_bottom.push_back(make(homes));
    cpu_bottom.back()->Reshape(c.shape);
    gpu_bottom.back()->Reshape(c.shape);
    if (nhwc_src) gpu_bottom.back()->set_home_nhwc(true);
    float* x = cpu_bottom.back()->mutable_cpu_data();
    for (int i = 0; i < cpu_bottom.back()->count(); ++i) x[i] = uniform(rng);
    gpu_bottom.back()->CopyFrom(*cpu_bottom.back());
    cpu_top.push_back(make(false));
    gpu_top.push_back(make(homes));
  }
  std::unique_ptr<Layer> cpu_layer = CreateLayer(param, &cpu);
  std::unique_ptr<Layer> gpu_layer = CreateLayer(param, &gpu);
  cpu_layer->Initialize(cpu_bottom, cpu_top);
  gpu_layer->Initialize(gpu_bottom, gpu_top);
  if (nhwc_dst) {
    for (Tensor* t : gpu_top) t->set_home_nhwc(true);
  }
  ASSERT_EQ(gpu_layer->HalfTensors(), expected);
  ASSERT_EQ(cpu_layer->blobs().size(), gpu_layer->blobs().size());
  for (size_t i = 0; i < cpu_layer->blobs().size(); ++i) {
    gpu_layer->blobs()[i]->CopyFrom(*cpu_layer->blobs()[i]);
  }
  const float tolerance = Tolerance(type);
  cpu_layer->Forward(cpu_bottom, cpu_top);
  gpu_layer->Forward(gpu_bottom, gpu_top);
  for (int t = 0; t < c.bottoms; ++t) {
    ExpectNear(*cpu_top[t], *gpu_top[t], false, tolerance, "top " + std::to_string(t));
  }

  for (int t = 0; t < c.bottoms; ++t) {
    float* dy = cpu_top[t]->mutable_cpu_diff();
    for (int i = 0; i < cpu_top[t]->count(); ++i) dy[i] = uniform(rng);
    gpu_top[t]->CopyFrom(*cpu_top[t], /*copy_diff=*/true);
  }
  for (auto* layer : {cpu_layer.get(), gpu_layer.get()}) {
    for (auto& blob : layer->blobs()) std::fill_n(blob->mutable_cpu_diff(), blob->count(), 0.0f);
  }
  const std::vector<bool> propagate(c.bottoms, true);
  cpu_layer->Backward(cpu_top, propagate, cpu_bottom);
  gpu_layer->Backward(gpu_top, propagate, gpu_bottom);
  for (int b = 0; b < c.bottoms; ++b) {
    ExpectNear(*cpu_bottom[b], *gpu_bottom[b], true, tolerance, "bottom diff " + std::to_string(b));
  }
  ExpectNear(*cpu_layer->blobs()[0], *gpu_layer->blobs()[0], true, tolerance, "weight diff");
  if (cpu_layer->blobs().size() > 1) {
    ExpectNear(*cpu_layer->blobs()[1], *gpu_layer->blobs()[1], true, tolerance, "bias diff");
  }
}

const std::vector<ConvCase>& Cases() {
  static const std::vector<ConvCase> cases = {
      {"3x3 pad 1, 32 -> 32, 9x11", "num_output: 32 kernel_size: 3 pad: 1", {3, 32, 9, 11}},
      {"1x1 40 -> 48, batch 1, 7x7", "num_output: 48 kernel_size: 1", {1, 40, 7, 7}},
      {"1x1 64 -> 256 without bias, 5x6",
       "num_output: 256 kernel_size: 1 bias_term: false",
       {3, 64, 5, 6}},
      {"3x3 stride 2 pad 1, 24 -> 40, 13x11",
       "num_output: 40 kernel_size: 3 stride: 2 pad: 1",
       {3, 24, 13, 11}},
      {"3x3 pad 1 group 2, 10 -> 14, batch 1, 7x9",
       "num_output: 14 kernel_size: 3 pad: 1 group: 2",
       {1, 10, 7, 9}},
      {"5x5 stride 2 pad 2, 3 -> 16, 15x17",
       "num_output: 16 kernel_size: 5 stride: 2 pad: 2",
       {3, 3, 15, 17}},
      {"3x3, 37 -> 21, batch 1, 6x5", "num_output: 21 kernel_size: 3", {1, 37, 6, 5}},
      {"3x3 to one position, 64 -> 48", "num_output: 48 kernel_size: 3", {3, 64, 3, 3}},
      {"1x1 16 -> 32 on two bottoms sharing the weights, 4x4",
       "num_output: 32 kernel_size: 1",
       {2, 16, 4, 4},
       2},
  };
  return cases;
}

struct HalfConvCase {
  HalfType type;
  math::HalfConvLayout layout;
};

class ConvHalfGpuTest : public ::testing::TestWithParam<HalfConvCase> {};

// One GPU context for all: the second run of a shape (the other blobs' type) reuses its plans.
TEST_P(ConvHalfGpuTest, MatchesCpuWithinHalfRounding) {
  CORTADO_REQUIRE_GPU();
  const HalfType type = GetParam().type;
  ScopedLayout layout(GetParam().layout);
  Context gpu(Device::Cuda(0), 1701);
  gpu.MakeCurrent();
  gpu.set_half_compute(type);
  const HalfType expected = CORTADO_WITH_CUDNN ? type : HalfType::kNone;
  for (const ConvCase& c : Cases()) {
    for (bool homes : {true, false}) CheckConvolution(gpu, type, c, homes, expected);
  }
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndLayouts, ConvHalfGpuTest,
    ::testing::Values(HalfConvCase{HalfType::kFloat16, math::HalfConvLayout::kNhwc},
                      HalfConvCase{HalfType::kFloat16, math::HalfConvLayout::kNchw},
                      HalfConvCase{HalfType::kBFloat16, math::HalfConvLayout::kNhwc},
                      HalfConvCase{HalfType::kBFloat16, math::HalfConvLayout::kNchw}),
    [](const ::testing::TestParamInfo<HalfConvCase>& param_info) {
      return std::string(HalfTypeName(param_info.param.type)) +
             (param_info.param.layout == math::HalfConvLayout::kNhwc ? "_nhwc" : "_nchw");
    });

// Channels-last half tensors (Tensor::home_nhwc, as a net keeps them between its convolutions):
// the bottoms, the tops or both in NHWC, read and written by cuDNN as they are, every shape
// above with one bottom (those with a bias add and sum it on NHWC rows), both types.
TEST(ConvHalfTensorsGpuTest, ChannelsLastTensorsMatchCpu) {
  CORTADO_REQUIRE_GPU();
  if (!CORTADO_WITH_CUDNN) GTEST_SKIP() << "no cuDNN in this build";
  for (HalfType type : {HalfType::kFloat16, HalfType::kBFloat16}) {
    Context gpu(Device::Cuda(0), 1701);
    gpu.MakeCurrent();
    gpu.set_half_compute(type);
    for (const ConvCase& c : Cases()) {
      if (c.bottoms != 1) continue;
      for (int sides = 1; sides <= 3; ++sides) {
        CheckConvolution(gpu, type, c, true, type, (sides & 1) != 0, (sides & 2) != 0);
      }
    }
  }
}

// Half tensors only where the layer runs on cuDNN, and not with CORTADO_HALF_TENSORS=0.
TEST(ConvHalfTensorsGpuTest, TakenOnCudnnOnly) {
  CORTADO_REQUIRE_GPU();
  Context gpu(Device::Cuda(0), 3);
  gpu.MakeCurrent();
  gpu.set_half_compute(HalfType::kFloat16);
  Context cpu(Device::Cpu(), 3);
  cpu.set_half_compute(HalfType::kFloat16);
  const auto half_tensors = [](Context* ctx, const std::string& fields,
                               const std::vector<int>& shape) {
    Tensor x(shape), y;
    auto layer = CreateLayer(ConvParam(fields), ctx);
    layer->Initialize({&x}, {&y});
    return layer->HalfTensors();
  };
  const std::vector<int> image = {2, 8, 5, 5};
  EXPECT_EQ(half_tensors(&gpu, "num_output: 8 kernel_size: 3", image),
            CORTADO_WITH_CUDNN ? HalfType::kFloat16 : HalfType::kNone);
  EXPECT_EQ(half_tensors(&gpu, "num_output: 8 kernel_size: 3 engine: CAFFE", image),
            HalfType::kNone)
      << "im2col + GEMM stays float32";
  EXPECT_EQ(half_tensors(&gpu, "num_output: 8 kernel_size: 1", {2, 8, 3, 4, 5}), HalfType::kNone)
      << "a 3-D convolution runs im2col + GEMM";
  EXPECT_EQ(half_tensors(&cpu, "num_output: 8 kernel_size: 3", image), HalfType::kNone)
      << "the CPU computes in float32";
  ScopedEnv off("CORTADO_HALF_TENSORS", "0");
  EXPECT_EQ(half_tensors(&gpu, "num_output: 8 kernel_size: 3", image), HalfType::kNone);
}

#if CORTADO_WITH_CUDNN
// The default layout on half tensors is chosen per shape: NHWC copies where the convolution does
// at least 256 multiply-adds per element transposed (a 3x3 64 -> 64: 576), the tensors' own NCHW
// below (a 1x1 64 -> 256: 102); a layout set for the process applies to every shape.
TEST(ConvHalfTensorsGpuTest, LayoutPerShapeByWorkPerElement) {
  CORTADO_REQUIRE_GPU();
  Context gpu(Device::Cuda(0), 3);
  gpu.MakeCurrent();
  gpu.set_half_compute(HalfType::kFloat16);
  math::ConvolutionShape wide;
  wide.num = 2;
  wide.channels = 64;
  wide.height = wide.width = 8;
  wide.num_output = 64;
  wide.kernel_h = wide.kernel_w = 3;
  wide.pad_h = wide.pad_w = 1;
  math::ConvolutionShape pointwise = wide;
  pointwise.num_output = 256;
  pointwise.kernel_h = pointwise.kernel_w = 1;
  pointwise.pad_h = pointwise.pad_w = 0;
  const auto name = [&](const math::ConvolutionShape& shape) {
    return math::MakeGpuConvolution(gpu, shape, HalfType::kFloat16)->Name();
  };
  {
    ScopedLayout automatic(math::HalfConvLayout::kAuto);
    EXPECT_NE(name(wide).find("NHWC copies"), std::string::npos) << name(wide);
    EXPECT_NE(name(pointwise).find("in NCHW"), std::string::npos) << name(pointwise);
  }
  {
    ScopedLayout nhwc(math::HalfConvLayout::kNhwc);
    EXPECT_NE(name(pointwise).find("NHWC copies"), std::string::npos) << name(pointwise);
  }
  {
    ScopedLayout nchw(math::HalfConvLayout::kNchw);
    EXPECT_NE(name(wide).find("in NCHW"), std::string::npos) << name(wide);
  }
}
#endif

// With CORTADO_HALF_TENSORS=0 the layer keeps float32 tensors and computes as before half
// tensors (the half type on NHWC copies, or TF32 where that pays better): within the same
// rounding of the CPU.
TEST(ConvHalfTensorsGpuTest, FloatTensorsWhenHalfTensorsAreOff) {
  CORTADO_REQUIRE_GPU();
  ScopedEnv off("CORTADO_HALF_TENSORS", "0");
  for (HalfType type : {HalfType::kFloat16, HalfType::kBFloat16}) {
    Context gpu(Device::Cuda(0), 1701);
    gpu.MakeCurrent();
    gpu.set_half_compute(type);
    for (const ConvCase& c : {Cases()[0], Cases()[2]}) {
      CheckConvolution(gpu, type, c, false, HalfType::kNone);
    }
  }
}

}  // namespace
}  // namespace cortado::testing
