// SPDX-License-Identifier: Apache-2.0
#include "data/base_data_layer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

// A producer whose batch k is [k, rng()] (rng: the batch's own engine), failing at batch
// `fail_at` with an Error, or with a non-cortado exception when `foreign` is set.
class CountingLayer final : public BasePrefetchingDataLayer {
 public:
  CountingLayer(const caffe::LayerParameter& param, Context* ctx, int64_t fail_at, bool foreign)
      : BasePrefetchingDataLayer(param, ctx), fail_at_(fail_at), foreign_(foreign) {}
  ~CountingLayer() override { StopPrefetch(); }
  const char* type() const override { return "Counting"; }
  int ExactNumTopBlobs() const override { return 1; }
  int loaded() const { return loaded_.load(); }

 protected:
  void DataSetup(const std::vector<Tensor*>& top) override { top[0]->Reshape(std::vector<int>{2}); }
  void LoadBatch(int64_t index, Rng* rng, DataBatch* batch) override {
    ++loaded_;
    if (index == fail_at_) {
      if (foreign_) throw std::runtime_error("disk on fire at batch " + std::to_string(index));
      CORTADO_THROW(kIo, "{}: cannot read batch {}", Describe(), index);
    }
    batch->shapes = {{2}};
    batch->tops = {{static_cast<float>(index), static_cast<float>((*rng)() % 1000)}};
  }
  int PrefetchCount() const override { return 2; }

 private:
  int64_t fail_at_;
  bool foreign_;
  std::atomic<int> loaded_{0};
};

std::unique_ptr<CountingLayer> Make(Context* ctx, int64_t fail_at = -1, bool foreign = false) {
  return std::make_unique<CountingLayer>(
      testing::LayerParam("name: 'counter' type: 'Counting' top: 'x'"), ctx, fail_at, foreign);
}

TEST(BasePrefetchingDataLayerTest, BatchesArriveInOrder) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx);
  Tensor top;
  layer->Initialize({}, {&top});
  for (int k = 0; k < 10; ++k) {
    layer->Forward({}, {&top});
    EXPECT_EQ(top.cpu_data()[0], static_cast<float>(k));
  }
  EXPECT_EQ(layer->next_batch_index(), 10);
}

TEST(BasePrefetchingDataLayerTest, ErrorInThePrefetchThreadIsRethrownByForward) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, /*fail_at=*/2);
  Tensor top;
  layer->Initialize({}, {&top});
  layer->Forward({}, {&top});
  layer->Forward({}, {&top});
  EXPECT_EQ(top.cpu_data()[0], 1.0f);  // batches before the failure arrive
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      layer->Forward({}, {&top});
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIo);
      EXPECT_NE(std::string(e.what()).find("cannot read batch 2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("layer 'counter'"), std::string::npos) << e.what();
    }
  }
  // The producer stopped at the failure.
  EXPECT_EQ(layer->loaded(), 3);
  layer->Seek(0);
  layer->Forward({}, {&top});
  EXPECT_EQ(top.cpu_data()[0], 0.0f);
}

TEST(BasePrefetchingDataLayerTest, ForeignExceptionsAreRethrownToo) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx, /*fail_at=*/0, /*foreign=*/true);
  Tensor top;
  layer->Initialize({}, {&top});
  EXPECT_THROW(layer->Forward({}, {&top}), std::runtime_error);
}

TEST(BasePrefetchingDataLayerTest, SeekRestartsAtTheBatchWithItsOwnRandomness) {
  Context ctx_a(Device::Cpu(), 1701), ctx_b(Device::Cpu(), 1701);
  auto a = Make(&ctx_a);
  auto b = Make(&ctx_b);
  Tensor ta, tb;
  a->Initialize({}, {&ta});
  b->Initialize({}, {&tb});
  EXPECT_EQ(a->seed(), b->seed());
  std::vector<float> straight;
  for (int k = 0; k < 6; ++k) {
    a->Forward({}, {&ta});
    straight.push_back(ta.cpu_data()[1]);
  }
  b->Seek(4);
  for (int k = 4; k < 6; ++k) {
    b->Forward({}, {&tb});
    EXPECT_EQ(tb.cpu_data()[0], static_cast<float>(k));
    EXPECT_EQ(tb.cpu_data()[1], straight[k]);
  }
  b->Seek(1);
  b->Forward({}, {&tb});
  EXPECT_EQ(tb.cpu_data()[1], straight[1]);
  EXPECT_THROW(b->Seek(-1), Error);
}

TEST(BasePrefetchingDataLayerTest, SeekBeforeSetupIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = Make(&ctx);
  EXPECT_THROW(layer->Seek(0), Error);
}

TEST(BasePrefetchingDataLayerTest, BatchRngDependsOnSeedAndIndexOnly) {
  EXPECT_EQ(BatchRng(7, 3)(), BatchRng(7, 3)());
  EXPECT_NE(BatchRng(7, 3)(), BatchRng(7, 4)());
  EXPECT_NE(BatchRng(7, 3)(), BatchRng(8, 3)());
}

TEST(BasePrefetchingDataLayerTest, DestructorStopsABlockedProducer) {
  Context ctx(Device::Cpu(), 1701);
  for (int i = 0; i < 20; ++i) {
    auto layer = Make(&ctx);
    Tensor top;
    layer->Initialize({}, {&top});
    if (i % 2 == 0) layer->Forward({}, {&top});
    EXPECT_LE(layer->loaded(), 2 + (i % 2 == 0 ? 1 : 0));  // bounded by the queue
  }
}

}  // namespace
}  // namespace cortado
