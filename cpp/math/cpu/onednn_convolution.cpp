// SPDX-License-Identifier: Apache-2.0
// ConvolutionPlan on oneDNN. Primitives choose their own (blocked) memory formats; our plain
// NCHW buffers are reordered in and out, through scratch memory that every plan a thread runs
// shares (passes run one at a time), so a deep net holds one pass's copies, not every layer's.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "math/convolution.hpp"
#include "math/math.hpp"

#if CORTADO_WITH_ONEDNN
#include <dnnl.hpp>
#endif

namespace cortado::math {

bool ConvolutionShape::operator==(const ConvolutionShape& o) const {
  return num == o.num && channels == o.channels && height == o.height && width == o.width &&
         num_output == o.num_output && kernel_h == o.kernel_h && kernel_w == o.kernel_w &&
         pad_h == o.pad_h && pad_w == o.pad_w && stride_h == o.stride_h && stride_w == o.stride_w &&
         dilation_h == o.dilation_h && dilation_w == o.dilation_w && group == o.group &&
         bias == o.bias;
}

bool WinogradSuits(const ConvolutionShape& s) {
  if (s.kernel_h != 3 || s.kernel_w != 3 || s.stride_h != 1 || s.stride_w != 1 ||
      s.dilation_h != 1 || s.dilation_w != 1 || s.group != 1) {
    return false;
  }
  if (s.channels < 64 || s.num_output < 64) return false;
  const int64_t tiles =
      static_cast<int64_t>(s.num) * ((s.output_h() + 3) / 4) * ((s.output_w() + 3) / 4);
  return tiles >= 64;
}

namespace {

CpuConvAlgorithm AlgorithmFromEnvironment() {
  const char* env = std::getenv("CORTADO_CPU_CONV");
  if (env == nullptr || std::strcmp(env, "auto") == 0) return CpuConvAlgorithm::kAuto;
  if (std::strcmp(env, "direct") == 0) return CpuConvAlgorithm::kDirect;
  if (std::strcmp(env, "winograd") == 0) return CpuConvAlgorithm::kWinograd;
  CORTADO_THROW(kInvalidArgument, "CORTADO_CPU_CONV must be auto, direct or winograd, not '{}'",
                env);
}

// The environment's algorithm, read at the first use, until a test sets another.
std::atomic<CpuConvAlgorithm>& AlgorithmInUse() {
  static std::atomic<CpuConvAlgorithm> algorithm(AlgorithmFromEnvironment());
  return algorithm;
}

}  // namespace

CpuConvAlgorithm CpuConvolutionAlgorithm() { return AlgorithmInUse().load(); }

CpuConvAlgorithm SetCpuConvAlgorithm(CpuConvAlgorithm algorithm) {
  return AlgorithmInUse().exchange(algorithm);
}

#if CORTADO_WITH_ONEDNN
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Type = memory::data_type;

// The calling thread's scratch memory for reordered copies: at least `bytes`, 64-byte aligned,
// grown to the largest need and kept until the thread ends. Valid until the next call on the
// same thread.
void* ThreadScratch(size_t bytes) {
  struct Arena {
    void* data = nullptr;
    size_t size = 0;
    ~Arena() { std::free(data); }
  };
  thread_local Arena arena;
  if (bytes > arena.size) {
    const size_t size = (bytes + 63) / 64 * 64;
    void* grown = std::aligned_alloc(64, size);
    if (grown == nullptr) throw std::bad_alloc();
    std::free(arena.data);
    arena.data = grown;
    arena.size = size;
  }
  return arena.data;
}

// user += blocked, where `blocked` holds a [O, I, H, W] tensor in oneDNN's OIhw16i16o
// (ABcd16b16a: 16 x 16 tiles of output and input channels, 16 inputs of an output side by side)
// and O and I are multiples of 16: a convolution's weight gradient added to the layer's. oneDNN's
// reorder with a sum post-op does the same additions (the same bits) but writes the plain side
// a whole row of inputs apart: with 1x1 kernels it took 2.8 ms for ResNet-50's 2048 x 1024
// layer against 0.8 ms here (2 threads), where each output's row of 16 inputs is contiguous.
void AddFromTiles(const float* blocked, int outputs, int inputs, int spatial, float* user) {
  const int output_tiles = outputs / 16, input_tiles = inputs / 16;
#pragma omp parallel for collapse(2) schedule(static)
  for (int ot = 0; ot < output_tiles; ++ot) {
    for (int it = 0; it < input_tiles; ++it) {
      const float* tile = blocked + (static_cast<size_t>(ot) * input_tiles + it) * spatial * 256;
      for (int o = 0; o < 16; ++o) {
        float* row = user + (static_cast<size_t>(ot * 16 + o) * inputs + it * 16) * spatial;
        for (int i = 0; i < 16; ++i) {
          for (int p = 0; p < spatial; ++p) {
            row[i * spatial + p] += tile[static_cast<size_t>(p) * 256 + i * 16 + o];
          }
        }
      }
    }
  }
}

// A plain user buffer and, when the primitive wants another layout, a copy in that layout in
// scratch memory placed before each pass (Place).
class Operand {
 public:
  Operand() = default;
  Operand(const memory::desc& user, const memory::desc& wanted, const dnnl::engine& engine)
      : user_(user, engine, DNNL_MEMORY_NONE), engine_(engine) {
    if (wanted != user) {
      scratch_ = memory(wanted, engine, DNNL_MEMORY_NONE);
      scratch_bytes_ = (wanted.get_size() + 63) / 64 * 64;
      const memory::dims dims = user.dims();
      tiles_ = dims.size() == 4 && dims[0] % 16 == 0 && dims[1] % 16 == 0 &&
               user == memory::desc(dims, Type::f32, Tag::oihw) &&
               wanted == memory::desc(dims, Type::f32, Tag::OIhw16i16o);
      to_scratch_ = dnnl::reorder(user_, scratch_);
      from_scratch_ = dnnl::reorder(scratch_, user_);
      // The copy back that adds to the user's values (a sum post-op: user = user + copy, the
      // bits of an Axpy with 1), for gradients that accumulate; AddFromTiles adds tiles itself.
      if (!tiles_) {
        try {
          dnnl::post_ops sum;
          sum.append_sum(1.0f);
          dnnl::primitive_attr attr;
          attr.set_post_ops(sum);
          add_from_scratch_ = dnnl::reorder(scratch_, user_, attr);
        } catch (const dnnl::error&) {
          add_from_scratch_ = dnnl::reorder();  // not offered: the caller adds itself
        }
      }
    }
  }
  bool reordered() const { return static_cast<bool>(scratch_); }
  // Bytes of scratch memory the copy needs (0 without one), a multiple of 64.
  size_t scratch_bytes() const { return scratch_bytes_; }
  void set_scratch(void* data) {
    if (reordered()) scratch_.set_data_handle(data);
  }

