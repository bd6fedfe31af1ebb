// SPDX-License-Identifier: Apache-2.0
#include "layers/base_conv_layer.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>

#include "layers/filler.hpp"
#include "math/math.hpp"

namespace cortado {
namespace {

// Chunking of the batch: images are unrolled side by side until the column block reaches
// kColumnBlockFloats (512 KiB, half this machine class's L2), so the block is still in cache
// when the GEMM reads it. Large images get one image per GEMM (as Caffe); small ones (LeNet,
// CIFAR conv3) several, which means fewer, wider GEMMs. Measured single-threaded on the
// LeNet/CIFAR shapes, bigger blocks (2-16 MiB) were 5-15% slower than this.
constexpr size_t kColumnBlockFloats = size_t{1} << 17;

// Per-thread scratch shared by every convolution layer on the thread. Layers run one at a
// time on a thread and use it only inside one Forward/Backward call, so sharing is safe and a
// deep net needs one workspace rather than one per layer.
struct Workspace {
  std::unique_ptr<float[]> columns, outputs, scratch;
  size_t columns_size = 0, outputs_size = 0, scratch_size = 0;
};

float* Reserve(std::unique_ptr<float[]>* buffer, size_t* size, size_t n) {
  if (*size < n) {
    buffer->reset();  // free first: the old contents are not needed
    *buffer = std::make_unique<float[]>(n);
    *size = n;
  }
  return buffer->get();
}

Workspace& ThreadWorkspace() {
  thread_local Workspace workspace;
  return workspace;
}

// Reads one geometry value per spatial axis: the repeated field (one value for all axes or
// one per axis), or the 2-D _h/_w pair when either is set. `field` names the repeated field,
// `what` the _h/_w prefix.
std::vector<int> ReadAxisValues(const std::string& layer, const char* field, const char* what,
                                const google::protobuf::RepeatedField<uint32_t>& values, bool has_h,
                                bool has_w, uint32_t h, uint32_t w, bool both_hw_required,
                                int num_spatial_axes, int default_value, bool allow_zero) {
  std::vector<int> result;
  if (has_h || has_w) {
    if (num_spatial_axes != 2) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: {}_h/{}_w can only be used for 2-D convolution; the input has {} "
                    "spatial axes",
                    layer, what, what, num_spatial_axes);
    }
    if (values.size() != 0) {
      CORTADO_THROW(kInvalidArgument, "{}: give either {} or {}_h/{}_w, not both", layer, field,
                    what, what);
    }
    if (both_hw_required && !(has_h && has_w)) {
      CORTADO_THROW(kInvalidArgument, "{}: {}_h and {}_w must be given together", layer, what,
                    what);
    }
    result = {static_cast<int>(h), static_cast<int>(w)};
  } else if (values.size() == 0) {
    if (default_value < 0) {
      CORTADO_THROW(kInvalidArgument, "{}: {} (or {}_h and {}_w) is required", layer, field, what,
                    what);
    }
    result.assign(num_spatial_axes, default_value);
  } else if (values.size() == 1 || values.size() == num_spatial_axes) {
    for (int i = 0; i < num_spatial_axes; ++i) {
      result.push_back(static_cast<int>(values.Get(values.size() == 1 ? 0 : i)));
    }
  } else {
    CORTADO_THROW(kInvalidArgument,
                  "{}: {} must be given once or once per spatial axis ({}), got {} values", layer,
                  field, num_spatial_axes, values.size());
  }
  for (int v : result) {
    if (v < 0 || (v == 0 && !allow_zero)) {
      CORTADO_THROW(kInvalidArgument, "{}: {} must be {}, got {}", layer, what,
                    allow_zero ? "non-negative" : "positive", fmt::join(result, " x "));
    }
  }
  return result;
}

int64_t Product64(const std::vector<int>& v, size_t begin = 0) {
  int64_t p = 1;
  for (size_t i = begin; i < v.size(); ++i) {
    p *= v[i];
    if (p > INT_MAX) return int64_t{INT_MAX} + 1;  // saturates: the callers refuse it
  }
  return p;
}

