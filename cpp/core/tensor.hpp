// SPDX-License-Identifier: Apache-2.0
// Tensor: Caffe's Blob. An N-D float32 array (row-major, NCHW for images) with a data buffer
// and a gradient ("diff") buffer of the same shape, each a SyncedMemory.
//
// Mixed precision: a tensor may keep its values (data and diff) in a 16-bit type instead, its
// "home" type (set_home_type; a net does it for the blobs that only layers computing in that
// type touch). Either view can be read and written whatever the home type: the other one is a
// "twin", a converted copy the tensor keeps (same layout, rounded to nearest even), remade when
// the home values have changed since (SyncedMemory::version). A write through a twin's mutable
// pointer is converted into the home at the next access to the home or to the other view
// through this tensor; tensors that share the buffer see it only after that.
//
// Reshape keeps the allocation when the new count fits (Caffe's behaviour), so nets can
// reshape every iteration without reallocating. Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/half_type.hpp"
#include "core/synced_memory.hpp"

namespace caffe {
class BlobProto;
class BlobShape;
}  // namespace caffe

namespace cortado {

class Tensor {
 public:
  // Caffe caps axes at 32; so do we.
  static constexpr int kMaxAxes = 32;

  Tensor() = default;
  explicit Tensor(const std::vector<int>& shape);
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Changes the shape; throws kInvalidArgument on a negative dimension or a count over INT_MAX.
  void Reshape(const std::vector<int>& shape);
  void Reshape(const caffe::BlobShape& shape);
  void Reshape(int num, int channels, int height, int width);
  void ReshapeLike(const Tensor& other) { Reshape(other.shape()); }

  const std::vector<int>& shape() const { return shape_; }
  // Dimension of `axis`; negative counts from the end.
  int shape(int axis) const { return shape_[CanonicalAxisIndex(axis)]; }
  int num_axes() const { return static_cast<int>(shape_.size()); }
  int count() const { return count_; }
  // Product of dimensions [start, end).
  int count(int start, int end) const;
  int count(int start) const { return count(start, num_axes()); }
  // Maps axis in [-num_axes, num_axes) to [0, num_axes); throws kInvalidArgument otherwise.
  int CanonicalAxisIndex(int axis) const;
  // "2 3 4 5 (120)"
  std::string ShapeString() const;

  // Caffe's 4-D accessors; axes beyond num_axes() read as 1.
  int num() const { return LegacyShape(0); }
  int channels() const { return LegacyShape(1); }
  int height() const { return LegacyShape(2); }
  int width() const { return LegacyShape(3); }
  int LegacyShape(int index) const;
  int offset(int n, int c = 0, int h = 0, int w = 0) const;
  int offset(const std::vector<int>& indices) const;

  const float* cpu_data() const;
  const float* cpu_diff() const;
  float* mutable_cpu_data();
  float* mutable_cpu_diff();
  const float* gpu_data() const;
  const float* gpu_diff() const;
  float* mutable_gpu_data();
  float* mutable_gpu_diff();
  float data_at(int n, int c = 0, int h = 0, int w = 0) const {
    return cpu_data()[offset(n, c, h, w)];
  }
  float diff_at(int n, int c = 0, int h = 0, int w = 0) const {
    return cpu_diff()[offset(n, c, h, w)];
  }