  // Points the copies of one pass's operands at consecutive parts of the thread's scratch.
  static void Place(std::initializer_list<Operand*> operands) {
    size_t total = 0;
    for (const Operand* op : operands) total += op->scratch_bytes();
    if (total == 0) return;
    char* at = static_cast<char*>(ThreadScratch(total));
    for (Operand* op : operands) {
      op->set_scratch(at);
      at += op->scratch_bytes();
    }
  }

  // The memory the primitive reads, copying `data` in if needed.
  memory In(const float* data, dnnl::stream& stream) {
    user_.set_data_handle(const_cast<float*>(data));
    if (!reordered()) return user_;
    to_scratch_.execute(stream, user_, scratch_);
    return scratch_;
  }
  // The memory the primitive writes; call Out() after it ran to copy back.
  memory Target(float* data) {
    user_.set_data_handle(data);
    return reordered() ? scratch_ : user_;
  }
  void Out(dnnl::stream& stream) {
    if (reordered()) from_scratch_.execute(stream, scratch_, user_);
  }
  // Whether AddOut can add the copy to the user's buffer.
  bool adds() const { return tiles_ || static_cast<bool>(add_from_scratch_); }
  // Adds the primitive's output (written to Target's memory) to the user's values; waits for
  // the stream's work.
  void AddOut(dnnl::stream& stream) {
    if (tiles_) {
      stream.wait();
      const memory::dims dims = user_.get_desc().dims();
      AddFromTiles(static_cast<const float*>(scratch_.get_data_handle()), static_cast<int>(dims[0]),
                   static_cast<int>(dims[1]), static_cast<int>(dims[2] * dims[3]),
                   static_cast<float*>(user_.get_data_handle()));
      return;
    }
    add_from_scratch_.execute(stream, scratch_, user_);
    stream.wait();
  }

