// SPDX-License-Identifier: Apache-2.0
// math/gpu.hpp against math/math.hpp on the same inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/synced_memory.hpp"
#include "core/tensor.hpp"
#include "math/gpu.hpp"
#include "math/math.hpp"
#include "support/gpu_check.hpp"

namespace cortado::testing {
namespace {

class MathGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device: GPU test skipped";
    ctx_ = std::make_unique<Context>(Device::Cuda(0), 7);
  }

  // Fills t with values uniform in [lo, hi), the same for the same seed.
  static void Randomize(Tensor& t, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    float* p = t.mutable_cpu_data();
    for (int i = 0; i < t.count(); ++i) p[i] = dist(rng);
  }

  static void ExpectNear(const Tensor& expected, const Tensor& actual, float tol) {
    ASSERT_EQ(expected.count(), actual.count());
    for (int i = 0; i < expected.count(); ++i) {
      const float e = expected.cpu_data()[i];
      ASSERT_NEAR(e, actual.cpu_data()[i], tol * std::max(1.0f, std::fabs(e))) << "element " << i;
    }
  }

  std::unique_ptr<Context> ctx_;
};

TEST_F(MathGpuTest, GemmAllTranspositionsMatchCpu) {
  const int m = 37, n = 29, k = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a({m * k});
      Randomize(a, 1);
      Tensor b({k * n});
      Randomize(b, 2);
      Tensor c({m * n});
      Randomize(c, 3);
      Tensor expected({m * n});
      expected.CopyFrom(c);
      math::Gemm(ta, tb, m, n, k, 0.7f, a.cpu_data(), b.cpu_data(), 0.4f,
                 expected.mutable_cpu_data());
      math::gpu::Gemm(*ctx_, ta, tb, m, n, k, 0.7f, a.gpu_data(), b.gpu_data(), 0.4f,
                      c.mutable_gpu_data());
      ExpectNear(expected, c, 1e-4f);
    }
  }
}

TEST_F(MathGpuTest, GemvBothWaysMatchesCpu) {
  const int m = 45, n = 31;
  for (bool ta : {false, true}) {
    Tensor a({m * n});
    Randomize(a, 4);
    Tensor x({ta ? m : n});
    Randomize(x, 5);
    Tensor y({ta ? n : m});
    Randomize(y, 6);
    Tensor expected({y.count()});
    expected.CopyFrom(y);
    math::Gemv(ta, m, n, -1.5f, a.cpu_data(), x.cpu_data(), 2.0f, expected.mutable_cpu_data());
    math::gpu::Gemv(*ctx_, ta, m, n, -1.5f, a.gpu_data(), x.gpu_data(), 2.0f, y.mutable_gpu_data());
    ExpectNear(expected, y, 1e-4f);
  }
}

TEST_F(MathGpuTest, ReductionsMatchCpu) {
  // Large enough for many blocks and a ragged tail.
  const int n = 300001;
  Tensor x({n});
  Randomize(x, 8);
  Tensor y({n});
  Randomize(y, 9);
  EXPECT_NEAR(math::Dot(n, x.cpu_data(), y.cpu_data()),
              math::gpu::Dot(*ctx_, n, x.gpu_data(), y.gpu_data()), 1e-2f);
  EXPECT_NEAR(math::Asum(n, x.cpu_data()), math::gpu::Asum(*ctx_, n, x.gpu_data()), 1e-1f);
  EXPECT_NEAR(math::Sum(n, x.cpu_data()), math::gpu::Sum(*ctx_, n, x.gpu_data()), 1e-1f);
  const float sumsq = math::Dot(n, x.cpu_data(), x.cpu_data());
  EXPECT_NEAR(sumsq, math::gpu::Sumsq(*ctx_, n, x.gpu_data()), 1e-5f * sumsq);
  EXPECT_EQ(math::gpu::Sum(*ctx_, 0, x.gpu_data()), 0.0f);
}