// The product of v[begin:] as an int; kInvalidArgument naming `owner()`, `what` and the shape
// when it exceeds INT_MAX (sizes of one image that the column buffers and GEMMs index with ints).
// `owner` is called only then.
template <typename Owner>
int CheckedProduct(const std::vector<int>& v, Owner&& owner, const char* what, size_t begin = 0) {
  const int64_t p = Product64(v, begin);
  if (p > INT_MAX) {
    const std::vector<int> dims(v.begin() + static_cast<std::ptrdiff_t>(begin), v.end());
    CORTADO_THROW(kInvalidArgument, "{}: {} [{}] has more than INT_MAX ({}) elements", owner(),
                  what, fmt::join(dims, " "), INT_MAX);
  }
  return static_cast<int>(p);
}

// The wide column matrices hold `count` images side by side: a rows x (count * cols) matrix
// whose columns [n * cols, (n + 1) * cols) belong to image n. These copy one image's
// rows x cols block into (or out of) its slot.
void CopyToSlot(const float* block, int rows, int cols, int n, int count, float* matrix) {
  const size_t ld = static_cast<size_t>(count) * cols;
  float* dst = matrix + static_cast<size_t>(n) * cols;
  for (int r = 0; r < rows; ++r) {
    std::memcpy(dst + r * ld, block + static_cast<size_t>(r) * cols, sizeof(float) * cols);
  }
}

void CopyFromSlot(const float* matrix, int rows, int cols, int n, int count, float* block) {
  const size_t ld = static_cast<size_t>(count) * cols;
  const float* src = matrix + static_cast<size_t>(n) * cols;
  for (int r = 0; r < rows; ++r) {
    std::memcpy(block + static_cast<size_t>(r) * cols, src + r * ld, sizeof(float) * cols);
  }
}

}  // namespace

std::string BaseConvolutionLayer::GeometryString() const {
  return fmt::format("kernel {}, stride {}, pad {}, dilation {}", fmt::join(kernel_shape_, "x"),
                     fmt::join(stride_, "x"), fmt::join(pad_, "x"), fmt::join(dilation_, "x"));
}

