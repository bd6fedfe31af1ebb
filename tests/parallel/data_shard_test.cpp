// SPDX-License-Identifier: Apache-2.0
// Data sharding for data-parallel training (Layer::SetShard, Net::SetDataShard): shard r of R
// reads batch k * R + r of the unsharded stream at its k-th forward, Seek stays logical, and R
// shards of batch b read per step exactly what one reader of batch R * b reads. CPU only.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "data/base_data_layer.hpp"
#include "data/data_test_util.hpp"
#include "net/net.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

// Batch k of the source is [k, a draw from batch k's own engine].
class SourceIndexLayer final : public BasePrefetchingDataLayer {
 public:
  using BasePrefetchingDataLayer::BasePrefetchingDataLayer;
  ~SourceIndexLayer() override { StopPrefetch(); }
  const char* type() const override { return "SourceIndex"; }
  int ExactNumTopBlobs() const override { return 1; }

 protected:
  void DataSetup(const std::vector<Tensor*>& top) override { top[0]->Reshape(std::vector<int>{2}); }
  void LoadBatch(int64_t index, Rng* rng, DataBatch* batch) override {
    batch->shapes = {{2}};
    batch->tops = {{static_cast<float>(index), static_cast<float>((*rng)() % 100000)}};
  }
};

std::unique_ptr<SourceIndexLayer> MakeSourceLayer(Context* ctx) {
  return std::make_unique<SourceIndexLayer>(
      testing::LayerParam("name: 'source' type: 'SourceIndex' top: 'x'"), ctx);
}

TEST(DataShardTest, TwoShardsReadInterleavedBatches) {
  Context ctx_all(Device::Cpu(), 42), ctx0(Device::Cpu(), 42), ctx1(Device::Cpu(), 42);
  auto all = MakeSourceLayer(&ctx_all);
  auto shard0 = MakeSourceLayer(&ctx0);
  auto shard1 = MakeSourceLayer(&ctx1);
  Tensor t_all, t0, t1;
  all->Initialize({}, {&t_all});
  shard0->Initialize({}, {&t0});
  shard1->Initialize({}, {&t1});
  shard0->SetShard(0, 2);
  shard1->SetShard(1, 2);
  std::vector<float> draws;  // the unsharded stream's random draws, by batch
  for (int k = 0; k < 8; ++k) {
    all->Forward({}, {&t_all});
    EXPECT_EQ(t_all.cpu_data()[0], static_cast<float>(k));
    draws.push_back(t_all.cpu_data()[1]);
  }
  for (int k = 0; k < 4; ++k) {
    shard0->Forward({}, {&t0});
    shard1->Forward({}, {&t1});
    EXPECT_EQ(t0.cpu_data()[0], static_cast<float>(2 * k));
    EXPECT_EQ(t1.cpu_data()[0], static_cast<float>(2 * k + 1));
    // Content and randomness both follow the source's batch.
    EXPECT_EQ(t0.cpu_data()[1], draws[2 * k]);
    EXPECT_EQ(t1.cpu_data()[1], draws[2 * k + 1]);
  }
  // Seek and next_batch_index count the shard's own batches.
  EXPECT_EQ(shard1->next_batch_index(), 4);
  shard1->Seek(2);
  shard1->Forward({}, {&t1});
  EXPECT_EQ(t1.cpu_data()[0], 5.0f);
  EXPECT_EQ(t1.cpu_data()[1], draws[5]);
  EXPECT_EQ(shard1->next_batch_index(), 3);
}

TEST(DataShardTest, ShardingAfterSomeBatchesContinuesAtTheSameLogicalBatch) {
  Context ctx(Device::Cpu(), 42);
  auto layer = MakeSourceLayer(&ctx);
  Tensor t;
  layer->Initialize({}, {&t});
  layer->Forward({}, {&t});
  layer->Forward({}, {&t});
  layer->SetShard(2, 3);
  layer->Forward({}, {&t});
  EXPECT_EQ(t.cpu_data()[0], 2.0f * 3 + 2);
  layer->SetShard(0, 1);  // back to unsharded
  layer->Forward({}, {&t});
  EXPECT_EQ(t.cpu_data()[0], 3.0f);
}

TEST(DataShardTest, ShardOutsideTheRangeIsAnError) {
  Context ctx(Device::Cpu(), 42);
  auto layer = MakeSourceLayer(&ctx);
  Tensor t;
  layer->Initialize({}, {&t});
  EXPECT_THROW(layer->SetShard(2, 2), Error);
  EXPECT_THROW(layer->SetShard(-1, 2), Error);
  EXPECT_THROW(layer->SetShard(0, 0), Error);
  // The layer still works, unsharded.
  layer->Forward({}, {&t});
  EXPECT_EQ(t.cpu_data()[0], 0.0f);
}

// An LMDB of `n` records of shape 1 x 1 x 3; record i has bytes 3i, 3i+1, 3i+2 and label i.
std::string WriteDb(const testing::TempDir& dir, int n) {
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < n; ++i) {
    records.emplace_back(testing::Key(i),
                         testing::ByteDatum(1, 1, 3, 3 * i, i).SerializeAsString());
  }
  const std::string path = dir / "db";
  testing::WriteLmdb(path, records);
  return path;
}

std::unique_ptr<Net> MakeDataNet(Context* ctx, const std::string& db, int batch_size) {
  caffe::NetParameter param;
  const std::string text =
      "name: 'shards' state { phase: TRAIN } "
      "layer { name: 'data' type: 'Data' top: 'data' top: 'label' "
      "data_param { source: '" +
      db + "' backend: LMDB batch_size: " + std::to_string(batch_size) + " } }";
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param));
  return std::make_unique<Net>(param, ctx);
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.cpu_data(), t.cpu_data() + t.count());
}

TEST(DataShardTest, ShardsOfADataNetReadWhatOneReaderOfTheirTotalBatchReads) {
  testing::TempDir dir;
  const std::string db = WriteDb(dir, 7);  // batches wrap around the database
  constexpr int kShards = 3;
  constexpr int kBatch = 2;
  Context ctx_all(Device::Cpu(), 5);
  auto all = MakeDataNet(&ctx_all, db, kShards * kBatch);
  std::vector<std::unique_ptr<Context>> contexts;
  std::vector<std::unique_ptr<Net>> shards;
  for (int r = 0; r < kShards; ++r) {
    contexts.push_back(std::make_unique<Context>(Device::Cpu(), 5));
    shards.push_back(MakeDataNet(contexts.back().get(), db, kBatch));
    shards.back()->SetDataShard(r, kShards);
  }
  for (int step = 0; step < 4; ++step) {
    all->Forward();
    std::vector<float> data, labels;
    for (auto& shard : shards) {
      shard->Forward();
      const std::vector<float> d = Values(*shard->blob_by_name("data"));
      const std::vector<float> l = Values(*shard->blob_by_name("label"));
      data.insert(data.end(), d.begin(), d.end());
      labels.insert(labels.end(), l.begin(), l.end());
    }
    EXPECT_EQ(data, Values(*all->blob_by_name("data"))) << "step " << step;
    EXPECT_EQ(labels, Values(*all->blob_by_name("label"))) << "step " << step;
  }
  EXPECT_THROW(shards[0]->SetDataShard(3, 3), Error);
}

}  // namespace
}  // namespace cortado