 private:
  memory user_;
  memory scratch_;
  size_t scratch_bytes_ = 0;
  dnnl::reorder to_scratch_;
  dnnl::reorder from_scratch_;
  dnnl::reorder add_from_scratch_;
  dnnl::engine engine_;
  bool tiles_ = false;  // AddOut through AddFromTiles
};

// A tensor's layout as a oneDNN format: NCHW or nChw{block}c.
Tag UserTag(int block) {
  switch (block) {
    case 0:
      return Tag::nchw;
    case 8:
      return Tag::nChw8c;
    case 16:
      return Tag::nChw16c;
    default:
      CORTADO_THROW(kInternal, "a channel block of {}", block);
  }
}

class OneDnnConvolution final : public ConvolutionPlan {
 public:
  OneDnnConvolution(const ConvolutionShape& s, CpuBlocks blocks)
      : shape_(s), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    const memory::dim oh = s.output_h(), ow = s.output_w();
    const memory::dims src_dims = {s.num, s.channels, s.height, s.width};
    const memory::dims dst_dims = {s.num, s.num_output, oh, ow};
    const memory::dims bias_dims = {s.num_output};
    memory::dims weight_dims;
    Tag weight_tag;
    if (s.group > 1) {
      weight_dims = {s.group, s.num_output / s.group, s.channels / s.group, s.kernel_h, s.kernel_w};
      weight_tag = Tag::goihw;
    } else {
      weight_dims = {s.num_output, s.channels, s.kernel_h, s.kernel_w};
      weight_tag = Tag::oihw;
    }
    const memory::dims strides = {s.stride_h, s.stride_w};
    const memory::dims dilates = {s.dilation_h - 1, s.dilation_w - 1};  // oneDNN counts from 0
    const memory::dims pad_l = {s.pad_h, s.pad_w};
    // Caffe's floor may leave input rows unused; the right padding absorbs the difference.
    const memory::dims pad_r = {
        (oh - 1) * s.stride_h + (s.kernel_h - 1) * s.dilation_h + 1 - s.height - s.pad_h,
        (ow - 1) * s.stride_w + (s.kernel_w - 1) * s.dilation_w + 1 - s.width - s.pad_w};

    const memory::desc src_any(src_dims, Type::f32, Tag::any);
    const memory::desc dst_any(dst_dims, Type::f32, Tag::any);
    const memory::desc weight_any(weight_dims, Type::f32, Tag::any);
    const memory::desc bias_md(bias_dims, Type::f32, Tag::x);
    const memory::desc no_bias;

    // The three passes' descriptions for one algorithm; dnnl::error when oneDNN has none.
    auto describe = [&](dnnl::algorithm algorithm) {
      dnnl::convolution_forward::desc fwd_desc(dnnl::prop_kind::forward_training, algorithm,
                                               src_any, weight_any, s.bias ? bias_md : no_bias,
                                               dst_any, strides, dilates, pad_l, pad_r);
      fwd_pd_ = dnnl::convolution_forward::primitive_desc(fwd_desc, engine_);
      dnnl::convolution_backward_data::desc bwd_data_desc(algorithm, src_any, weight_any, dst_any,
                                                          strides, dilates, pad_l, pad_r);
      bwd_data_pd_ =
          dnnl::convolution_backward_data::primitive_desc(bwd_data_desc, engine_, fwd_pd_);
      dnnl::convolution_backward_weights::desc bwd_weights_desc(algorithm, src_any, weight_any,
                                                                s.bias ? bias_md : no_bias, dst_any,
                                                                strides, dilates, pad_l, pad_r);
      bwd_weights_pd_ =
          dnnl::convolution_backward_weights::primitive_desc(bwd_weights_desc, engine_, fwd_pd_);
    };
    const CpuConvAlgorithm choice = CpuConvolutionAlgorithm();
    bool described = false;
    if (choice == CpuConvAlgorithm::kWinograd ||
        (choice == CpuConvAlgorithm::kAuto && WinogradSuits(s))) {
      try {
        describe(dnnl::algorithm::convolution_winograd);
        described = true;
      } catch (const dnnl::error&) {
        // not offered for this shape or CPU (Winograd is AVX-512's alone): the direct algorithm
      }
    }
    if (!described) describe(dnnl::algorithm::convolution_direct);
    forward_ = dnnl::convolution_forward(fwd_pd_);
    backward_data_ = dnnl::convolution_backward_data(bwd_data_pd_);
    backward_weights_ = dnnl::convolution_backward_weights(bwd_weights_pd_);

