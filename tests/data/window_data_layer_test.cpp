// SPDX-License-Identifier: Apache-2.0
#include "data/window_data_layer.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/data_test_util.hpp"
#include "data/image_test_util.hpp"
#include "io/proto_io.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

#if CORTADO_WITH_IMAGES

using testing::EncodePng;
using testing::Pixels;
using testing::PlanarBgr;
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

// 12 x 4 pixels in 6 vertical stripes of 2 columns; stripe k is (R, G, B) = (10 (k + 1), 5 k,
// 250 - 10 k), so a crop's blue value tells which stripe it came from.
Pixels Stripes() {
  Pixels p{12, 4, 3, {}};
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 12; ++x) {
      const int k = x / 2;
      testing::Append(&p.data, {static_cast<uint8_t>(10 * (k + 1)), static_cast<uint8_t>(5 * k),
                                static_cast<uint8_t>(250 - 10 * k)});
    }
  }
  return p;
}

// Writes the test images into `dir`/images: ramp.png (8 x 6 ramp), flat.png (10 x 8 of
// (30, 60, 90)), stripes.png (Stripes()).
void WriteImages(const TempDir& dir) {
  std::filesystem::create_directories(dir / "images");
  WriteFile(dir / "images/ramp.png", EncodePng(testing::Ramp(8, 6)));
  WriteFile(dir / "images/flat.png", EncodePng(testing::Flat(10, 8, 30, 60, 90)));
  WriteFile(dir / "images/stripes.png", EncodePng(Stripes()));
}

// Value (c, y, x) of an image's planar B, G, R bytes.
float At(const Pixels& p, int c, int y, int x) {
  return PlanarBgr(p)[(static_cast<size_t>(c) * p.height + y) * p.width + x];
}

std::unique_ptr<Layer> MakeLayer(Context* ctx, const TempDir& dir, const std::string& windows,
                                 const std::string& params, const std::string& transform,
                                 const std::string& phase = "TRAIN") {
  WriteText(dir / "windows.txt", windows);
  return CreateLayer(
      testing::LayerParam("name: 'windows' type: 'WindowData' top: 'data' "
                          "top: 'label' phase: " +
                          phase + " window_data_param { source: '" + (dir / "windows.txt") +
                          "' root_folder: '" + (dir / "images/") + "' " + params +
                          " } transform_param { " + transform + " }"),
      ctx);
}

struct Batch {
  std::vector<int> shape;
  std::vector<float> data, labels;
  // Value (item, c, y, x).
  float operator()(int n, int c, int y, int x) const {
    return data[((static_cast<size_t>(n) * shape[1] + c) * shape[2] + y) * shape[3] + x];
  }
};

Batch Next(Layer* layer, Tensor* data, Tensor* label) {
  layer->Forward({}, {data, label});
  return {data->shape(), std::vector<float>(data->cpu_data(), data->cpu_data() + data->count()),
          std::vector<float>(label->cpu_data(), label->cpu_data() + label->count())};
}

// One image with one foreground window (class 1), as the window file says it.
std::string OneWindow(const std::string& image, int width, int height, const std::string& window) {
  return fmt::format("# 0\n{}\n3\n{}\n{}\n1\n{}\n", image, height, width, window);
}

TEST(WindowDataLayerTest, WarpCutsOutTheWindowExactly) {
  TempDir dir;
  WriteImages(dir);
  Context ctx(Device::Cpu(), 1701);
  // Window x 2..5, y 1..4 of the ramp: 4 x 4, the crop size, so no resampling.
  auto layer = MakeLayer(&ctx, dir, OneWindow("ramp.png", 8, 6, "1 0.9 2 1 5 4"),
                         "batch_size: 2 fg_fraction: 1 scale: 0.5",
                         "crop_size: 4 mean_value: 1 mean_value: 2 mean_value: 3");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{2, 3, 4, 4}));
  EXPECT_EQ(label.shape(), (std::vector<int>{2}));
  const Batch batch = Next(layer.get(), &data, &label);
  EXPECT_EQ(batch.labels, (std::vector<float>{1, 1}));
  const Pixels ramp = testing::Ramp(8, 6);
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 4; ++y) {
        for (int x = 0; x < 4; ++x) {
          // Mean before scale, as Caffe.
          EXPECT_EQ(batch(n, c, y, x), (At(ramp, c, 1 + y, 2 + x) - (c + 1)) * 0.5f)
              << n << " " << c << " " << y << " " << x;
        }
      }
    }
  }
}

