// SPDX-License-Identifier: Apache-2.0
// ImageData (Caffe type "ImageData"): reads the images a list file names, decodes them natively
// (JPEG or PNG, image_codec.hpp), transforms them with transform_param (see
// data_transformer.hpp) and prefetches batches on a background thread (base_data_layer.hpp).
// Params: image_data_param.source (the list file: one "path label" per line, the label after the
// last space, as Caffe splits it; blank lines skipped), root_folder (prefixed to every path),
// batch_size, shuffle, new_height and new_width (resize, bilinear; both or neither), is_color
// (true: 3 channels BGR; false: 1 gray), rand_skip; transform_param.
// Bottoms: none. Tops: data [batch_size, C, H', W'] and label [batch_size].
// The list wraps around at its end. Image i of the stream is line (skip + i) mod N in file order,
// or with shuffle the line at that place in the epoch's own permutation of the list.
//
// Differences from Caffe: the shuffled order of epoch e is drawn from the layer's seed and e (a
// fixed permutation per epoch, the same after a Seek or a resume), where Caffe reshuffles from
// its prefetch random stream at the start and whenever the list wraps. Every image must have the
// shape of the first after resizing (Caffe reshapes per batch, which only works with batch 1);
// another shape fails naming the image and both shapes. A missing or corrupt image fails its
// batch naming the file and the list's line (Caffe logs and crashes). The deprecated
// image_data_param.scale/mean_file/crop_size/mirror are refused in favour of transform_param.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "data/base_data_layer.hpp"
#include "data/data_transformer.hpp"
#include "data/image_codec.hpp"

namespace cortado {

class ImageDataLayer final : public BasePrefetchingDataLayer {
 public:
  using BasePrefetchingDataLayer::BasePrefetchingDataLayer;
  ~ImageDataLayer() override;

  const char* type() const override { return "ImageData"; }
  int ExactNumTopBlobs() const override { return 2; }

  // Lines of the list file, and the lines skipped at the start (rand_skip).
  int64_t num_lines() const { return static_cast<int64_t>(lines_.size()); }
  int64_t skip() const { return skip_; }
  // The list line (0-based, file order) of image `position` of the stream.
  int64_t LineAt(int64_t position) const;

 protected:
  void DataSetup(const std::vector<Tensor*>& top) override;
  void LoadBatch(int64_t index, Rng* rng, DataBatch* batch) override;

 private:
  struct Line {
    std::string path;  // root_folder + the list's path
    int label = 0;
    int number = 0;  // 1-based line number in the list file, for messages
  };
  // Image `line`, decoded and resized as the parameters say.
  DecodedImage Load(const Line& line) const;

  std::unique_ptr<DataTransformer> transformer_;
  std::vector<Line> lines_;
  std::string source_;
  ColorMode color_ = ColorMode::kColor;
  int new_height_ = 0, new_width_ = 0;
  int batch_size_ = 0;
  bool shuffle_ = false;
  int64_t skip_ = 0;
  std::vector<int> image_shape_;  // C, H, W of every image (after resizing)
  std::vector<int> item_shape_;   // C, H', W' after the transform
  // With shuffle: the order of epoch `order_epoch_` (computed once per epoch).
  mutable std::mutex order_mutex_;
  mutable int64_t order_epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

}  // namespace cortado