void BaseConvolutionLayer::Setup(const std::vector<Tensor*>& bottom,
                                 const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.convolution_param();
  const std::string me = Describe();
  const Tensor& in = *bottom[0];
  const int num_axes = in.num_axes();
  if (p.axis() < -num_axes || p.axis() >= num_axes) {
    CORTADO_THROW(kInvalidArgument, "{}: axis {} is out of range for bottom shape {}", me, p.axis(),
                  in.ShapeString());
  }
  channel_axis_ = in.CanonicalAxisIndex(p.axis());
  num_spatial_axes_ = num_axes - channel_axis_ - 1;
  if (num_spatial_axes_ < 1) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: needs at least one spatial axis after the channel axis {}; bottom shape {}",
                  me, channel_axis_, in.ShapeString());
  }
  force_nd_im2col_ = p.force_nd_im2col();

  kernel_shape_ = ReadAxisValues(me, "kernel_size", "kernel", p.kernel_size(), p.has_kernel_h(),
                                 p.has_kernel_w(), p.kernel_h(), p.kernel_w(), true,
                                 num_spatial_axes_, -1, false);
  stride_ = ReadAxisValues(me, "stride", "stride", p.stride(), p.has_stride_h(), p.has_stride_w(),
                           p.stride_h(), p.stride_w(), true, num_spatial_axes_, 1, false);
  // pad_h / pad_w default to 0 each, so one of them alone is fine (as in Caffe).
  pad_ = ReadAxisValues(me, "pad", "pad", p.pad(), p.has_pad_h(), p.has_pad_w(), p.pad_h(),
                        p.pad_w(), false, num_spatial_axes_, 0, true);
  dilation_ = ReadAxisValues(me, "dilation", "dilation", p.dilation(), false, false, 0, 0, false,
                             num_spatial_axes_, 1, false);
  is_1x1_ = true;
  for (int i = 0; i < num_spatial_axes_; ++i) {
    is_1x1_ &= kernel_shape_[i] == 1 && stride_[i] == 1 && pad_[i] == 0;
  }

  channels_ = in.shape(channel_axis_);
  if (channels_ <= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: bottom shape {} has no channels on axis {}", me,
                  in.ShapeString(), channel_axis_);
  }
  num_output_ = static_cast<int>(p.num_output());
  if (num_output_ <= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: num_output must be positive, got {}", me, num_output_);
  }
  group_ = static_cast<int>(p.group());
  if (group_ <= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: group must be positive, got {}", me, group_);
  }
  if (channels_ % group_ != 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: input channels ({}, axis {} of bottom shape {}) are not divisible by "
                  "group {}",
                  me, channels_, channel_axis_, in.ShapeString(), group_);
  }
  if (num_output_ % group_ != 0) {
    CORTADO_THROW(kInvalidArgument, "{}: num_output {} is not divisible by group {}", me,
                  num_output_, group_);
  }
  if (reverse_dimensions()) {
    conv_out_channels_ = channels_;
    conv_in_channels_ = num_output_;
  } else {
    conv_out_channels_ = num_output_;
    conv_in_channels_ = channels_;
  }
  bias_term_ = p.bias_term();

  std::vector<int> weight_shape = {conv_out_channels_, conv_in_channels_ / group_};
  weight_shape.insert(weight_shape.end(), kernel_shape_.begin(), kernel_shape_.end());
  kernel_dim_ = CheckedProduct(
      weight_shape, [&] { return Describe(); }, "a filter of shape", 1);
  const std::vector<int> bias_shape = {num_output_};
  const size_t num_blobs = bias_term_ ? 2 : 1;
  if (!blobs_.empty()) {
    // Blobs given from outside (shared or loaded): they must fit.
    if (blobs_.size() != num_blobs) {
      CORTADO_THROW(kInvalidArgument, "{}: expected {} parameter blob(s) (bias_term {}), got {}",
                    me, num_blobs, bias_term_, blobs_.size());
    }
    if (blobs_[0]->shape() != weight_shape) {
      CORTADO_THROW(kInvalidArgument, "{}: weight blob has shape {}, expected {}", me,
                    blobs_[0]->ShapeString(), Tensor(weight_shape).ShapeString());
    }
    if (bias_term_ && blobs_[1]->shape() != bias_shape) {
      CORTADO_THROW(kInvalidArgument, "{}: bias blob has shape {}, expected {}", me,
                    blobs_[1]->ShapeString(), Tensor(bias_shape).ShapeString());
    }
  } else {
    blobs_.push_back(std::make_shared<Tensor>(weight_shape));
    Fill(p.weight_filler(), ctx_->rng(), blobs_[0].get());
    if (bias_term_) {
      blobs_.push_back(std::make_shared<Tensor>(bias_shape));
      Fill(p.bias_filler(), ctx_->rng(), blobs_[1].get());
    }
  }
}