TEST(WindowDataLayerTest, WarpResizesTheWindowToTheCrop) {
  TempDir dir;
  WriteImages(dir);
  Context ctx(Device::Cpu(), 1701);
  // Window x 2..5, y 1..3 (4 wide, 3 high) warped to 5 x 5.
  auto layer = MakeLayer(&ctx, dir, OneWindow("ramp.png", 8, 6, "2 0.7 2 1 5 3"),
                         "batch_size: 1 fg_fraction: 1", "crop_size: 5");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  const Batch batch = Next(layer.get(), &data, &label);
  EXPECT_EQ(batch.labels, (std::vector<float>{2}));
  // The expected pixels: the box cut out by hand, resized bilinearly (image_codec's resize, the
  // one Caffe's cv::resize INTER_LINEAR stands for).
  const Pixels ramp = testing::Ramp(8, 6);
  DecodedImage box;
  box.channels = 3;
  box.height = 3;
  box.width = 4;
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 3; ++y) {
      for (int x = 0; x < 4; ++x)
        box.pixels.push_back(static_cast<uint8_t>(At(ramp, c, 1 + y, 2 + x)));
    }
  }
  const DecodedImage warped = ResizeImage(box, 5, 5);
  for (int i = 0; i < 75; ++i) EXPECT_EQ(batch.data[i], warped.pixels[i]) << i;
}

// The square crop with context_pad 2 of window x 0..3, y 2..3 in the 10 x 8 flat image, by hand:
// context_scale = 8 / (8 - 4) = 2; half sizes (1, 2) squared to (2, 2) about centre (2, 3); so
// the grown box is x -2..6, y -1..7 (9 x 9), clipped to x 0..6, y 0..7 with 2 columns cut on the
// left and 1 row on top. Scale 8/9: the clipped part warps to round(7 * 8/9) = 6 columns and
// round(8 * 8/9) = 7 rows, placed after a border of round(2 * 8/9) = 2 columns and
// round(1 * 8/9) = 1 row. Returns whether (y, x) of the 8 x 8 crop is image (not border).
bool InsideSquareCrop(int y, int x, bool mirrored) {
  const int x0 = mirrored ? 0 : 2;  // a mirrored crop has its border on the right
  return y >= 1 && x >= x0 && x < x0 + 6;
}

TEST(WindowDataLayerTest, SquareModeWithContextPadLeavesAZeroBorderOutsideTheImage) {
  TempDir dir;
  WriteImages(dir);
  for (const std::string phase : {"TRAIN", "TEST"}) {
    SCOPED_TRACE(phase);
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeLayer(&ctx, dir, OneWindow("flat.png", 10, 8, "1 1.0 0 2 3 3"),
                           "batch_size: 8 fg_fraction: 1 context_pad: 2 crop_mode: 'square'",
                           "crop_size: 8 mirror: true mean_value: 10 scale: 0.5", phase);
    Tensor data, label;
    layer->Initialize({}, {&data, &label});
    const Batch batch = Next(layer.get(), &data, &label);
    // (B, G, R) = (90, 60, 30): (value - 10) * 0.5 inside; the border stays 0 (no mean).
    const float inside[3] = {40, 25, 10};
    int mirrored_items = 0;
    for (int n = 0; n < 8; ++n) {
      // Mirrored or not: the border is on one side; tell by column 0 of the last row.
      const bool mirrored = batch(n, 0, 7, 0) != 0.0f;
      mirrored_items += mirrored;
      for (int c = 0; c < 3; ++c) {
        for (int y = 0; y < 8; ++y) {
          for (int x = 0; x < 8; ++x) {
            EXPECT_EQ(batch(n, c, y, x), InsideSquareCrop(y, x, mirrored) ? inside[c] : 0.0f)
                << n << " " << c << " " << y << " " << x;
          }
        }
      }
    }
    if (phase == "TRAIN") {
      // A coin per window: both kinds among 8 (fixed by the seed).
      EXPECT_GT(mirrored_items, 0);
      EXPECT_LT(mirrored_items, 8);
    } else {
      EXPECT_EQ(mirrored_items, 0);  // Cortado mirrors in TRAIN only
    }
  }
}

