// SPDX-License-Identifier: Apache-2.0
// docs/layers.md's status table names every layer type Caffe registers and every type Cortado
// registers, each once.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "layers/layer.hpp"

namespace cortado {
namespace {

// BVLC Caffe's registered layer types (its LayerRegistry at the last release, 61).
const std::set<std::string> kCaffeTypes = {"AbsVal",
                                           "Accuracy",
                                           "ArgMax",
                                           "BatchNorm",
                                           "BatchReindex",
                                           "Bias",
                                           "BNLL",
                                           "Clip",
                                           "Concat",
                                           "ContrastiveLoss",
                                           "Convolution",
                                           "Crop",
                                           "Data",
                                           "Deconvolution",
                                           "Dropout",
                                           "DummyData",
                                           "Eltwise",
                                           "ELU",
                                           "Embed",
                                           "EuclideanLoss",
                                           "Exp",
                                           "Filter",
                                           "Flatten",
                                           "HDF5Data",
                                           "HDF5Output",
                                           "HingeLoss",
                                           "Im2col",
                                           "ImageData",
                                           "InfogainLoss",
                                           "InnerProduct",
                                           "Input",
                                           "Log",
                                           "LRN",
                                           "LSTM",
                                           "LSTMUnit",
                                           "MemoryData",
                                           "MultinomialLogisticLoss",
                                           "MVN",
                                           "Parameter",
                                           "Pooling",
                                           "Power",
                                           "PReLU",
                                           "Python",
                                           "Reduction",
                                           "ReLU",
                                           "Reshape",
                                           "RNN",
                                           "Scale",
                                           "Sigmoid",
                                           "SigmoidCrossEntropyLoss",
                                           "Silence",
                                           "Slice",
                                           "Softmax",
                                           "SoftmaxWithLoss",
                                           "Split",
                                           "SPP",
                                           "Swish",
                                           "TanH",
                                           "Threshold",
                                           "Tile",
                                           "WindowData"};

// Type -> the rest of its row, from the table under "## Status of every Caffe layer type".
std::map<std::string, std::string> StatusRows() {
  std::ifstream in(std::string(CORTADO_SOURCE_DIR) + "/docs/layers.md");
  EXPECT_TRUE(in) << "cannot read docs/layers.md";
  std::map<std::string, std::string> rows;
  std::string line;
  bool in_section = false;
  const std::regex row(R"(^\| `([A-Za-z0-9]+)` \|(.*)\|$)");
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Status of every Caffe layer type";
    std::smatch m;
    if (in_section && std::regex_match(line, m, row)) {
      EXPECT_TRUE(rows.emplace(m[1], m[2]).second) << "listed twice: " << m[1];
    }
  }
  return rows;
}

TEST(LayerDocsTest, EveryCaffeTypeIsListed) {
  EXPECT_EQ(kCaffeTypes.size(), 61u);
  const auto rows = StatusRows();
  for (const std::string& type : kCaffeTypes) EXPECT_EQ(rows.count(type), 1u) << type;
}

TEST(LayerDocsTest, EveryRegisteredTypeIsListedAsRunning) {
  const auto rows = StatusRows();
  // Layers that tests of this binary register for themselves.
  const std::set<std::string> test_only = {"ShardFailData", "TestCountingData"};
  for (const std::string& type : LayerRegistry::Get().Types()) {
    if (test_only.count(type) != 0) continue;
    auto it = rows.find(type);
    ASSERT_NE(it, rows.end()) << "registered but not in docs/layers.md: " << type;
    EXPECT_EQ(it->second.rfind(" yes |", 0), 0u) << type << ":" << it->second;
  }
}

TEST(LayerDocsTest, EveryCaffeTypeIsRegisteredOrListedWithAReason) {
  const auto rows = StatusRows();
  for (const std::string& type : kCaffeTypes) {
    if (LayerRegistry::Get().Has(type)) continue;
    auto it = rows.find(type);
    ASSERT_NE(it, rows.end()) << type;
    EXPECT_NE(it->second.find("**refused**"), std::string::npos)
        << type << " is neither registered nor refused with a reason: " << it->second;
  }
}

}  // namespace
}  // namespace cortado