TEST_F(MathGpuTest, ElementwiseMatchCpu) {
  const int n = 1000;
  Tensor a({n});
  Randomize(a, 10, 0.1f, 2.0f);
  Tensor b({n});
  Randomize(b, 11, 0.1f, 2.0f);
  Tensor cpu({n}), gpu({n});
  auto check = [&](const char* what) {
    SCOPED_TRACE(what);
    ExpectNear(cpu, gpu, 1e-5f);
  };
  math::Add(n, a.cpu_data(), b.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Add(*ctx_, n, a.gpu_data(), b.gpu_data(), gpu.mutable_gpu_data());
  check("Add");
  math::Sub(n, a.cpu_data(), b.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Sub(*ctx_, n, a.gpu_data(), b.gpu_data(), gpu.mutable_gpu_data());
  check("Sub");
  math::Mul(n, a.cpu_data(), b.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Mul(*ctx_, n, a.gpu_data(), b.gpu_data(), gpu.mutable_gpu_data());
  check("Mul");
  math::Div(n, a.cpu_data(), b.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Div(*ctx_, n, a.gpu_data(), b.gpu_data(), gpu.mutable_gpu_data());
  check("Div");
  math::Sqr(n, a.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Sqr(*ctx_, n, a.gpu_data(), gpu.mutable_gpu_data());
  check("Sqr");
  math::Sqrt(n, a.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Sqrt(*ctx_, n, a.gpu_data(), gpu.mutable_gpu_data());
  check("Sqrt");
  math::Exp(n, a.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Exp(*ctx_, n, a.gpu_data(), gpu.mutable_gpu_data());
  check("Exp");
  math::Log(n, a.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Log(*ctx_, n, a.gpu_data(), gpu.mutable_gpu_data());
  check("Log");
  math::Powx(n, a.cpu_data(), 1.7f, cpu.mutable_cpu_data());
  math::gpu::Powx(*ctx_, n, a.gpu_data(), 1.7f, gpu.mutable_gpu_data());
  check("Powx");
  Tensor s({n});
  Randomize(s, 12);
  math::Sign(n, s.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Sign(*ctx_, n, s.gpu_data(), gpu.mutable_gpu_data());
  check("Sign");
  math::Abs(n, s.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Abs(*ctx_, n, s.gpu_data(), gpu.mutable_gpu_data());
  check("Abs");
  cpu.CopyFrom(a);
  gpu.CopyFrom(a);
  math::Axpby(n, 0.3f, b.cpu_data(), -2.0f, cpu.mutable_cpu_data());
  math::gpu::Axpby(*ctx_, n, 0.3f, b.gpu_data(), -2.0f, gpu.mutable_gpu_data());
  check("Axpby");
  math::Axpy(n, 1.5f, b.cpu_data(), cpu.mutable_cpu_data());
  math::gpu::Axpy(*ctx_, n, 1.5f, b.gpu_data(), gpu.mutable_gpu_data());
  check("Axpy");
  math::Scale(n, -0.5f, cpu.mutable_cpu_data());
  math::gpu::Scale(*ctx_, n, -0.5f, gpu.mutable_gpu_data());
  check("Scale");
  math::AddScalar(n, 3.0f, cpu.mutable_cpu_data());
  math::gpu::AddScalar(*ctx_, n, 3.0f, gpu.mutable_gpu_data());
  check("AddScalar");
  math::Set(n, 2.5f, cpu.mutable_cpu_data());
  math::gpu::Set(*ctx_, n, 2.5f, gpu.mutable_gpu_data());
  check("Set");
}

TEST_F(MathGpuTest, RandomNumbersRepeatWithTheSeedAndHaveTheRightMoments) {
  const int n = 1 << 20;
  Tensor u({n}), g({n}), again({n});
  ctx_->Seed(99);
  math::gpu::RngUniform(*ctx_, n, -2.0f, 3.0f, u.mutable_gpu_data());
  math::gpu::RngGaussian(*ctx_, n, 1.0f, 2.0f, g.mutable_gpu_data());
  ctx_->Seed(99);
  math::gpu::RngUniform(*ctx_, n, -2.0f, 3.0f, again.mutable_gpu_data());
  for (int i = 0; i < n; ++i) ASSERT_EQ(u.cpu_data()[i], again.cpu_data()[i]);
  double sum = 0, sq = 0;
  float lo = 1e9f, hi = -1e9f;
  for (int i = 0; i < n; ++i) {
    const float v = u.cpu_data()[i];
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  EXPECT_GE(lo, -2.0f);
  EXPECT_LT(hi, 3.0f);
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  sum = 0;
  for (int i = 0; i < n; ++i) {
    sum += g.cpu_data()[i];
    sq += g.cpu_data()[i] * g.cpu_data()[i];
  }
  const double mean = sum / n;
  EXPECT_NEAR(mean, 1.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), 2.0, 0.01);
  // The next draw continues the sequence rather than repeating it.
  math::gpu::RngUniform(*ctx_, n, -2.0f, 3.0f, again.mutable_gpu_data());
  int same = 0;
  for (int i = 0; i < n; ++i) same += u.cpu_data()[i] == again.cpu_data()[i];
  EXPECT_LT(same, 100);
  Tensor bits({n});
  math::gpu::RngBernoulli(*ctx_, n, 0.3f, reinterpret_cast<unsigned int*>(bits.mutable_gpu_data()));
  const auto* b = reinterpret_cast<const unsigned int*>(bits.cpu_data());
  int ones = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_LE(b[i], 1u);
    ones += b[i];
  }
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.3, 0.005);
}

// 300 tensors from 1 to 2.5 million elements (cut into pieces, several launches): every element
// of every tensor is zeroed, and the SGD step matches the rule written out on the host.
TEST_F(MathGpuTest, MultiTensorKernelsCoverEveryElement) {
  std::vector<std::unique_ptr<Tensor>> data, diff, history;
  std::vector<math::gpu::DeviceSpan> spans;
  std::vector<math::gpu::SgdTensor> sgd;
  for (int t = 0; t < 300; ++t) {
    const int count = t == 7 ? 2500000 : t == 100 ? (1 << 20) + 1 : 1 + (t * 37) % 500;
    for (auto* set : {&data, &diff, &history}) {
      set->push_back(std::make_unique<Tensor>(std::vector<int>{count}));
      Randomize(*set->back(), 1000 * t + static_cast<unsigned>(set->size()));
    }
    spans.push_back({history.back()->mutable_gpu_data(), count});
    sgd.push_back({data.back()->mutable_gpu_data(), diff.back()->mutable_gpu_data(),
                   history.back()->mutable_gpu_data(), count, 0.01f * (1 + t % 3),
                   0.001f * (t % 2)});
  }
  // Expected step, from host copies taken before the device changes anything.
  const float momentum = 0.9f, diff_scale = 0.5f;
  std::vector<std::vector<float>> want_data, want_history;
  for (size_t t = 0; t < data.size(); ++t) {
    const int n = data[t]->count();
    std::vector<float> d(data[t]->cpu_data(), data[t]->cpu_data() + n);
    std::vector<float> h(n);
    for (int i = 0; i < n; ++i) {
      const float g = diff[t]->cpu_data()[i] * diff_scale + sgd[t].decay * d[i];
      h[i] = sgd[t].rate * g + momentum * history[t]->cpu_data()[i];
      d[i] -= h[i];
    }
    want_data.push_back(std::move(d));
    want_history.push_back(std::move(h));
  }
  // Hand the device copies the lead again (the host reads above left both current).
  for (auto* set : {&data, &diff, &history}) {
    for (auto& t : *set) t->mutable_gpu_data();
  }
  math::gpu::SgdUpdateMany(*ctx_, sgd, momentum, diff_scale);
  for (size_t t = 0; t < data.size(); ++t) {
    const int n = data[t]->count();
    for (int i = 0; i < n; ++i) {
      ASSERT_NEAR(history[t]->cpu_data()[i], want_history[t][i], 1e-6f) << t << " " << i;
      ASSERT_EQ(diff[t]->cpu_data()[i], history[t]->cpu_data()[i]) << t << " " << i;
      ASSERT_NEAR(data[t]->cpu_data()[i], want_data[t][i], 1e-6f) << t << " " << i;
    }
  }
  for (auto& t : history) t->mutable_gpu_data();
  math::gpu::ZeroMany(*ctx_, spans);
  for (size_t t = 0; t < history.size(); ++t) {
    for (int i = 0; i < history[t]->count(); ++i) {
      ASSERT_EQ(history[t]->cpu_data()[i], 0.0f) << "tensor " << t << " element " << i;
    }
  }
}

TEST_F(MathGpuTest, Im2colAndCol2imMatchCpu) {
  // channels, height, width, kernel, pad, stride, dilation
  const int c = 3, h = 9, w = 7, kh = 3, kw = 2, ph = 1, pw = 0, sh = 2, sw = 1, dh = 2, dw = 1;
  const int oh = (h + 2 * ph - (dh * (kh - 1) + 1)) / sh + 1;
  const int ow = (w + 2 * pw - (dw * (kw - 1) + 1)) / sw + 1;
  const int cols = c * kh * kw * oh * ow;
  Tensor image({c * h * w});
  Randomize(image, 13);
  Tensor cpu({cols});
  Tensor gpu({cols});
  math::Im2col(image.cpu_data(), c, h, w, kh, kw, ph, pw, sh, sw, dh, dw, cpu.mutable_cpu_data());
  math::gpu::Im2col(*ctx_, image.gpu_data(), c, h, w, kh, kw, ph, pw, sh, sw, dh, dw,
                    gpu.mutable_gpu_data());
  ExpectNear(cpu, gpu, 0.0f);
  Tensor columns({cols});
  Randomize(columns, 14);
  Tensor back_cpu({c * h * w});
  Tensor back_gpu({c * h * w});
  math::Col2im(columns.cpu_data(), c, h, w, kh, kw, ph, pw, sh, sw, dh, dw,
               back_cpu.mutable_cpu_data());
  math::gpu::Col2im(*ctx_, columns.gpu_data(), c, h, w, kh, kw, ph, pw, sh, sw, dh, dw,
                    back_gpu.mutable_gpu_data());
  ExpectNear(back_cpu, back_gpu, 1e-5f);

  // The same geometry through the N-D versions, and a 3-D one.
  const int image_shape[] = {c, h, w}, column_shape[] = {c * kh * kw, oh, ow};
  const int kernel[] = {kh, kw}, pad[] = {ph, pw}, stride[] = {sh, sw}, dilation[] = {dh, dw};
  math::gpu::Im2colNd(*ctx_, image.gpu_data(), 2, image_shape, column_shape, kernel, pad, stride,
                      dilation, gpu.mutable_gpu_data());
  ExpectNear(cpu, gpu, 0.0f);
  math::gpu::Col2imNd(*ctx_, columns.gpu_data(), 2, image_shape, column_shape, kernel, pad, stride,
                      dilation, back_gpu.mutable_gpu_data());
  ExpectNear(back_cpu, back_gpu, 1e-5f);

  const int shape3[] = {2, 5, 4, 6}, kernel3[] = {2, 3, 2}, pad3[] = {1, 0, 1},
            stride3[] = {1, 2, 2}, dilation3[] = {2, 1, 1};
  int col3[4] = {2 * 2 * 3 * 2, 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    col3[i + 1] =
        (shape3[i + 1] + 2 * pad3[i] - (dilation3[i] * (kernel3[i] - 1) + 1)) / stride3[i] + 1;
  }
  const int n3 = col3[0] * col3[1] * col3[2] * col3[3], image3 = 2 * 5 * 4 * 6;
  Tensor img3({image3});
  Randomize(img3, 15);
  Tensor c3_cpu({n3});
  Tensor c3_gpu({n3});
  math::Im2colNd(img3.cpu_data(), 3, shape3, col3, kernel3, pad3, stride3, dilation3,
                 c3_cpu.mutable_cpu_data());
  math::gpu::Im2colNd(*ctx_, img3.gpu_data(), 3, shape3, col3, kernel3, pad3, stride3, dilation3,
                      c3_gpu.mutable_gpu_data());
  ExpectNear(c3_cpu, c3_gpu, 0.0f);
  Tensor cols3({n3});
  Randomize(cols3, 16);
  Tensor i3_cpu({image3});
  Tensor i3_gpu({image3});
  math::Col2imNd(cols3.cpu_data(), 3, shape3, col3, kernel3, pad3, stride3, dilation3,
                 i3_cpu.mutable_cpu_data());
  math::gpu::Col2imNd(*ctx_, cols3.gpu_data(), 3, shape3, col3, kernel3, pad3, stride3, dilation3,
                      i3_gpu.mutable_gpu_data());
  ExpectNear(i3_cpu, i3_gpu, 1e-5f);
}

TEST_F(MathGpuTest, MissingDeviceIsAClearError) {
  const int count = Context::CudaDeviceCount();
  try {
    Context bad(Device::Cuda(count + 3));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device " + std::to_string(count + 3)),
              std::string::npos)
        << e.what();
  }
}

TEST_F(MathGpuTest, OutOfMemoryNamesTheDeviceAndSize) {
  // Far more than any card has: 1 PiB.
  Tensor huge;
  try {
    SyncedMemory memory(size_t{1} << 50);
    memory.mutable_device_data();
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(size_t{1} << 50)), std::string::npos) << message;
  }
  // The device is still usable afterwards.
  Tensor t({4});
  math::gpu::Set(*ctx_, 4, 1.0f, t.mutable_gpu_data());
  EXPECT_EQ(t.cpu_data()[3], 1.0f);
}

}  // namespace
}  // namespace cortado::testing