// The windows of the stripes image: stripe k is the box x 2k..2k+1, y 0..3.
const char* kStripeWindows =
    "# 0\n"
    "stripes.png\n"
    "3\n4\n12\n"
    "6\n"
    "3 0.9 0 0 1 3\n"      // stripe 0: foreground, class 3
    "2 0.5 2 0 3 3\n"      // stripe 1: foreground (overlap == fg_threshold), class 2
    "5 0.4 4 0 5 3\n"      // stripe 2: dropped (between the thresholds)
    "4 0.1 6 0 7 3\n"      // stripe 3: background
    "0 0.0 8 0 9 3\n"      // stripe 4: background
    "1 0.29 10 0 11 3\n";  // stripe 5: background

TEST(WindowDataLayerTest, BatchesTakeBackgroundThenForegroundWindowsByFgFraction) {
  TempDir dir;
  WriteImages(dir);
  Context ctx(Device::Cpu(), 1701);
  // 5 * 0.5 = 2.5: 2 foreground windows (truncated, as Caffe), after 3 background ones.
  auto layer = MakeLayer(&ctx, dir, kStripeWindows,
                         "batch_size: 5 fg_fraction: 0.5 fg_threshold: 0.5 bg_threshold: 0.3",
                         "crop_size: 2");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  auto* windows = dynamic_cast<WindowDataLayer*>(layer.get());
  ASSERT_NE(windows, nullptr);
  EXPECT_EQ(windows->num_images(), 1);
  EXPECT_EQ(windows->num_foreground(), 2);
  EXPECT_EQ(windows->num_background(), 3);
  std::map<int, int> seen_bg, seen_fg;  // stripe -> times drawn
  for (int b = 0; b < 20; ++b) {
    const Batch batch = Next(layer.get(), &data, &label);
    for (int n = 0; n < 5; ++n) {
      // A flat stripe stays flat when warped: every value of the item is the stripe's colour.
      const int stripe = static_cast<int>(250 - batch(n, 0, 0, 0)) / 10;
      for (int y = 0; y < 2; ++y) {
        for (int x = 0; x < 2; ++x) {
          EXPECT_EQ(batch(n, 0, y, x), 250.0f - 10 * stripe);
          EXPECT_EQ(batch(n, 1, y, x), 5.0f * stripe);
          EXPECT_EQ(batch(n, 2, y, x), 10.0f * (stripe + 1));
        }
      }
      if (n < 3) {
        ++seen_bg[stripe];
        EXPECT_EQ(batch.labels[n], 0.0f) << "background windows are labelled 0";
      } else {
        ++seen_fg[stripe];
        EXPECT_EQ(batch.labels[n], stripe == 0 ? 3.0f : 2.0f) << stripe;
      }
    }
  }
  EXPECT_EQ(seen_bg.size(), 3u);
  EXPECT_EQ(seen_fg.size(), 2u);
  for (int k : {3, 4, 5}) EXPECT_GT(seen_bg[k], 0) << k;
  for (int k : {0, 1}) EXPECT_GT(seen_fg[k], 0) << k;
  int drawn = 0;
  for (const auto& [stripe, count] : seen_bg) drawn += count;
  EXPECT_EQ(drawn, 60);

  // Defaults: fg_threshold = bg_threshold = 0.5, so stripe 2 is background too; fg_fraction
  // 0.25 of 4 is 1 foreground window.
  auto defaults = MakeLayer(&ctx, dir, kStripeWindows, "batch_size: 4", "crop_size: 2");
  Tensor data2, label2;
  defaults->Initialize({}, {&data2, &label2});
  EXPECT_EQ(dynamic_cast<WindowDataLayer*>(defaults.get())->num_background(), 4);
  const Batch batch = Next(defaults.get(), &data2, &label2);
  EXPECT_EQ(batch.labels[0], 0.0f);
  EXPECT_EQ(batch.labels[1], 0.0f);
  EXPECT_EQ(batch.labels[2], 0.0f);
  EXPECT_GT(batch.labels[3], 0.0f);
}

