// SPDX-License-Identifier: Apache-2.0
#include "data/memory_data_layer.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> Make(Context* ctx, const std::string& params) {
  return CreateLayer(testing::LayerParam("name: 'mem' type: 'MemoryData' top: 'data' "
                                         "top: 'label' memory_data_param { " +
                                         params + " }"),
                     ctx);
}

TEST(MemoryDataLayerTest, Shapes) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, "batch_size: 2 channels: 3 height: 4 width: 5");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(label.shape(), (std::vector<int>{2}));
}

TEST(MemoryDataLayerTest, ServesBatchesInOrderAndWrapsAround) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, "batch_size: 2 channels: 1 height: 1 width: 2");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  // Four samples of 1 x 1 x 2: sample i is (10 i, 10 i + 1) with label 100 + i.
  std::vector<float> values = {0, 1, 10, 11, 20, 21, 30, 31};
  std::vector<float> labels = {100, 101, 102, 103};
  static_cast<MemoryDataLayer*>(layer.get())->Reset(values.data(), labels.data(), 4);
  const std::vector<std::vector<float>> expected_data = {
      {0, 1, 10, 11}, {20, 21, 30, 31}, {0, 1, 10, 11}};
  const std::vector<std::vector<float>> expected_labels = {{100, 101}, {102, 103}, {100, 101}};
  for (size_t k = 0; k < expected_data.size(); ++k) {
    layer->Forward({}, {&data, &label});
    EXPECT_EQ(std::vector<float>(data.cpu_data(), data.cpu_data() + data.count()),
              expected_data[k]);
    EXPECT_EQ(std::vector<float>(label.cpu_data(), label.cpu_data() + label.count()),
              expected_labels[k]);
  }
  // Reset starts again at the first sample.
  static_cast<MemoryDataLayer*>(layer.get())->Reset(values.data() + 4, labels.data() + 2, 2);
  layer->Forward({}, {&data, &label});
  EXPECT_EQ(label.cpu_data()[0], 102.0f);
  EXPECT_EQ(data.cpu_data()[3], 31.0f);
}

TEST(MemoryDataLayerTest, ForwardBeforeResetIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, "batch_size: 2 channels: 1 height: 1 width: 1");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  try {
    layer->Forward({}, {&data, &label});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Reset"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 'mem'"), std::string::npos) << e.what();
  }
}

TEST(MemoryDataLayerTest, ResetNeedsAMultipleOfTheBatchSize) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, "batch_size: 2 channels: 1 height: 1 width: 1");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  std::vector<float> values(3), labels(3);
  auto* mem = static_cast<MemoryDataLayer*>(layer.get());
  EXPECT_THROW(mem->Reset(values.data(), labels.data(), 3), Error);
  EXPECT_THROW(mem->Reset(values.data(), labels.data(), 0), Error);
  EXPECT_THROW(mem->Reset(nullptr, labels.data(), 2), Error);
}

TEST(MemoryDataLayerTest, ZeroDimensionIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, "batch_size: 2 channels: 0 height: 1 width: 1");
  Tensor data, label;
  EXPECT_THROW(layer->Initialize({}, {&data, &label}), Error);
}

TEST(MemoryDataLayerTest, NeedsTwoTops) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, "batch_size: 2 channels: 1 height: 1 width: 1");
  Tensor data;
  EXPECT_THROW(layer->Initialize({}, {&data}), Error);
}

}  // namespace
}  // namespace cortado
