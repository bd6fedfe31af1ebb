// SPDX-License-Identifier: Apache-2.0
#include "core/tensor.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/config.hpp"
#include "core/error.hpp"
#include "math/half_convert.hpp"
#include "proto/caffe.pb.h"

#if CORTADO_WITH_CUDA
#include "core/cuda.hpp"
#endif

namespace cortado {

Tensor::Tensor(const std::vector<int>& shape) { Reshape(shape); }

void Tensor::Reshape(const std::vector<int>& shape) {
  if (static_cast<int>(shape.size()) > kMaxAxes) {
    CORTADO_THROW(kInvalidArgument, "tensor with {} axes; at most {} are supported", shape.size(),
                  kMaxAxes);
  }
  int64_t count = 1;
  for (int dim : shape) {
    if (dim < 0) {
      CORTADO_THROW(kInvalidArgument, "negative dimension in shape [{}]", fmt::join(shape, " "));
    }
    count *= dim;
    if (count > INT_MAX) {
      CORTADO_THROW(kInvalidArgument, "shape [{}] has more than INT_MAX elements",
                    fmt::join(shape, " "));
    }
  }
  if (nhwc_ && shape.size() != 4) {
    CORTADO_THROW(kInvalidArgument,
                  "a tensor kept in NHWC stays 4-D: it cannot take the shape [{}] (it has {})",
                  fmt::join(shape, " "), ShapeString());
  }
  // Values written through a twin reach the home while the twin still matches its shape.
  if (data_twin_.written) Home(data_, data_twin_);
  if (diff_twin_.written) Home(diff_, diff_twin_);
  if (block_ != 0 && shape != shape_) {
    // A blocked home's twins are reorderings for one shape; a shape without whole channel
    // blocks keeps its values in NCHW.
    data_twin_ = Twin{};
    diff_twin_ = Twin{};
    // A padded last block stays only for a tensor that had one: the net chose the layout
    // knowing its users (Tensor::set_cpu_block).
    const bool was_padded = shape_.size() == 4 && shape_[1] % block_ != 0;
    if (shape.size() != 4 || (shape[1] % block_ != 0 && !was_padded)) block_ = 0;
  }
  shape_ = shape;
  count_ = static_cast<int>(count);
  const size_t value = value_bytes();
  const int home = home_count();
  if (home > capacity_ || !data_) {
    capacity_ = home;
    data_ = std::make_shared<SyncedMemory>(value * static_cast<size_t>(capacity_), device_id_);
    diff_ = std::make_shared<SyncedMemory>(value * static_cast<size_t>(capacity_), device_id_);
    data_twin_ = Twin{};
    diff_twin_ = Twin{};
  } else {
    FitBuffers();  // one taken with UseDataBuffer or UseDiffBuffer may be too small now
  }
}

void Tensor::Reshape(const caffe::BlobShape& shape) {
  std::vector<int> dims;
  for (int i = 0; i < shape.dim_size(); ++i) {
    if (shape.dim(i) > INT_MAX || shape.dim(i) < 0) {
      CORTADO_THROW(kInvalidArgument, "dimension {} of a blob shape is {}", i, shape.dim(i));
    }
    dims.push_back(static_cast<int>(shape.dim(i)));
  }
  Reshape(dims);
}

void Tensor::Reshape(int num, int channels, int height, int width) {
  Reshape(std::vector<int>{num, channels, height, width});
}

int Tensor::count(int start, int end) const {
  CORTADO_CHECK(0 <= start && start <= end && end <= num_axes(), "count({}, {}) of {}", start, end,
                ShapeString());
  int result = 1;
  for (int i = start; i < end; ++i) result *= shape_[i];
  return result;
}

int Tensor::CanonicalAxisIndex(int axis) const {
  int n = num_axes();
  if (axis < -n || axis >= n) {
    CORTADO_THROW(kInvalidArgument, "axis {} out of range for a {}-D tensor of shape {}", axis, n,
                  ShapeString());
  }
  return axis < 0 ? axis + n : axis;
}

std::string Tensor::ShapeString() const {
  return fmt::format("{}{}({})", fmt::join(shape_, " "), shape_.empty() ? "" : " ", count_);
}

int Tensor::LegacyShape(int index) const {
  CORTADO_CHECK_LE(num_axes(), 4, "legacy accessors need a tensor of at most 4 axes");
  if (index >= num_axes() || index < -num_axes()) return 1;
  return shape(index);
}

int Tensor::offset(int n, int c, int h, int w) const {
  return ((n * channels() + c) * height() + h) * width() + w;
}

int Tensor::offset(const std::vector<int>& indices) const {
  CORTADO_CHECK_LE(static_cast<int>(indices.size()), num_axes());
  int result = 0;
  for (int i = 0; i < num_axes(); ++i) {
    result *= shape_[i];
    if (i < static_cast<int>(indices.size())) result += indices[i];
  }
  return result;
}

// ---- home buffers and twins ------------------------------------------------------------------

void Tensor::set_home_type(HalfType type) {
  if (type == home_) return;
  home_ = type;
  if (type == HalfType::kNone) nhwc_ = false;
  data_twin_ = Twin{};
  diff_twin_ = Twin{};
  FitBuffers();
}

void Tensor::FitBuffers() {
  const size_t needed = home_bytes(), bytes = value_bytes() * static_cast<size_t>(capacity_);
  if (data_ != nullptr && data_->size() < needed) {
    data_ = std::make_shared<SyncedMemory>(bytes, device_id_);
    data_twin_ = Twin{};
  }
  if (diff_ != nullptr && diff_->size() < needed) {
    diff_ = std::make_shared<SyncedMemory>(bytes, device_id_);
    diff_twin_ = Twin{};
  }
}

void Tensor::set_home_nhwc(bool nhwc) {
  if (nhwc == nhwc_) return;
  if (nhwc && (home_ == HalfType::kNone || num_axes() != 4)) {
    CORTADO_THROW(kInvalidArgument,
                  "a tensor of shape {} with a {} home cannot keep its values in NHWC (4-D tensors "
                  "with a 16-bit home only)",
                  ShapeString(), HalfTypeName(home_));
  }
  nhwc_ = nhwc;
  data_twin_ = Twin{};
  diff_twin_ = Twin{};
}

void Tensor::set_cpu_block(int block) {
  if (block == block_) return;
  if (block != 0 && (block != 8 && block != 16)) {
    CORTADO_THROW(kInvalidArgument, "a channel block of {} (0, 8 or 16)", block);
  }
  if (block != 0 && (home_ != HalfType::kNone || num_axes() != 4)) {
    CORTADO_THROW(kInvalidArgument,
                  "a tensor of shape {} with a {} home cannot keep its values in blocks of {} "
                  "channels (4-D float32 tensors only)",
                  ShapeString(), HalfTypeName(home_), block);
  }
  if (data_twin_.written) Home(data_, data_twin_);
  if (diff_twin_.written) Home(diff_, diff_twin_);
  block_ = block;
  data_twin_ = Twin{};
  diff_twin_ = Twin{};
  // A padded last block needs a larger home (zeros: the values are set after this).
  capacity_ = std::max(capacity_, home_count());
  FitBuffers();
}

int Tensor::home_count() const {
  if (!cpu_block_padded()) return count_;
  const int blocks = (shape_[1] + block_ - 1) / block_;
  return shape_[0] * blocks * block_ * shape_[2] * shape_[3];
}

bool SameCpuBlocks(const std::vector<const Tensor*>& tensors) {
  int block = -1;
  for (const Tensor* t : tensors) {
    if (t == nullptr) continue;
    if (block == -1) block = t->cpu_block();
    if (t->cpu_block() != block || t->cpu_block_padded()) return false;
  }
  return true;
}

void Tensor::Reorder(SyncedMemory& from, SyncedMemory& to, bool to_blocked) const {
  CORTADO_CHECK(block_ != 0 && num_axes() == 4, "a reorder of a tensor of shape {} in blocks of {}",
                ShapeString(), block_);
  const int num = shape_[0], channels = shape_[1], spatial = shape_[2] * shape_[3];
  const int block = block_, blocks = (channels + block - 1) / block;
  const auto* src = static_cast<const float*>(from.host_data());
  auto* dst = static_cast<float*>(to.mutable_host_data());
  const int planes = num * blocks;
  // One block of `block` channel planes of one image at a time: the blocked side is read or
  // written in order, the plain side in `block` streams. A padded last block's extra lanes are
  // written as zeros on the blocked side.
#pragma omp parallel for if (count_ >= (1 << 16)) schedule(static)
  for (int nb = 0; nb < planes; ++nb) {
    const int n = nb / blocks, first = nb % blocks * block;
    const int lanes = std::min(block, channels - first);
    const size_t plain = (static_cast<size_t>(n) * channels + first) * spatial;
    const size_t blocked = static_cast<size_t>(nb) * block * spatial;
    if (to_blocked) {
      const float* in = src + plain;
      float* out = dst + blocked;
      for (int i = 0; i < spatial; ++i) {
        for (int l = 0; l < lanes; ++l) out[i * block + l] = in[l * spatial + i];
        for (int l = lanes; l < block; ++l) out[i * block + l] = 0.0f;
      }
    } else {
      const float* in = src + blocked;
      float* out = dst + plain;
      for (int l = 0; l < lanes; ++l) {
        for (int i = 0; i < spatial; ++i) out[l * spatial + i] = in[i * block + l];
      }
    }
  }
}

void Tensor::Convert(SyncedMemory& from, HalfType from_type, SyncedMemory& to, HalfType to_type,
                     bool on_device) const {
  CORTADO_CHECK((from_type == HalfType::kNone) != (to_type == HalfType::kNone),
                "a conversion from {} to {}", HalfTypeName(from_type), HalfTypeName(to_type));
  const HalfType half = from_type == HalfType::kNone ? to_type : from_type;
  // A channels-last home is [n][h][w][c]; the float32 twin NCHW.
  int n = 0, c = 0, hw = 0;
  if (nhwc_) {
    CORTADO_CHECK_EQ(num_axes(), 4, "an NHWC tensor of shape {}", ShapeString());
    n = shape_[0];
    c = shape_[1];
    hw = shape_[2] * shape_[3];
  }
  if (on_device) {
#if CORTADO_WITH_CUDA
    void* stream = cuda::CurrentStream();
    if (from_type == HalfType::kNone) {
      const auto* src = static_cast<const float*>(from.device_data());
      void* dst = to.mutable_device_data();
      nhwc_ ? math::FloatsToHalfNhwcGpu(stream, half, n, c, hw, src, dst)
            : math::FloatsToHalfGpu(stream, half, count_, src, dst);
    } else {
      const void* src = from.device_data();
      auto* dst = static_cast<float*>(to.mutable_device_data());
      nhwc_ ? math::HalfNhwcToFloatsGpu(stream, half, n, c, hw, src, dst)
            : math::HalfToFloatsGpu(stream, half, count_, src, dst);
    }
    return;
#else
    CORTADO_THROW(kUnimplemented, "device memory requested in a build without CUDA");
#endif
  }
  if (from_type == HalfType::kNone) {
    const auto* src = static_cast<const float*>(from.host_data());
    void* dst = to.mutable_host_data();
    nhwc_ ? math::FloatsToHalfNhwcHost(half, n, c, hw, src, dst)
          : math::FloatsToHalfHost(half, count_, src, dst);
  } else {
    const void* src = from.host_data();
    auto* dst = static_cast<float*>(to.mutable_host_data());
    nhwc_ ? math::HalfNhwcToFloatsHost(half, n, c, hw, src, dst)
          : math::HalfToFloatsHost(half, count_, src, dst);
  }
}

namespace {
// Where a buffer's current values are: on the device (alone or synced with the host).
bool OnDevice(const SyncedMemory& memory) {
  return memory.head() == SyncedMemory::Head::kDevice ||
         memory.head() == SyncedMemory::Head::kSynced;
}
}  // namespace

SyncedMemory& Tensor::Home(const std::shared_ptr<SyncedMemory>& home, Twin& twin) const {
  CORTADO_CHECK(home != nullptr, "tensor has no data (never reshaped)");
  if (twin.written) {
    twin.written = false;
    if (home_ == HalfType::kNone && twin.type == HalfType::kNone) {
      Reorder(*twin.memory, *home, true);  // a blocked home's NCHW twin
      twin.current = true;
      twin.version = home->version();
      return *home;
    }
    Convert(*twin.memory, home_ == HalfType::kNone ? twin.type : HalfType::kNone, *home, home_,
            OnDevice(*twin.memory));
    // A 16-bit twin widened into a float32 home matches it exactly; a float32 twin rounded into a
    // 16-bit home does not, and is converted back at its next read.
    twin.current = home_ == HalfType::kNone;
    twin.version = home->version();
  }
  return *home;
}

SyncedMemory& Tensor::TwinOf(const std::shared_ptr<SyncedMemory>& home, Twin& twin, HalfType type,
                             bool write, Side side) const {
  CORTADO_CHECK(home != nullptr, "tensor has no data (never reshaped)");
  const size_t bytes = ValueBytes(type) * static_cast<size_t>(count_);
  if (twin.memory == nullptr || twin.memory->size() < bytes || twin.type != type) {
    if (twin.written) Home(home, twin);
    twin.memory = std::make_shared<SyncedMemory>(ValueBytes(type) * static_cast<size_t>(capacity_),
                                                 device_id_);
    twin.type = type;
    twin.current = false;
  }
  if (!twin.written && (!twin.current || twin.version != home->version())) {
    // Never written, the home holds zeros, as a new twin does.
    const bool both_new = home->head() == SyncedMemory::Head::kUninitialized &&
                          twin.memory->head() == SyncedMemory::Head::kUninitialized;
    // Converted where the twin is wanted: a device twin of a home written on the host is
    // uploaded first and converted there.
    if (!both_new && count_ > 0) {
      if (block_ != 0) {
        if (type != HalfType::kNone || side == Side::kDevice) {
          CORTADO_THROW(kInternal,
                        "a tensor of shape {} kept in blocks of {} channels has no {} view on the "
                        "{} (blocked tensors are for the CPU's float32 passes)",
                        ShapeString(), block_, HalfTypeName(type),
                        side == Side::kDevice ? "device" : "host");
        }
        Reorder(*home, *twin.memory, false);
      } else {
        Convert(*home, home_, *twin.memory, type, side == Side::kDevice);
      }
    }
    twin.current = true;
    twin.version = home->version();
  }
  if (write) twin.written = true;
  return *twin.memory;
}

void Tensor::FlushTwins() {
  if (data_twin_.written) Home(data_, data_twin_);
  if (diff_twin_.written) Home(diff_, diff_twin_);
}

namespace {
const void* PointerOn(SyncedMemory& memory, bool write, bool host) {
  if (host) return write ? memory.mutable_host_data() : memory.host_data();
  return write ? memory.mutable_device_data() : memory.device_data();
}
}  // namespace

const float* Tensor::FloatPointer(const std::shared_ptr<SyncedMemory>& home, Twin& twin, bool write,
                                  Side side) const {
  SyncedMemory& memory = home_ == HalfType::kNone && block_ == 0
                             ? Home(home, twin)
                             : TwinOf(home, twin, HalfType::kNone, write, side);
  return static_cast<const float*>(PointerOn(memory, write, side == Side::kHost));
}

const float* Tensor::HomePointer(const std::shared_ptr<SyncedMemory>& home, Twin& twin,
                                 bool write) const {
  if (home_ != HalfType::kNone) {
    CORTADO_THROW(kInternal, "the float32 home of a tensor of shape {} kept in {}", ShapeString(),
                  HalfTypeName(home_));
  }
  SyncedMemory& memory = Home(home, twin);
  // Written through the home: the twin is stale from now on (its version check sees the write).
  return static_cast<const float*>(PointerOn(memory, write, true));
}

const float* Tensor::cpu_home_data() const { return HomePointer(data_, data_twin_, false); }
const float* Tensor::cpu_home_diff() const { return HomePointer(diff_, diff_twin_, false); }
float* Tensor::mutable_cpu_home_data() {
  return const_cast<float*>(HomePointer(data_, data_twin_, true));
}
float* Tensor::mutable_cpu_home_diff() {
  return const_cast<float*>(HomePointer(diff_, diff_twin_, true));
}

const void* Tensor::HalfPointer(const std::shared_ptr<SyncedMemory>& home, Twin& twin,
                                HalfType type, bool write, Side side) const {
  CORTADO_CHECK(type != HalfType::kNone, "a 16-bit view asked for as float32");
  if (home_ == type) return PointerOn(Home(home, twin), write, side == Side::kHost);
  if (home_ != HalfType::kNone) {
    CORTADO_THROW(kInternal, "a tensor of shape {} kept in {} has no {} view", ShapeString(),
                  HalfTypeName(home_), HalfTypeName(type));
  }
  return PointerOn(TwinOf(home, twin, type, write, side), write, side == Side::kHost);
}

const float* Tensor::cpu_data() const {
  return FloatPointer(data_, data_twin_, false, Side::kHost);
}
const float* Tensor::cpu_diff() const {
  return FloatPointer(diff_, diff_twin_, false, Side::kHost);
}
float* Tensor::mutable_cpu_data() {
  return const_cast<float*>(FloatPointer(data_, data_twin_, true, Side::kHost));
}
float* Tensor::mutable_cpu_diff() {
  return const_cast<float*>(FloatPointer(diff_, diff_twin_, true, Side::kHost));
}
const float* Tensor::gpu_data() const {
  return FloatPointer(data_, data_twin_, false, Side::kDevice);
}
const float* Tensor::gpu_diff() const {
  return FloatPointer(diff_, diff_twin_, false, Side::kDevice);
}
float* Tensor::mutable_gpu_data() {
  return const_cast<float*>(FloatPointer(data_, data_twin_, true, Side::kDevice));
}
float* Tensor::mutable_gpu_diff() {
  return const_cast<float*>(FloatPointer(diff_, diff_twin_, true, Side::kDevice));
}
const void* Tensor::gpu_half_data(HalfType type) const {
  return HalfPointer(data_, data_twin_, type, false, Side::kDevice);
}
const void* Tensor::gpu_half_diff(HalfType type) const {
  return HalfPointer(diff_, diff_twin_, type, false, Side::kDevice);
}
void* Tensor::mutable_gpu_half_data(HalfType type) {
  return const_cast<void*>(HalfPointer(data_, data_twin_, type, true, Side::kDevice));
}
void* Tensor::mutable_gpu_half_diff(HalfType type) {
  return const_cast<void*>(HalfPointer(diff_, diff_twin_, type, true, Side::kDevice));
}
const void* Tensor::cpu_half_data(HalfType type) const {
  return HalfPointer(data_, data_twin_, type, false, Side::kHost);
}
void* Tensor::mutable_cpu_half_data(HalfType type) {
  return const_cast<void*>(HalfPointer(data_, data_twin_, type, true, Side::kHost));
}

void Tensor::ShareData(const Tensor& other) {
  CORTADO_CHECK_EQ(count_, other.count(), "ShareData between {} and {}", ShapeString(),
                   other.ShapeString());
  CORTADO_CHECK(home_ == other.home_, "ShareData between a tensor kept in {} and one kept in {}",
                HalfTypeName(home_), HalfTypeName(other.home_));
  CORTADO_CHECK(nhwc_ == other.nhwc_, "ShareData between a tensor kept in NHWC and one in NCHW");
  if (data_ != other.data_) data_twin_ = Twin{};
  data_ = other.data_;
}

void Tensor::ShareDiff(const Tensor& other) {
  CORTADO_CHECK_EQ(count_, other.count(), "ShareDiff between {} and {}", ShapeString(),
                   other.ShapeString());
  CORTADO_CHECK(home_ == other.home_, "ShareDiff between a tensor kept in {} and one kept in {}",
                HalfTypeName(home_), HalfTypeName(other.home_));
  CORTADO_CHECK(nhwc_ == other.nhwc_, "ShareDiff between a tensor kept in NHWC and one in NCHW");
  if (diff_ != other.diff_) diff_twin_ = Twin{};
  diff_ = other.diff_;
}

void Tensor::UseDataBuffer(std::shared_ptr<SyncedMemory> buffer) {
  CORTADO_CHECK(buffer != nullptr && buffer->size() >= home_bytes(),
                "data buffer of {} bytes for a tensor of shape {}", buffer ? buffer->size() : 0,
                ShapeString());
  if (data_ != buffer) data_twin_ = Twin{};
  data_ = std::move(buffer);
}

void Tensor::UseDiffBuffer(std::shared_ptr<SyncedMemory> buffer) {
  CORTADO_CHECK(buffer != nullptr && buffer->size() >= home_bytes(),
                "diff buffer of {} bytes for a tensor of shape {}", buffer ? buffer->size() : 0,
                ShapeString());
  if (diff_ != buffer) diff_twin_ = Twin{};
  diff_ = std::move(buffer);
}

void Tensor::Update() {
  if (count_ == 0) return;
  cblas_saxpy(count_, -1.0f, cpu_diff(), 1, mutable_cpu_data(), 1);
}

float Tensor::asum_data() const { return count_ ? cblas_sasum(count_, cpu_data(), 1) : 0.0f; }
float Tensor::asum_diff() const { return count_ ? cblas_sasum(count_, cpu_diff(), 1) : 0.0f; }
float Tensor::sumsq_data() const {
  return count_ ? cblas_sdot(count_, cpu_data(), 1, cpu_data(), 1) : 0.0f;
}
float Tensor::sumsq_diff() const {
  return count_ ? cblas_sdot(count_, cpu_diff(), 1, cpu_diff(), 1) : 0.0f;
}
void Tensor::scale_data(float factor) {
  if (count_) cblas_sscal(count_, factor, mutable_cpu_data(), 1);
}
void Tensor::scale_diff(float factor) {
  if (count_) cblas_sscal(count_, factor, mutable_cpu_diff(), 1);
}

void Tensor::CopyFrom(const Tensor& source, bool copy_diff, bool reshape) {
  if (source.count() != count_ || source.shape() != shape_) {
    if (!reshape) {
      CORTADO_THROW(kInvalidArgument, "cannot copy a tensor of shape {} into one of shape {}",
                    source.ShapeString(), ShapeString());
    }
    ReshapeLike(source);
  }
  if (count_ == 0) return;
  if (copy_diff) {
    std::memcpy(mutable_cpu_diff(), source.cpu_diff(), sizeof(float) * count_);
  } else {
    std::memcpy(mutable_cpu_data(), source.cpu_data(), sizeof(float) * count_);
  }
}

namespace {

// The stored shape as written (64-bit dims: a dimension beyond int is never read as another).
std::vector<int64_t> ProtoShape(const caffe::BlobProto& proto) {
  std::vector<int64_t> shape;
  if (proto.has_num() || proto.has_channels() || proto.has_height() || proto.has_width()) {
    shape = {proto.num(), proto.channels(), proto.height(), proto.width()};
  } else {
    shape.assign(proto.shape().dim().begin(), proto.shape().dim().end());
  }
  return shape;
}

// The stored shape as tensor dims; a dimension outside [0, INT_MAX] is kInvalidArgument.
std::vector<int> ProtoShapeInts(const caffe::BlobProto& proto) {
  std::vector<int> dims;
  for (int64_t d : ProtoShape(proto)) {
    if (d < 0 || d > INT_MAX) {
      CORTADO_THROW(kInvalidArgument, "a stored blob has dimension {}, outside 0 to {}", d,
                    INT_MAX);
    }
    dims.push_back(static_cast<int>(d));
  }
  return dims;
}

}  // namespace

std::string ProtoShapeString(const caffe::BlobProto& proto) {
  const std::vector<int64_t> shape = ProtoShape(proto);
  // In double: the dims of a hostile file may overflow any integer product.
  double count = 1;
  for (int64_t d : shape) count *= static_cast<double>(d);
  return fmt::format("{}{}({:.15g})", fmt::join(shape, " "), shape.empty() ? "" : " ", count);
}

bool Tensor::ShapeEquals(const caffe::BlobProto& proto) const {
  if (proto.has_num() || proto.has_channels() || proto.has_height() || proto.has_width()) {
    // Legacy 4-D blobs match a tensor of at most 4 axes whose padded shape agrees.
    return num_axes() <= 4 && LegacyShape(-4) == proto.num() &&
           LegacyShape(-3) == proto.channels() && LegacyShape(-2) == proto.height() &&
           LegacyShape(-1) == proto.width();
  }
  const std::vector<int64_t> stored = ProtoShape(proto);
  return std::equal(stored.begin(), stored.end(), shape_.begin(), shape_.end(),
                    [](int64_t a, int b) { return a == static_cast<int64_t>(b); });
}

void Tensor::FromProto(const caffe::BlobProto& proto, bool reshape) {
  if (reshape) {
    Reshape(ProtoShapeInts(proto));
  } else if (!ShapeEquals(proto)) {
    CORTADO_THROW(kInvalidArgument, "shape mismatch: stored blob is {}, expected {}",
                  ProtoShapeString(proto), ShapeString());
  }
  auto fill = [this](float* dst, const auto& values, const char* what) {
    if (values.size() != count_) {
      CORTADO_THROW(kInvalidArgument, "blob of shape {} holds {} {} values", ShapeString(),
                    values.size(), what);
    }
    for (int i = 0; i < count_; ++i) dst[i] = static_cast<float>(values.Get(i));
  };
  if (proto.double_data_size() > 0) {
    fill(mutable_cpu_data(), proto.double_data(), "double_data");
  } else {
    fill(mutable_cpu_data(), proto.data(), "data");
  }
  if (proto.double_diff_size() > 0) {
    fill(mutable_cpu_diff(), proto.double_diff(), "double_diff");
  } else if (proto.diff_size() > 0) {
    fill(mutable_cpu_diff(), proto.diff(), "diff");
  }
}

void Tensor::ToProto(caffe::BlobProto* proto, bool write_diff) const {
  proto->Clear();
  for (int dim : shape_) proto->mutable_shape()->add_dim(dim);
  if (count_ == 0) return;
  const float* data = cpu_data();
  proto->mutable_data()->Reserve(count_);
  proto->mutable_data()->Add(data, data + count_);
  if (write_diff) {
    const float* diff = cpu_diff();
    proto->mutable_diff()->Reserve(count_);
    proto->mutable_diff()->Add(diff, diff + count_);
  }
}

}  // namespace cortado