  // The type the values are kept in (kNone: float32) and its bytes per value. Setting it keeps
  // the buffers (and their sharing with other tensors) but not their values: set it before
  // the values matter, on every tensor that shares the buffers alike (Net does).
  void set_home_type(HalfType type);
  HalfType home_type() const { return home_; }
  // Channels-last: a 4-D tensor with a 16-bit home may keep its home values (data and diff) in
  // NHWC order, [n][h][w][c], for layers whose passes take that (Layer::NhwcTensors). Its
  // float32 views stay NCHW, as everywhere: the twins are transposed copies. Set it (with the
  // home type, before the values matter) on every tensor that shares the buffers alike; it is
  // dropped when the home type goes back to float32. kInvalidArgument unless 4-D with a 16-bit
  // home.
  void set_home_nhwc(bool nhwc);
  bool home_nhwc() const { return nhwc_; }
  // Channel blocks on the CPU: a 4-D float32 tensor may keep its home values (data and diff) as
  // oneDNN's blocked layout nChw{block}c, [n][c / block][h][w][c % block], for layers whose CPU
  // passes take that (Layer::BlockedTensors: convolutions read and write it without reordering).
  // Channels that are not a multiple of `block` fill a last, padded block whose extra lanes hold
  // zeros (oneDNN's padded layout; home_count() counts them): only passes that know the
  // geometry (convolution, pooling) read such a home, element-wise ones take the NCHW views
  // (SameCpuBlocks says no). Its float32 views (cpu_data and the rest) stay NCHW: twins,
  // reordered copies; cpu_home_data and the like give the home itself. 0 (the default) is plain
  // NCHW. Set it before the values matter, on every tensor that shares the buffers alike (Net
  // does); a Reshape to a shape that cannot keep it drops it (the values written through the
  // home are then not to be read back). kInvalidArgument unless 4-D with a float32 home and
  // `block` 0, 8 or 16.
  void set_cpu_block(int block);
  int cpu_block() const { return block_; }
  // Whether the channels fill a last block only in part (padded lanes in the home).
  bool cpu_block_padded() const { return block_ != 0 && shape_[1] % block_ != 0; }
  // Values in the home, padded lanes included (count() unless padded), and their bytes.
  int home_count() const;
  size_t home_bytes() const { return value_bytes() * static_cast<size_t>(home_count()); }
  // The home values on the host whatever their layout (NCHW, or nChw{cpu_block()}c), any value
  // written through a twin moved in first. A float32 home only (kInternal otherwise).
  const float* cpu_home_data() const;
  const float* cpu_home_diff() const;
  float* mutable_cpu_home_data();
  float* mutable_cpu_home_diff();
  // For element-wise passes, which work in any layout when all their tensors share it
  // (SameCpuBlocks): the home of a tensor in channel blocks when `kept`, else the NCHW view.
  const float* cpu_data_kept(bool kept) const {
    return kept && block_ != 0 ? cpu_home_data() : cpu_data();
  }
  const float* cpu_diff_kept(bool kept) const {
    return kept && block_ != 0 ? cpu_home_diff() : cpu_diff();
  }
  float* mutable_cpu_data_kept(bool kept) {
    return kept && block_ != 0 ? mutable_cpu_home_data() : mutable_cpu_data();
  }
  float* mutable_cpu_diff_kept(bool kept) {
    return kept && block_ != 0 ? mutable_cpu_home_diff() : mutable_cpu_diff();
  }
  size_t value_bytes() const { return ValueBytes(home_); }
  // The values in `type` (not kNone) on the GPU: the home buffer when it is of that type, else
  // the twin. A tensor whose home is one 16-bit type has no twin of the other (kInternal).
  const void* gpu_half_data(HalfType type) const;
  const void* gpu_half_diff(HalfType type) const;
  void* mutable_gpu_half_data(HalfType type);
  void* mutable_gpu_half_diff(HalfType type);
  // Converts what was written through either twin into the home now, so that tensors sharing
  // the buffers see it (Net does this after each pass of a layer that computes in 16 bits).
  void FlushTwins();
  // The same on the host (for tests and tools; the net's layers use the GPU ones).
  const void* cpu_half_data(HalfType type) const;
  void* mutable_cpu_half_data(HalfType type);

  const std::shared_ptr<SyncedMemory>& data() const { return data_; }
  const std::shared_ptr<SyncedMemory>& diff() const { return diff_; }

