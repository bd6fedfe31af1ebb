// SPDX-License-Identifier: Apache-2.0
#include "data/image_data_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/data_test_util.hpp"
#include "data/image_test_util.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

#if CORTADO_WITH_IMAGES

using testing::EncodePng;
using testing::Pixels;
using testing::PlanarBgr;
using testing::Ramp;
using testing::TempDir;

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// Image i: a 3 x 2 RGB ramp offset by 10 i, written as img<i>.png in `dir`/images.
Pixels ImageOf(int i) { return Ramp(3, 2, 10 * i); }

// Writes `n` images and a list file naming them (label 100 + i), returns the list's path.
std::string WriteImages(const TempDir& dir, int n) {
  std::filesystem::create_directories(dir / "images");
  std::string list;
  for (int i = 0; i < n; ++i) {
    WriteFile(dir / ("images/img" + std::to_string(i) + ".png"), EncodePng(ImageOf(i)));
    list += "img" + std::to_string(i) + ".png " + std::to_string(100 + i) + "\n";
  }
  WriteText(dir / "list.txt", list);
  return dir / "list.txt";
}

std::unique_ptr<Layer> MakeLayer(Context* ctx, const std::string& list, const std::string& root,
                                 int batch, const std::string& extra = "",
                                 const std::string& transform = "") {
  return CreateLayer(testing::LayerParam("name: 'images' type: 'ImageData' top: 'data' "
                                         "top: 'label' image_data_param { source: '" +
                                         list + "' root_folder: '" + root + "' batch_size: " +
                                         std::to_string(batch) + " " + extra + " } " + transform),
                     ctx);
}

struct Batch {
  std::vector<int> shape;
  std::vector<float> data, labels;
};

Batch Next(Layer* layer, Tensor* data, Tensor* label) {
  layer->Forward({}, {data, label});
  return {data->shape(), std::vector<float>(data->cpu_data(), data->cpu_data() + data->count()),
          std::vector<float>(label->cpu_data(), label->cpu_data() + label->count())};
}

TEST(ImageDataLayerTest, ReadsTheListInOrderWithTheRootFolderAndWrapsAround) {
  TempDir dir;
  const std::string list = WriteImages(dir, 4);
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, list, dir / "images/", 3, "", "transform_param { scale: 0.5 }");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{3, 3, 2, 3}));
  EXPECT_EQ(label.shape(), (std::vector<int>{3}));
  const Batch first = Next(layer.get(), &data, &label);
  const Batch second = Next(layer.get(), &data, &label);
  EXPECT_EQ(first.labels, (std::vector<float>{100, 101, 102}));
  EXPECT_EQ(second.labels, (std::vector<float>{103, 100, 101}));  // wraps around
  // PNG is lossless: the batch holds each image's planar B, G, R values, scaled.
  for (int i = 0; i < 3; ++i) {
    const std::vector<uint8_t> planar = PlanarBgr(ImageOf(i));
    for (size_t j = 0; j < planar.size(); ++j) {
      EXPECT_EQ(first.data[i * 18 + j], 0.5f * planar[j]) << "image " << i << " value " << j;
    }
  }
}

TEST(ImageDataLayerTest, GrayAndResizedImagesAndCrop) {
  TempDir dir;
  const std::string list = WriteImages(dir, 2);
  Context ctx(Device::Cpu(), 1701);
  auto layer =
      MakeLayer(&ctx, list, dir / "images/", 2, "is_color: false new_height: 4 new_width: 6",
                "transform_param { crop_size: 3 }");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{2, 1, 3, 3}));
  const Batch batch = Next(layer.get(), &data, &label);
  EXPECT_EQ(batch.shape, (std::vector<int>{2, 1, 3, 3}));
  EXPECT_EQ(batch.labels, (std::vector<float>{100, 101}));
}