void BaseConvolutionLayer::Reshape(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (in.num_axes() != channel_axis_ + 1 + num_spatial_axes_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bottom shape {} has {} axes; it was set up for {} (axes may not change)",
                  Describe(), in.ShapeString(), in.num_axes(),
                  channel_axis_ + 1 + num_spatial_axes_);
  }
  if (in.shape(channel_axis_) != channels_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bottom shape {} has {} channels on axis {}; the weights were set up for {}",
                  Describe(), in.ShapeString(), in.shape(channel_axis_), channel_axis_, channels_);
  }
  for (size_t i = 1; i < bottom.size(); ++i) {
    if (bottom[i]->shape() != in.shape()) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: all bottoms must have the same shape; bottom 0 is {}, bottom {} is {}",
                    Describe(), in.ShapeString(), i, bottom[i]->ShapeString());
    }
  }
  num_ = in.count(0, channel_axis_);
  input_shape_.assign(in.shape().begin() + channel_axis_ + 1, in.shape().end());
  ComputeOutputShape();
  for (int i = 0; i < num_spatial_axes_; ++i) {
    if (output_shape_[i] <= 0) {
      CORTADO_THROW(kInvalidArgument, "{}: bottom shape {} with {} gives output size {} on axis {}",
                    Describe(), in.ShapeString(), GeometryString(), output_shape_[i],
                    channel_axis_ + 1 + i);
    }
  }
  std::vector<int> top_shape(in.shape().begin(), in.shape().begin() + channel_axis_);
  top_shape.push_back(num_output_);
  top_shape.insert(top_shape.end(), output_shape_.begin(), output_shape_.end());
  for (Tensor* t : top) t->Reshape(top_shape);

  const std::vector<int>& conv_in_spatial = reverse_dimensions() ? output_shape_ : input_shape_;
  const std::vector<int>& conv_out_spatial = reverse_dimensions() ? input_shape_ : output_shape_;
  // One image's input, output and column buffer are indexed with ints (as in Caffe): a batch of
  // 0 images leaves the tops empty, so only these products can catch an image too large.
  const auto me = [&] { return Describe() + " with bottom " + in.ShapeString(); };
  conv_input_shape_ = {conv_in_channels_};
  conv_input_shape_.insert(conv_input_shape_.end(), conv_in_spatial.begin(), conv_in_spatial.end());
  std::vector<int> conv_output_shape = {conv_out_channels_};
  conv_output_shape.insert(conv_output_shape.end(), conv_out_spatial.begin(),
                           conv_out_spatial.end());
  col_shape_ = {kernel_dim_ * group_};
  col_shape_.insert(col_shape_.end(), conv_out_spatial.begin(), conv_out_spatial.end());
  conv_input_dim_ = CheckedProduct(conv_input_shape_, me, "an input image of shape");
  conv_output_dim_ = CheckedProduct(conv_output_shape, me, "an output image of shape");
  CheckedProduct(col_shape_, me, "the column buffer of one image, of shape");
  conv_in_spatial_dim_ = CheckedProduct(conv_in_spatial, me, "an input plane of shape");
  conv_out_spatial_dim_ = CheckedProduct(conv_out_spatial, me, "an output plane of shape");
  out_spatial_dim_ = CheckedProduct(output_shape_, me, "an output plane of shape");
}

int BaseConvolutionLayer::ChunkSize(int num) const {
  const size_t per_image = static_cast<size_t>(kernel_dim_) * group_ * conv_out_spatial_dim_;
  const size_t chunk = std::max<size_t>(1, kColumnBlockFloats / std::max<size_t>(per_image, 1));
  return static_cast<int>(std::min<size_t>(chunk, std::max(num, 1)));
}

void BaseConvolutionLayer::BuildColumns(const float* input, int count, float* columns,
                                        float* scratch) const {
  const int rows = kernel_dim_ * group_;
  const bool use_2d = num_spatial_axes_ == 2 && !force_nd_im2col_;
  for (int n = 0; n < count; ++n) {
    const float* image = input + static_cast<size_t>(n) * conv_input_dim_;
    const float* unrolled = image;  // a 1x1 convolution's columns are the image itself
    if (!is_1x1_) {
      float* dst = count == 1 ? columns : scratch;
      if (use_2d) {
        math::Im2col(image, conv_in_channels_, conv_input_shape_[1], conv_input_shape_[2],
                     kernel_shape_[0], kernel_shape_[1], pad_[0], pad_[1], stride_[0], stride_[1],
                     dilation_[0], dilation_[1], dst);
      } else {
        math::Im2colNd(image, num_spatial_axes_, conv_input_shape_.data(), col_shape_.data(),
                       kernel_shape_.data(), pad_.data(), stride_.data(), dilation_.data(), dst);
      }
      unrolled = dst;
    }
    if (count > 1) {
      CopyToSlot(unrolled, rows, conv_out_spatial_dim_, n, count, columns);
    } else if (unrolled != columns) {
      math::Copy(rows * conv_out_spatial_dim_, unrolled, columns);
    }
  }
}

