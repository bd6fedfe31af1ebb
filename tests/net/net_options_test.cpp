// SPDX-License-Identifier: Apache-2.0
// NetOptionsFromEnvironment: CORTADO_FUSE=0, CORTADO_FOLD_SPLITS=0, CORTADO_SHARE_BUFFERS=0 and
// CORTADO_RECOMPUTE=0 turn their option off; CORTADO_BN_KEEP_INPUTS=1 keeps BatchNorm inputs on
// GPUs; anything else, or nothing, keeps the default.
#include "net/net_options.hpp"

#include <gtest/gtest.h>

#include "support/scoped_env.hpp"

namespace cortado {
namespace {

using testing::ScopedEnv;

TEST(NetOptionsTest, DefaultsWithoutTheVariables) {
  ScopedEnv fuse("CORTADO_FUSE", "1");
  ScopedEnv share("CORTADO_SHARE_BUFFERS", "yes");
  ScopedEnv fold("CORTADO_FOLD_SPLITS", nullptr);
  ScopedEnv recompute("CORTADO_RECOMPUTE", nullptr);
  const NetOptions options = NetOptionsFromEnvironment();
  EXPECT_TRUE(options.fuse);
  EXPECT_TRUE(options.fold_splits);
  EXPECT_TRUE(options.share_buffers);
  EXPECT_TRUE(options.recompute);
  EXPECT_TRUE(NetOptions{}.fuse);
  EXPECT_TRUE(NetOptions{}.fold_splits);
  EXPECT_TRUE(NetOptions{}.share_buffers);
  EXPECT_TRUE(NetOptions{}.recompute);
}

TEST(NetOptionsTest, OneKeepsBatchNormInputsOnGpus) {
  using BatchNormInputs = NetOptions::BatchNormInputs;
  {
    ScopedEnv keep("CORTADO_BN_KEEP_INPUTS", nullptr);
    EXPECT_EQ(NetOptionsFromEnvironment().keep_batch_norm_inputs, BatchNormInputs::kNever);
  }
  for (const char* other : {"0", "yes", "2"}) {
    ScopedEnv keep("CORTADO_BN_KEEP_INPUTS", other);
    EXPECT_EQ(NetOptionsFromEnvironment().keep_batch_norm_inputs, BatchNormInputs::kNever) << other;
  }
  ScopedEnv keep("CORTADO_BN_KEEP_INPUTS", "1");
  EXPECT_EQ(NetOptionsFromEnvironment().keep_batch_norm_inputs, BatchNormInputs::kOnGpus);
  EXPECT_TRUE(NetOptionsFromEnvironment().fuse);
}

TEST(NetOptionsTest, SumsFoldInTrainNetsZeroInNoneOneInAll) {
  using SumFolds = NetOptions::SumFolds;
  EXPECT_EQ(NetOptions{}.fold_sums_into_batch_norms, SumFolds::kTrainNets);
  {
    ScopedEnv fold("CORTADO_FOLD_SUMS", nullptr);
    EXPECT_EQ(NetOptionsFromEnvironment().fold_sums_into_batch_norms, SumFolds::kTrainNets);
  }
  for (const char* other : {"yes", "2", ""}) {
    ScopedEnv fold("CORTADO_FOLD_SUMS", other);
    EXPECT_EQ(NetOptionsFromEnvironment().fold_sums_into_batch_norms, SumFolds::kTrainNets)
        << other;
  }
  {
    ScopedEnv fold("CORTADO_FOLD_SUMS", "0");
    EXPECT_EQ(NetOptionsFromEnvironment().fold_sums_into_batch_norms, SumFolds::kNever);
  }
  ScopedEnv fold("CORTADO_FOLD_SUMS", "1");
  EXPECT_EQ(NetOptionsFromEnvironment().fold_sums_into_batch_norms, SumFolds::kAlways);
  EXPECT_TRUE(NetOptionsFromEnvironment().fuse);
}

TEST(NetOptionsTest, ZeroTurnsEachOff) {
  {
    ScopedEnv fuse("CORTADO_FUSE", "0");
    EXPECT_FALSE(NetOptionsFromEnvironment().fuse);
    EXPECT_TRUE(NetOptionsFromEnvironment().share_buffers);
  }
  {
    ScopedEnv share("CORTADO_SHARE_BUFFERS", "0");
    EXPECT_TRUE(NetOptionsFromEnvironment().fuse);
    EXPECT_FALSE(NetOptionsFromEnvironment().share_buffers);
  }
  {
    ScopedEnv fold("CORTADO_FOLD_SPLITS", "0");
    EXPECT_FALSE(NetOptionsFromEnvironment().fold_splits);
    EXPECT_TRUE(NetOptionsFromEnvironment().fuse);
  }
  {
    ScopedEnv recompute("CORTADO_RECOMPUTE", "0");
    EXPECT_FALSE(NetOptionsFromEnvironment().recompute);
    EXPECT_TRUE(NetOptionsFromEnvironment().fold_splits);
  }
}

}  // namespace
}  // namespace cortado