    const memory::desc src_user(src_dims, Type::f32, UserTag(blocks.src));
    const memory::desc dst_user(dst_dims, Type::f32, UserTag(blocks.dst));
    const memory::desc weight_user(weight_dims, Type::f32, weight_tag);
    fwd_src_ = Operand(src_user, fwd_pd_.src_desc(), engine_);
    fwd_weights_ = Operand(weight_user, fwd_pd_.weights_desc(), engine_);
    fwd_dst_ = Operand(dst_user, fwd_pd_.dst_desc(), engine_);
    bias_ = memory(bias_md, engine_, DNNL_MEMORY_NONE);
    bd_diff_dst_ = Operand(dst_user, bwd_data_pd_.diff_dst_desc(), engine_);
    bd_weights_ = Operand(weight_user, bwd_data_pd_.weights_desc(), engine_);
    bd_diff_src_ = Operand(src_user, bwd_data_pd_.diff_src_desc(), engine_);
    bw_src_ = Operand(src_user, bwd_weights_pd_.src_desc(), engine_);
    bw_diff_dst_ = Operand(dst_user, bwd_weights_pd_.diff_dst_desc(), engine_);
    bw_diff_weights_ = Operand(weight_user, bwd_weights_pd_.diff_weights_desc(), engine_);
    weight_count_ = static_cast<int>(weight_user.get_size() / sizeof(float));
    weight_grad_.resize(weight_count_);
    bias_grad_.resize(s.num_output);
    diff_bias_ = memory(bias_md, engine_, bias_grad_.data());
  }