void BaseConvolutionLayer::ScatterColumns(const float* columns, int count, float* input,
                                          float* scratch) const {
  const int rows = kernel_dim_ * group_;
  const bool use_2d = num_spatial_axes_ == 2 && !force_nd_im2col_;
  for (int n = 0; n < count; ++n) {
    float* image = input + static_cast<size_t>(n) * conv_input_dim_;
    if (is_1x1_) {
      // The columns are the image: copy straight back.
      if (count > 1) {
        CopyFromSlot(columns, rows, conv_out_spatial_dim_, n, count, image);
      } else {
        math::Copy(rows * conv_out_spatial_dim_, columns, image);
      }
      continue;
    }
    const float* cols = columns;
    if (count > 1) {
      CopyFromSlot(columns, rows, conv_out_spatial_dim_, n, count, scratch);
      cols = scratch;
    }
    // Col2im zeroes the image first, so this overwrites it.
    if (use_2d) {
      math::Col2im(cols, conv_in_channels_, conv_input_shape_[1], conv_input_shape_[2],
                   kernel_shape_[0], kernel_shape_[1], pad_[0], pad_[1], stride_[0], stride_[1],
                   dilation_[0], dilation_[1], image);
    } else {
      math::Col2imNd(cols, num_spatial_axes_, conv_input_shape_.data(), col_shape_.data(),
                     kernel_shape_.data(), pad_.data(), stride_.data(), dilation_.data(), image);
    }
  }
}

void BaseConvolutionLayer::ForwardGemm(const float* input, const float* weights, float* output,
                                       int num) {
  const int m = conv_out_channels_ / group_;
  const int k = kernel_dim_;
  const int spatial = conv_out_spatial_dim_;
  const int chunk = ChunkSize(num);
  const size_t col_floats = static_cast<size_t>(k) * group_ * spatial;
  Workspace& ws = ThreadWorkspace();
  for (int n0 = 0; n0 < num; n0 += chunk) {
    const int count = std::min(chunk, num - n0);
    const float* in = input + static_cast<size_t>(n0) * conv_input_dim_;
    float* out = output + static_cast<size_t>(n0) * conv_output_dim_;
    const float* columns = in;
    if (!(is_1x1_ && count == 1)) {
      float* buffer = Reserve(&ws.columns, &ws.columns_size, col_floats * count);
      float* scratch =
          count > 1 && !is_1x1_ ? Reserve(&ws.scratch, &ws.scratch_size, col_floats) : nullptr;
      BuildColumns(in, count, buffer, scratch);
      columns = buffer;
    }
    // With several images the product is [channels, count * spatial]; it is then split into
    // the per-image [channels, spatial] blocks of the output.
    float* result = count == 1 ? out
                               : Reserve(&ws.outputs, &ws.outputs_size,
                                         static_cast<size_t>(conv_output_dim_) * count);
    const int n = count * spatial;
    for (int g = 0; g < group_; ++g) {
      math::Gemm(false, false, m, n, k, 1.0f, weights + static_cast<size_t>(g) * m * k,
                 columns + static_cast<size_t>(g) * k * n, 0.0f,
                 result + static_cast<size_t>(g) * m * n);
    }
    if (count > 1) {
      for (int i = 0; i < count; ++i) {
        CopyFromSlot(result, conv_out_channels_, spatial, i, count,
                     out + static_cast<size_t>(i) * conv_output_dim_);
      }
    }
  }
}

