// SPDX-License-Identifier: Apache-2.0
#include "layers/crop_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::vector<float> Data(const Tensor& t) {
  return std::vector<float>(t.cpu_data(), t.cpu_data() + t.count());
}

void FillIota(Tensor* t) {
  for (int i = 0; i < t->count(); ++i) t->mutable_cpu_data()[i] = static_cast<float>(i);
}

TEST(CropLayerTest, Shapes) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 4, 6, 6}), ref({1, 2, 3, 3}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'crop' type: 'Crop'"), &ctx);
  layer->Initialize({&in, &ref}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 4, 3, 3}));

  auto axis1 =
      CreateLayer(testing::LayerParam("name: 'crop' type: 'Crop' crop_param { axis: 1 }"), &ctx);
  axis1->Initialize({&in, &ref}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 2, 3, 3}));

  auto last = CreateLayer(
      testing::LayerParam("name: 'crop' type: 'Crop' crop_param { axis: -1 offset: 3 }"), &ctx);
  last->Initialize({&in, &ref}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 4, 6, 3}));
}

TEST(CropLayerTest, ForwardOneOffset) {
  Context ctx(Device::Cpu(), 1701);
  // bottom 0 holds 0..19 as a 4 x 5 image; offset 1 on both axes keeps rows 1-2, columns 1-3.
  Tensor in({1, 1, 4, 5}), ref({1, 1, 2, 3}), top;
  FillIota(&in);
  auto layer =
      CreateLayer(testing::LayerParam("name: 'crop' type: 'Crop' crop_param { offset: 1 }"), &ctx);
  layer->Initialize({&in, &ref}, {&top});
  layer->Forward({&in, &ref}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{6, 7, 8, 11, 12, 13}));
}

TEST(CropLayerTest, ForwardOffsetPerAxisAndBackward) {
  Context ctx(Device::Cpu(), 1701);
  // Offsets (1, 2): rows 1-2, columns 2-4 of the 4 x 5 image 0..19.
  Tensor in({1, 1, 4, 5}), ref({1, 1, 2, 3}), top;
  FillIota(&in);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'crop' type: 'Crop' crop_param { offset: 1 offset: 2 }"), &ctx);
  layer->Initialize({&in, &ref}, {&top});
  layer->Forward({&in, &ref}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{7, 8, 9, 12, 13, 14}));
  // Backward writes the top diff into the window and zeros elsewhere.
  for (int i = 0; i < 6; ++i) top.mutable_cpu_diff()[i] = static_cast<float>(i + 1);
  for (int i = 0; i < 20; ++i) in.mutable_cpu_diff()[i] = -1.0f;
  layer->Backward({&top}, {true, false}, {&in, &ref});
  EXPECT_EQ(std::vector<float>(in.cpu_diff(), in.cpu_diff() + 20),
            (std::vector<float>{0, 0, 0, 0, 0,  //
                                0, 0, 1, 2, 3,  //
                                0, 0, 4, 5, 6,  //
                                0, 0, 0, 0, 0}));
}

TEST(CropLayerTest, ForwardAxis1) {
  Context ctx(Device::Cpu(), 1701);
  // 1 x 3 x 2 x 2 cropped from axis 1 to 1 x 1 x 1 x 1 at offset 1: element (0, 1, 1, 1) = 7.
  Tensor in({1, 3, 2, 2}), ref({1, 1, 1, 1}), top;
  FillIota(&in);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'crop' type: 'Crop' crop_param { axis: 1 offset: 1 }"), &ctx);
  layer->Initialize({&in, &ref}, {&top});
  layer->Forward({&in, &ref}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{7}));
}

TEST(CropLayerTest, Gradient) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 2, 4, 5}), ref({2, 2, 2, 3}), top;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'crop' type: 'Crop' crop_param { offset: 1 offset: 2 }"), &ctx);
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  testing::GradientChecker(options).Check(layer.get(), {&in, &ref}, {&top});
}

TEST(CropLayerTest, GradientAxis1) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 3, 3}), ref({2, 2, 2, 2}), top;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'crop' type: 'Crop' crop_param { axis: 1 offset: 1 }"), &ctx);
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  testing::GradientChecker(options).Check(layer.get(), {&in, &ref}, {&top});
}

TEST(CropLayerTest, CropLargerThanBottomIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({1, 1, 4, 5}), ref({1, 1, 3, 3}), top;
  auto layer =
      CreateLayer(testing::LayerParam("name: 'crop' type: 'Crop' crop_param { offset: 2 }"), &ctx);
  try {
    layer->Initialize({&in, &ref}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'crop'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 1 4 5 (20)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 1 3 3 (9)"), std::string::npos) << msg;
  }
  Tensor big({1, 1, 5, 5});
  auto no_offset = CreateLayer(testing::LayerParam("name: 'crop' type: 'Crop'"), &ctx);
  EXPECT_THROW(no_offset->Initialize({&in, &big}, {&top}), Error);
}

TEST(CropLayerTest, WrongNumberOfOffsetsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({1, 1, 4, 5}), ref({1, 1, 2, 2}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'crop' type: 'Crop' crop_param { offset: 0 offset: 0 offset: 0 }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&in, &ref}, {&top}), Error);
}

TEST(CropLayerTest, ReferenceWithFewerAxesIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({1, 1, 4, 5}), ref({1, 1, 2}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'crop' type: 'Crop'"), &ctx);
  EXPECT_THROW(layer->Initialize({&in, &ref}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