  // Makes this tensor use other's data (or diff) buffer; counts must match.
  void ShareData(const Tensor& other);
  void ShareDiff(const Tensor& other);
  // Makes this tensor keep its diff in `buffer` (at least count() floats), which other tensors
  // may use too (Net::ShareDiffBuffers). A later Reshape beyond the buffer's size gives the
  // tensor a diff buffer of its own again.
  void UseDiffBuffer(std::shared_ptr<SyncedMemory> buffer);
  // (Buffers hold count() values of the home type: value_bytes() each.)
  // The same for the data (Net::ShareDataBuffers).
  void UseDataBuffer(std::shared_ptr<SyncedMemory> buffer);

  // data -= diff (the plain SGD step the solvers build on).
  void Update();
  float asum_data() const;
  float asum_diff() const;
  float sumsq_data() const;
  float sumsq_diff() const;
  void scale_data(float factor);
  void scale_diff(float factor);

  // Copies data (or diff) from `source`; with reshape=false the shapes must already agree.
  void CopyFrom(const Tensor& source, bool copy_diff = false, bool reshape = false);

  // BlobProto I/O: reads `shape` or the legacy num/channels/height/width fields, and
  // `data` or `double_data`. With reshape=false the shapes must match (legacy 4-D ones too).
  void FromProto(const caffe::BlobProto& proto, bool reshape = true);
  void ToProto(caffe::BlobProto* proto, bool write_diff = false) const;
  bool ShapeEquals(const caffe::BlobProto& proto) const;

 private:
  // A converted copy of a buffer in the other type (float32 for a 16-bit home, `type` for a
  // float32 one).
  struct Twin {
    std::shared_ptr<SyncedMemory> memory;
    HalfType type = HalfType::kNone;  // a float32 home's twin: its 16-bit type
    bool current = false;             // holds the home's values as of `version`
    uint64_t version = 0;
    bool written = false;  // written through: the home is to be converted from it
  };
  enum class Side { kHost, kDevice };
  // The home buffer, any written twin converted into it first.
  SyncedMemory& Home(const std::shared_ptr<SyncedMemory>& home, Twin& twin) const;
  // The twin of `home` in `type` (kNone: float32), current and, with `write`, marked written.
  SyncedMemory& TwinOf(const std::shared_ptr<SyncedMemory>& home, Twin& twin, HalfType type,
                       bool write, Side side) const;
  // home -> twin or twin -> home, on the device or on the host.
  void Convert(SyncedMemory& from, HalfType from_type, SyncedMemory& to, HalfType to_type,
               bool on_device) const;
  const void* HalfPointer(const std::shared_ptr<SyncedMemory>& home, Twin& twin, HalfType type,
                          bool write, Side side) const;
  const float* FloatPointer(const std::shared_ptr<SyncedMemory>& home, Twin& twin, bool write,
                            Side side) const;
  const float* HomePointer(const std::shared_ptr<SyncedMemory>& home, Twin& twin, bool write) const;
  // float32 nChw{block_}c <-> NCHW on the host.
  void Reorder(SyncedMemory& from, SyncedMemory& to, bool to_blocked) const;
  // Replaces a data or diff buffer too small for the home (home_bytes: one taken with
  // UseDataBuffer, a wider home type, a padded block) with a new one of capacity_ values; the
  // values are not kept.
  void FitBuffers();

  std::shared_ptr<SyncedMemory> data_;
  std::shared_ptr<SyncedMemory> diff_;
  std::vector<int> shape_;
  int count_ = 0;
  int capacity_ = 0;
  int device_id_ = 0;
  HalfType home_ = HalfType::kNone;
  bool nhwc_ = false;
  int block_ = 0;
  mutable Twin data_twin_;
  mutable Twin diff_twin_;
};

// Whether the tensors (null ones left out) all keep the same channel blocks (Tensor::cpu_block),
// so that an element-wise pass may read and write their homes (Tensor::cpu_data_kept).
bool SameCpuBlocks(const std::vector<const Tensor*>& tensors);

// Shape of a BlobProto as a string ("2 3 4 5 (120)"), for error messages.
std::string ProtoShapeString(const caffe::BlobProto& proto);

}  // namespace cortado
