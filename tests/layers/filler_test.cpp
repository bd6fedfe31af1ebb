// SPDX-License-Identifier: Apache-2.0
#include "layers/filler.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

caffe::FillerParameter Filler(const std::string& type) {
  caffe::FillerParameter p;
  p.set_type(type);
  return p;
}

double Mean(const Tensor& t) {
  double s = 0;
  for (int i = 0; i < t.count(); ++i) s += t.cpu_data()[i];
  return s / t.count();
}

double Variance(const Tensor& t) {
  double m = Mean(t), s = 0;
  for (int i = 0; i < t.count(); ++i) s += (t.cpu_data()[i] - m) * (t.cpu_data()[i] - m);
  return s / t.count();
}

TEST(FillerTest, Constant) {
  Tensor t({2, 3, 4, 5});
  auto p = Filler("constant");
  p.set_value(3.5f);
  Rng rng(1);
  Fill(p, rng, &t);
  for (int i = 0; i < t.count(); ++i) EXPECT_EQ(t.cpu_data()[i], 3.5f);
}

TEST(FillerTest, UniformStaysInRange) {
  Tensor t({1000});
  auto p = Filler("uniform");
  p.set_min(-2.0f);
  p.set_max(3.0f);
  Rng rng(1);
  Fill(p, rng, &t);
  for (int i = 0; i < t.count(); ++i) {
    EXPECT_GE(t.cpu_data()[i], -2.0f);
    EXPECT_LT(t.cpu_data()[i], 3.0f);
  }
  EXPECT_NEAR(Mean(t), 0.5, 0.15);
}

TEST(FillerTest, GaussianMoments) {
  Tensor t({100, 100});
  auto p = Filler("gaussian");
  p.set_mean(1.0f);
  p.set_std(2.0f);
  Rng rng(1);
  Fill(p, rng, &t);
  EXPECT_NEAR(Mean(t), 1.0, 0.05);
  EXPECT_NEAR(Variance(t), 4.0, 0.2);
}

TEST(FillerTest, SparseGaussianKeepsAboutSparseNonZerosPerOutput) {
  Tensor t({50, 200});
  auto p = Filler("gaussian");
  p.set_sparse(10);
  Rng rng(1);
  Fill(p, rng, &t);
  int nonzero = 0;
  for (int i = 0; i < t.count(); ++i) nonzero += t.cpu_data()[i] != 0.0f;
  // p = sparse / shape(0) = 0.2 of 10000 elements.
  EXPECT_NEAR(nonzero, 2000, 200);
}

TEST(FillerTest, PositiveUnitballRowsSumToOne) {
  Tensor t({4, 3, 5});
  Rng rng(1);
  Fill(Filler("positive_unitball"), rng, &t);
  for (int n = 0; n < 4; ++n) {
    double s = 0;
    for (int j = 0; j < 15; ++j) {
      EXPECT_GE(t.cpu_data()[n * 15 + j], 0.0f);
      s += t.cpu_data()[n * 15 + j];
    }
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

TEST(FillerTest, XavierAndMsraVariance) {
  // fan_in = count / shape(0) = 3*5*5 = 75.
  Tensor t({400, 3, 5, 5});
  Rng rng(1);
  Fill(Filler("xavier"), rng, &t);
  EXPECT_NEAR(Mean(t), 0.0, 0.01);
  EXPECT_NEAR(Variance(t), 1.0 / 75.0, 1.0 / 75.0 * 0.05);  // uniform(-a, a): a^2/3 = 1/fan_in
  Fill(Filler("msra"), rng, &t);
  EXPECT_NEAR(Variance(t), 2.0 / 75.0, 2.0 / 75.0 * 0.05);
  auto avg = Filler("xavier");
  avg.set_variance_norm(caffe::FillerParameter::AVERAGE);
  // fan_out = count / shape(1) = 400*25 = 10000; n = (75 + 10000) / 2.
  Fill(avg, rng, &t);
  EXPECT_NEAR(Variance(t), 1.0 / 5037.5, 1.0 / 5037.5 * 0.05);
}

TEST(FillerTest, BilinearMatchesHandComputedKernel) {
  Tensor t({1, 1, 4, 4});
  Rng rng(1);
  Fill(Filler("bilinear"), rng, &t);
  // width 4: f = 2, c = 3/4; the 1-D profile is 1 - |x/2 - 0.75| = 0.25, 0.75, 0.75, 0.25.
  const float profile[4] = {0.25f, 0.75f, 0.75f, 0.25f};
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) EXPECT_FLOAT_EQ(t.cpu_data()[y * 4 + x], profile[y] * profile[x]);
  }
  Tensor bad({1, 1, 3, 4});
  EXPECT_THROW(Fill(Filler("bilinear"), rng, &bad), Error);
}

TEST(FillerTest, UnknownTypeListsKnownOnes) {
  Tensor t({3});
  Rng rng(1);
  try {
    Fill(Filler("glorious"), rng, &t);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("glorious"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("xavier"), std::string::npos);
  }
}

}  // namespace
}  // namespace cortado