TEST(WindowDataLayerTest, BatchesFollowTheSeedWithOrWithoutTheImageCacheAndAfterSeek) {
  TempDir dir;
  WriteImages(dir);
  std::string windows = kStripeWindows;
  windows += "# 1\nramp.png\n3 6 8\n2\n7 0.8 0 0 3 3\n0 0.1 4 2 7 5\n";  // numbers on one line
  auto run = [&](const std::string& extra, int64_t seek) {
    Context ctx(Device::Cpu(), 99);
    auto layer = MakeLayer(&ctx, dir, windows, "batch_size: 6 fg_fraction: 0.5 " + extra,
                           "crop_size: 3 mirror: true");
    Tensor data, label;
    layer->Initialize({}, {&data, &label});
    if (seek > 0) layer->Seek(seek);
    std::vector<Batch> batches;
    for (int b = 0; b < 4; ++b) batches.push_back(Next(layer.get(), &data, &label));
    return batches;
  };
  const auto plain = run("", 0);
  const auto cached = run("cache_images: true", 0);
  const auto sought = run("", 2);
  for (int b = 0; b < 4; ++b) {
    EXPECT_EQ(plain[b].data, cached[b].data) << b;
    EXPECT_EQ(plain[b].labels, cached[b].labels) << b;
  }
  EXPECT_EQ(sought[0].data, plain[2].data);
  EXPECT_EQ(sought[1].labels, plain[3].labels);
  EXPECT_NE(plain[0].data, plain[1].data);
}

TEST(WindowDataLayerTest, MeanFileIsReadAtCaffesOffset) {
  TempDir dir;
  WriteImages(dir);
  // A 1 x 3 x 4 x 4 mean, m(c, y, x) = 100 c + 10 y + x; crop 2: offset (4 - 2) / 2 = 1.
  caffe::BlobProto mean;
  for (int d : {1, 3, 4, 4}) mean.mutable_shape()->add_dim(d);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 4; ++x) mean.add_data(100.0f * c + 10.0f * y + x);
    }
  }
  io::WriteProtoToBinaryFile(mean, dir / "mean.binaryproto");
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, dir, OneWindow("ramp.png", 8, 6, "1 0.9 2 1 3 2"),
                         "batch_size: 1 fg_fraction: 1",
                         "crop_size: 2 mean_file: '" + (dir / "mean.binaryproto") + "'");
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  const Batch batch = Next(layer.get(), &data, &label);
  const Pixels ramp = testing::Ramp(8, 6);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 2; ++x) {
        EXPECT_EQ(batch(0, c, y, x),
                  At(ramp, c, 1 + y, 2 + x) - (100.0f * c + 10 * (1 + y) + 1 + x))
            << c << " " << y << " " << x;
      }
    }
  }
}