TEST(ImageDataLayerTest, ShuffleVisitsEveryLineOncePerEpochInAnOrderFixedByTheSeed) {
  TempDir dir;
  const std::string list = WriteImages(dir, 7);
  auto epochs = [&](uint64_t seed) {
    Context ctx(Device::Cpu(), seed);
    auto layer = MakeLayer(&ctx, list, dir / "images/", 7, "shuffle: true");
    Tensor data, label;
    layer->Initialize({}, {&data, &label});
    std::vector<std::vector<float>> orders;
    for (int e = 0; e < 3; ++e) orders.push_back(Next(layer.get(), &data, &label).labels);
    return orders;
  };
  const auto a = epochs(1701);
  std::set<std::vector<float>> distinct(a.begin(), a.end());
  EXPECT_GE(distinct.size(), 2u) << "every epoch in the same order";
  std::vector<float> file_order;
  for (int i = 0; i < 7; ++i) file_order.push_back(100.0f + static_cast<float>(i));
  for (const auto& order : a) {
    std::vector<float> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, file_order);  // a permutation of the list
  }
  EXPECT_EQ(epochs(1701), a);  // the same seed, the same orders
  EXPECT_NE(epochs(7), a);
}

// The message of Initialize (or, with `forward`, of the first Forward), which must fail.
std::string FailureOf(Layer* layer, bool forward = false) {
  Tensor data, label;
  try {
    layer->Initialize({}, {&data, &label});
    if (forward) layer->Forward({}, {&data, &label});
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ImageDataLayerTest, BadListsAndImagesNameTheFileAndLine) {
  TempDir dir;
  const std::string list = WriteImages(dir, 2);
  Context ctx(Device::Cpu(), 1701);
  const std::string root = dir / "images/";

  auto missing_list = MakeLayer(&ctx, dir / "nope.txt", root, 1);
  EXPECT_NE(FailureOf(missing_list.get()).find("cannot open the list file '" + (dir / "nope.txt")),
            std::string::npos);

  auto device = MakeLayer(&ctx, "/dev/zero", root, 1);
  EXPECT_NE(FailureOf(device.get()).find("'/dev/zero': not a regular file"), std::string::npos);

  WriteText(dir / "bad.txt", "img0.png 1\n\nimg1.png\n");
  auto no_label = MakeLayer(&ctx, dir / "bad.txt", root, 1);
  EXPECT_NE(FailureOf(no_label.get()).find(dir / "bad.txt:3: 'img1.png' is not 'path label'"),
            std::string::npos);

  WriteText(dir / "gone.txt", "img0.png 1\nimg9.png 2\n");
  auto gone = MakeLayer(&ctx, dir / "gone.txt", root, 2);
  const std::string gone_message = FailureOf(gone.get(), /*forward=*/true);
  EXPECT_NE(gone_message.find("image '" + root + "img9.png' (" + (dir / "gone.txt") + ":2)"),
            std::string::npos)
      << gone_message;

  WriteFile(dir / "images/big.png", EncodePng(Ramp(4, 4)));
  WriteText(dir / "sizes.txt", "img0.png 1\nbig.png 2\n");
  auto sizes = MakeLayer(&ctx, dir / "sizes.txt", root, 2);
  const std::string sizes_message = FailureOf(sizes.get(), /*forward=*/true);
  EXPECT_NE(sizes_message.find("is 3 x 4 x 4, but the first image is 3 x 2 x 3"), std::string::npos)
      << sizes_message;

  const std::vector<uint8_t> png = EncodePng(Ramp(3, 2));
  WriteFile(dir / "images/cut.png", std::vector<uint8_t>(png.begin(), png.begin() + 20));
  WriteText(dir / "cut.txt", "cut.png 1\n");
  auto cut = MakeLayer(&ctx, dir / "cut.txt", root, 1);
  EXPECT_NE(FailureOf(cut.get()).find("corrupt PNG data"), std::string::npos);

  auto half = MakeLayer(&ctx, list, root, 1, "new_height: 4");
  EXPECT_NE(FailureOf(half.get()).find("must be set together"), std::string::npos);
}

#else

CORTADO_SKIP_WITHOUT_IMAGES(ImageDataLayerTest, ReadsTheListInOrderWithTheRootFolderAndWrapsAround)

#endif  // CORTADO_WITH_IMAGES

}  // namespace
}  // namespace cortado