  void Forward(const float* src, const float* weights, const float* bias, float* dst) override {
    Operand::Place({&fwd_src_, &fwd_weights_, &fwd_dst_});
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, fwd_src_.In(src, stream_)},
                                            {DNNL_ARG_WEIGHTS, fwd_weights_.In(weights, stream_)},
                                            {DNNL_ARG_DST, fwd_dst_.Target(dst)}};
    if (shape_.bias) {
      bias_.set_data_handle(const_cast<float*>(bias));
      args[DNNL_ARG_BIAS] = bias_;
    }
    forward_.execute(stream_, args);
    fwd_dst_.Out(stream_);
    stream_.wait();
  }

  void BackwardData(const float* diff_dst, const float* weights, float* diff_src) override {
    Operand::Place({&bd_diff_dst_, &bd_weights_, &bd_diff_src_});
    backward_data_.execute(stream_, {{DNNL_ARG_DIFF_DST, bd_diff_dst_.In(diff_dst, stream_)},
                                     {DNNL_ARG_WEIGHTS, bd_weights_.In(weights, stream_)},
                                     {DNNL_ARG_DIFF_SRC, bd_diff_src_.Target(diff_src)}});
    bd_diff_src_.Out(stream_);
    stream_.wait();
  }

  void BackwardWeights(const float* src, const float* diff_dst, float* diff_weights,
                       float* diff_bias) override {
    // oneDNN overwrites its outputs; layers accumulate (WeightGradTarget, AddWeightGrad).
    Operand::Place({&bw_src_, &bw_diff_dst_, &bw_diff_weights_});
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, bw_src_.In(src, stream_)},
        {DNNL_ARG_DIFF_DST, bw_diff_dst_.In(diff_dst, stream_)},
        {DNNL_ARG_DIFF_WEIGHTS, WeightGradTarget(diff_weights)}};
    if (shape_.bias) args[DNNL_ARG_DIFF_BIAS] = diff_bias_;
    backward_weights_.execute(stream_, args);
    AddWeightGrad(diff_weights, diff_bias);
  }

  void Backward(const float* src, const float* diff_dst, const float* weights, float* diff_weights,
                float* diff_bias, float* diff_src) override {
    if (diff_weights == nullptr || diff_src == nullptr ||
        bwd_weights_pd_.diff_dst_desc() != bwd_data_pd_.diff_dst_desc()) {
      ConvolutionPlan::Backward(src, diff_dst, weights, diff_weights, diff_bias, diff_src);
      return;
    }
    // One copy of diff_dst in the primitives' layout serves both passes.
    Operand::Place({&bw_src_, &bw_diff_dst_, &bw_diff_weights_, &bd_weights_, &bd_diff_src_});
    const memory blocked_diff_dst = bw_diff_dst_.In(diff_dst, stream_);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, bw_src_.In(src, stream_)},
        {DNNL_ARG_DIFF_DST, blocked_diff_dst},
        {DNNL_ARG_DIFF_WEIGHTS, WeightGradTarget(diff_weights)}};
    if (shape_.bias) args[DNNL_ARG_DIFF_BIAS] = diff_bias_;
    backward_weights_.execute(stream_, args);
    backward_data_.execute(stream_, {{DNNL_ARG_DIFF_DST, blocked_diff_dst},
                                     {DNNL_ARG_WEIGHTS, bd_weights_.In(weights, stream_)},
                                     {DNNL_ARG_DIFF_SRC, bd_diff_src_.Target(diff_src)}});
    bd_diff_src_.Out(stream_);
    AddWeightGrad(diff_weights, diff_bias);
  }

  // oneDNN overwrites its outputs; layers accumulate. The weights' gradient goes to the
  // primitive's layout in scratch and is added to `diff_weights` as it is reordered back (the
  // common case), else to weight_grad_ and added after.
  memory WeightGradTarget(float* diff_weights) {
    return bw_diff_weights_.adds() ? bw_diff_weights_.Target(diff_weights)
                                   : bw_diff_weights_.Target(weight_grad_.data());
  }
  // Runs the stream's work and adds the gradients computed to the layer's.
  void AddWeightGrad(float* diff_weights, float* diff_bias) {
    if (bw_diff_weights_.adds()) {
      bw_diff_weights_.AddOut(stream_);
    } else {
      bw_diff_weights_.Out(stream_);
      stream_.wait();
    }
    if (!bw_diff_weights_.adds()) Axpy(weight_count_, 1.0f, weight_grad_.data(), diff_weights);
    if (shape_.bias && diff_bias != nullptr) {
      Axpy(shape_.num_output, 1.0f, bias_grad_.data(), diff_bias);
    }
  }

  std::string Name() const override { return std::string("oneDNN ") + fwd_pd_.impl_info_str(); }

 private:
  ConvolutionShape shape_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::convolution_forward::primitive_desc fwd_pd_;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd_;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd_;
  dnnl::convolution_forward forward_;
  dnnl::convolution_backward_data backward_data_;
  dnnl::convolution_backward_weights backward_weights_;
  Operand fwd_src_, fwd_weights_, fwd_dst_;
  Operand bd_diff_dst_, bd_weights_, bd_diff_src_;
  Operand bw_src_, bw_diff_dst_, bw_diff_weights_;
  memory bias_;
  memory diff_bias_;
  int weight_count_ = 0;
  std::vector<float> weight_grad_;
  std::vector<float> bias_grad_;
};

}  // namespace

std::unique_ptr<ConvolutionPlan> MakeFastConvolution(const ConvolutionShape& shape,
                                                     CpuBlocks blocks) {
  if (shape.output_h() <= 0 || shape.output_w() <= 0) return nullptr;
  try {
    return std::make_unique<OneDnnConvolution>(shape, blocks);
  } catch (const dnnl::error&) {
    return nullptr;  // a shape oneDNN does not take: the caller falls back to im2col
  }
}

int CpuChannelBlock() {
  static const int block = [] {
    try {
      // What a 3x3 convolution of 64 channels chooses for its source (ResNet's and MobileNet's
      // middle layers).
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const memory::dims src = {8, 64, 28, 28};
      const memory::desc any(src, Type::f32, Tag::any);
      const memory::desc weights({64, 64, 3, 3}, Type::f32, Tag::any);
      const dnnl::convolution_forward::desc desc(
          dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, any, weights,
          memory::desc(), any, {1, 1}, {0, 0}, {1, 1}, {1, 1});
      const dnnl::convolution_forward::primitive_desc pd(desc, engine);
      for (int b : {16, 8}) {
        if (pd.src_desc() == memory::desc(src, Type::f32, UserTag(b))) return b;
      }
    } catch (const dnnl::error&) {
    }
    return 0;
  }();
  return block;
}

#else

std::unique_ptr<ConvolutionPlan> MakeFastConvolution(const ConvolutionShape&, CpuBlocks) {
  return nullptr;
}

int CpuChannelBlock() { return 0; }

#endif

}  // namespace cortado::math