// The message of the error that Initialize (or, with `forward`, the first Forward) throws.
std::string FailureOf(Layer* layer, bool forward = false) {
  Tensor data, label;
  try {
    layer->Initialize({}, {&data, &label});
    if (forward) layer->Forward({}, {&data, &label});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'windows' (WindowData)"), std::string::npos)
        << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(WindowDataLayerTest, BadWindowFilesNameTheFileAndLine) {
  TempDir dir;
  WriteImages(dir);
  Context ctx(Device::Cpu(), 1701);
  const std::string file = dir / "windows.txt";
  const std::string params = "batch_size: 1 fg_fraction: 1";
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"x 0\nramp.png\n", file + ":1: expected '# image_index', got 'x'"},
      {"# 0\nramp.png\nthree\n6\n8\n0\n", file + ":3: the image's channels must be an integer"},
      {"# 0\nramp.png\n1\n6\n8\n0\n", file + ":3: image 'ramp.png' has 1 channels"},
      {"# 1\nramp.png\n3\n6\n8\n0\n", file + ":1: image index 1 out of order: expected 0"},
      {"# 0\nramp.png\n3\n6\n8\n1\n0 0.9 2 1 5 4\n",
       file + ":7: window 0 of image 0 is foreground"},
      {"# 0\nramp.png\n3\n6\n8\n1\n1 high 2 1 5 4\n", file + ":7: the overlap of window 0"},
      {"# 0\nramp.png\n3\n6\n8\n1\n1 0.9 5 1 2 4\n", file + ":7: window 0 of image 0 is (5, 1)"},
      {"# 0\nramp.png\n3\n6\n8\n2\n1 0.9 2 1 5 4\n",
       file + ":8: the file ends where the class index of window 1 of image 0 was expected"},
      {"\n\n", "the window file '" + file + "' is empty"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto layer = MakeLayer(&ctx, dir, c.text, params, "crop_size: 4");
    const std::string message = FailureOf(layer.get());
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  }

  // Found when the window is cut: a window outside its image (plain warp), a missing image.
  auto outside =
      MakeLayer(&ctx, dir, OneWindow("ramp.png", 8, 6, "1 0.9 5 1 8 4"), params, "crop_size: 4");
  std::string message = FailureOf(outside.get(), /*forward=*/true);
  EXPECT_NE(message.find(file + ":7: window (5, 1) to (8, 4) of image"), std::string::npos)
      << message;
  EXPECT_NE(message.find("not inside the image"), std::string::npos) << message;
  auto missing =
      MakeLayer(&ctx, dir, OneWindow("nope.png", 8, 6, "1 0.9 2 1 5 4"), params, "crop_size: 4");
  message = FailureOf(missing.get(), /*forward=*/true);
  EXPECT_NE(message.find("image '" + (dir / "images/nope.png") + "' (" + file + ":1)"),
            std::string::npos)
      << message;
  // ... or at setup with cache_images.
  auto cached = MakeLayer(&ctx, dir, OneWindow("nope.png", 8, 6, "1 0.9 2 1 5 4"),
                          params + " cache_images: true", "crop_size: 4");
  EXPECT_NE(FailureOf(cached.get()).find("no such file"), std::string::npos);
}

TEST(WindowDataLayerTest, BadParametersAreErrors) {
  TempDir dir;
  WriteImages(dir);
  Context ctx(Device::Cpu(), 1701);
  const std::string windows = OneWindow("ramp.png", 8, 6, "1 0.9 2 1 5 4");
  struct Case {
    std::string params, transform, expected;
  };
  const std::vector<Case> cases = {
      {"batch_size: 1", "", "transform_param.crop_size"},
      {"batch_size: 1 crop_size: 4", "crop_size: 4", "reads crop_size, mirror and mean_file"},
      {"batch_size: 1 crop_mode: 'circle'", "crop_size: 4", "crop_mode must be 'warp' or 'square'"},
      {"batch_size: 1 context_pad: 2", "crop_size: 4", "needs crop_size > 2 * context_pad"},
      {"batch_size: 1 fg_fraction: 1.5", "crop_size: 4", "fg_fraction must be in [0, 1]"},
      {"batch_size: 1 scale: 2", "crop_size: 4 scale: 3", "scale is set in both"},
      {"batch_size: 0", "crop_size: 4", "batch_size must be positive"},
      // 4 * 0.25 = 1 foreground window, 3 background ones: the file has none.
      {"batch_size: 4", "crop_size: 4", "has no background window"},
      {"batch_size: 1", "crop_size: 4 mean_value: 1 mean_value: 2", "one mean_value or one per"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.params + " / " + c.transform);
    auto layer = MakeLayer(&ctx, dir, windows, c.params, c.transform);
    const std::string message = FailureOf(layer.get());
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  }
}

#else

CORTADO_SKIP_WITHOUT_IMAGES(WindowDataLayerTest, WarpCutsOutTheWindowExactly)

#endif  // CORTADO_WITH_IMAGES

}  // namespace
}  // namespace cortado
