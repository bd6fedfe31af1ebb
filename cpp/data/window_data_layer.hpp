// SPDX-License-Identifier: Apache-2.0
// WindowData (Caffe type "WindowData"): R-CNN's detection-window sampler. Reads a window file
// listing images and candidate windows (boxes) in them, and serves batches of windows cropped
// out of their images (JPEG or PNG, image_codec.hpp), warped to crop_size x crop_size, with
// their class labels; batches are prefetched on a background thread (base_data_layer.hpp).
//
// Window file (window_data_param.source), whitespace-separated tokens, per image:
//   # image_index          (0, 1, 2, ... in file order)
//   img_path               (root_folder + img_path is opened)
//   channels               (must be 3: images are always decoded as B, G, R, as Caffe's
//   height                  CV_LOAD_IMAGE_COLOR; height and width are read but, as in Caffe,
//   width                   the decoded image's own size is used)
//   num_windows
//   class_index overlap x1 y1 x2 y2     (num_windows lines; inclusive pixel coordinates)
// A window with overlap >= fg_threshold is foreground (its class_index must be > 0); one with
// overlap < bg_threshold is background and gets label 0; windows in between are dropped.
//
// Params (window_data_param): source, batch_size (> 0), fg_threshold (0.5), bg_threshold (0.5),
// fg_fraction (0.25, in [0, 1]), context_pad (0), crop_mode ("warp" or "square"),
// cache_images (false: read the image files once at setup and decode them per window),
// root_folder (""), scale (1). As in Caffe, crop_size (required, > 0), mirror, mean_file and
// mean_value come from transform_param; window_data_param's own mean_file, crop_size and mirror
// (which Caffe ignores in this layer) are refused. Mean subtraction happens before scaling.
// Bottoms: none. Tops: data [batch_size, 3, crop_size, crop_size] and label [batch_size].
//
// Each batch, as Caffe's load_batch: num_fg = (int)(batch_size * fg_fraction); first
// batch_size - num_fg background windows, then num_fg foreground windows, each drawn uniformly
// (rng() % count) from its list, then a mirror coin (rng() % 2) when mirroring. The window is
// cut out of its image and resized (bilinear, ResizeImage) to crop_size x crop_size. With
// context_pad > 0 or crop_mode "square" (the window grown to a square around its centre), the
// box is first scaled about its centre by crop_size / (crop_size - 2 * context_pad), so that
// context_pad pixels of context surround the window after warping; where that region leaves the
// image, it is clipped and the corresponding border of the output stays 0 (Caffe's rounding of
// every step is kept; a mirrored window mirrors that border too). Output pixels are
// (pixel - mean) * scale, with mean the mean_file value at (c, h + off + pad_h, w + off + pad_w),
// off = (mean_width - crop_size) / 2, or mean_value[c]; the zero border is not mean-subtracted.
//
// Differences from Caffe: randomness comes from the batch's own engine (batch k is a function
// of the layer's seed and k, so Seek and sharding work, see base_data_layer.hpp); mirror applies
// in TRAIN only, as in Cortado's DataTransformer (Caffe also flips in TEST); the list that a
// batch does not draw from may be empty (Caffe requires both lists non-empty). A scale given in
// transform_param is used when window_data_param has none (Caffe ignores transform_param.scale
// here, which loses the scale of an upgraded V1 net); giving both is refused. Errors instead of
// Caffe's aborts or silent misbehaviour: a bad window file (naming the file and line: a missing
// '#', an image_index out of order, a bad number, a truncated record, channels other than 3, a
// foreground window with class_index <= 0), an unknown crop_mode, context_pad too large for the
// crop, a window outside its image in plain warp mode, or one whose padded region misses the
// image (naming the window's line), and an image file that is missing or cannot be decoded.
#pragma once

#include <string>
#include <vector>

#include "data/base_data_layer.hpp"
#include "data/image_codec.hpp"

namespace cortado {

class WindowDataLayer final : public BasePrefetchingDataLayer {
 public:
  using BasePrefetchingDataLayer::BasePrefetchingDataLayer;
  ~WindowDataLayer() override;

  const char* type() const override { return "WindowData"; }
  int ExactNumTopBlobs() const override { return 2; }

  // What the window file held (after Setup).
  int num_images() const { return static_cast<int>(images_.size()); }
  int num_foreground() const { return static_cast<int>(fg_windows_.size()); }
  int num_background() const { return static_cast<int>(bg_windows_.size()); }

 protected:
  void DataSetup(const std::vector<Tensor*>& top) override;
  void LoadBatch(int64_t index, Rng* rng, DataBatch* batch) override;

 private:
  struct Image {
    std::string path;  // root_folder + the file's path
    int line = 0;      // of its '#' line, for messages
  };
  struct Window {
    int image = 0;
    int label = 0;
    int x1 = 0, y1 = 0, x2 = 0, y2 = 0;
    int line = 0;  // in the window file, for messages
  };

  void ReadWindowFile();
  void ReadMean();
  DecodedImage LoadImage(int image) const;
  // Writes window `w` of `image` into `out` (3 x crop x crop, zeroed by the caller).
  void CropWindow(const Window& w, const DecodedImage& image, bool mirror, float* out) const;

  std::string source_;
  int batch_size_ = 0;
  int crop_size_ = 0;
  int context_pad_ = 0;
  bool square_ = false;
  bool mirror_ = false;  // transform_param.mirror, in TRAIN
  float scale_ = 1.0f;
  float fg_fraction_ = 0.0f;
  std::vector<Image> images_;
  std::vector<std::string> cache_;  // with cache_images: each image file's bytes
  std::vector<Window> fg_windows_, bg_windows_;
  // mean_file (channels x mean_height_ x mean_width_), or one mean_value per channel.
  std::vector<float> mean_;
  int mean_height_ = 0, mean_width_ = 0;
  std::vector<float> mean_values_;
};

}  // namespace cortado