void BaseConvolutionLayer::BackwardGemm(const float* output, const float* weights, float* input,
                                        int num) {
  const int m = conv_out_channels_ / group_;
  const int k = kernel_dim_;
  const int spatial = conv_out_spatial_dim_;
  const int chunk = ChunkSize(num);
  const size_t col_floats = static_cast<size_t>(k) * group_ * spatial;
  Workspace& ws = ThreadWorkspace();
  for (int n0 = 0; n0 < num; n0 += chunk) {
    const int count = std::min(chunk, num - n0);
    const float* out = output + static_cast<size_t>(n0) * conv_output_dim_;
    float* in = input + static_cast<size_t>(n0) * conv_input_dim_;
    const float* gathered = out;
    if (count > 1) {
      float* buffer =
          Reserve(&ws.outputs, &ws.outputs_size, static_cast<size_t>(conv_output_dim_) * count);
      for (int i = 0; i < count; ++i) {
        CopyToSlot(out + static_cast<size_t>(i) * conv_output_dim_, conv_out_channels_, spatial, i,
                   count, buffer);
      }
      gathered = buffer;
    }
    // A single 1x1 image takes the product directly; otherwise it goes through col2im.
    const bool direct = is_1x1_ && count == 1;
    float* columns = direct ? in : Reserve(&ws.columns, &ws.columns_size, col_floats * count);
    const int n = count * spatial;
    for (int g = 0; g < group_; ++g) {
      math::Gemm(true, false, k, n, m, 1.0f, weights + static_cast<size_t>(g) * m * k,
                 gathered + static_cast<size_t>(g) * m * n, 0.0f,
                 columns + static_cast<size_t>(g) * k * n);
    }
    if (!direct) {
      float* scratch =
          count > 1 && !is_1x1_ ? Reserve(&ws.scratch, &ws.scratch_size, col_floats) : nullptr;
      ScatterColumns(columns, count, in, scratch);
    }
  }
}

void BaseConvolutionLayer::WeightGemm(const float* input, const float* output, float* weight_diff,
                                      int num) {
  const int m = conv_out_channels_ / group_;
  const int k = kernel_dim_;
  const int spatial = conv_out_spatial_dim_;
  const int chunk = ChunkSize(num);
  const size_t col_floats = static_cast<size_t>(k) * group_ * spatial;
  Workspace& ws = ThreadWorkspace();
  for (int n0 = 0; n0 < num; n0 += chunk) {
    const int count = std::min(chunk, num - n0);
    const float* in = input + static_cast<size_t>(n0) * conv_input_dim_;
    const float* out = output + static_cast<size_t>(n0) * conv_output_dim_;
    const float* columns = in;
    if (!(is_1x1_ && count == 1)) {
      float* buffer = Reserve(&ws.columns, &ws.columns_size, col_floats * count);
      float* scratch =
          count > 1 && !is_1x1_ ? Reserve(&ws.scratch, &ws.scratch_size, col_floats) : nullptr;
      BuildColumns(in, count, buffer, scratch);
      columns = buffer;
    }
    const float* gathered = out;
    if (count > 1) {
      float* buffer =
          Reserve(&ws.outputs, &ws.outputs_size, static_cast<size_t>(conv_output_dim_) * count);
      for (int i = 0; i < count; ++i) {
        CopyToSlot(out + static_cast<size_t>(i) * conv_output_dim_, conv_out_channels_, spatial, i,
                   count, buffer);
      }
      gathered = buffer;
    }
    // The images of the chunk are summed inside the GEMM (its inner dimension is count*spatial).
    const int n = count * spatial;
    for (int g = 0; g < group_; ++g) {
      math::Gemm(false, true, m, k, n, 1.0f, gathered + static_cast<size_t>(g) * m * n,
                 columns + static_cast<size_t>(g) * k * n, 1.0f,
                 weight_diff + static_cast<size_t>(g) * m * k);
    }
  }
}

void BaseConvolutionLayer::ForwardBias(const float* bias, float* top, int num) const {
  for (int n = 0; n < num; ++n) {
    for (int c = 0; c < num_output_; ++c) {
      float* row = top + (static_cast<size_t>(n) * num_output_ + c) * out_spatial_dim_;
      const float b = bias[c];
      for (int s = 0; s < out_spatial_dim_; ++s) row[s] += b;
    }
  }
}

void BaseConvolutionLayer::BackwardBias(const float* top_diff, float* bias_diff, int num) const {
  for (int n = 0; n < num; ++n) {
    for (int c = 0; c < num_output_; ++c) {
      const float* row = top_diff + (static_cast<size_t>(n) * num_output_ + c) * out_spatial_dim_;
      float sum = 0.0f;
      for (int s = 0; s < out_spatial_dim_; ++s) sum += row[s];
      bias_diff[c] += sum;
    }
  }
}

}  // namespace cortado
