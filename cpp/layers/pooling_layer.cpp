// SPDX-License-Identifier: Apache-2.0
#include "layers/pooling_layer.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "math/lane_sum.hpp"
#include "math/math.hpp"

// Forward splits the planes (image x channel; image x channel block in blocks) across the
// OpenMP threads. Backward stays serial in NCHW, and in blocks below a million values: its work
// is short (LeNet's two layers: 0.05-0.1 ms), and a parallel region waits for the second thread,
// which, beside other work on the cores, may not run for a while. Measured on LeNet, 2 threads
// beside 2 busy loops, in turn: in 6 pairs of 9 the parallel passes took 20.4-23.1 ms per
// iteration against 15.5-20.3 serial, the other 3 within 0.8 ms of each other (alone, parallel
// was 0.1-0.8 ms faster); bench/history/cpu-shared-cores.md.
namespace cortado {

void PoolingLayer::ThrowIfStochastic() const {
  if (pool_ == caffe::PoolingParameter::STOCHASTIC) {
    CORTADO_THROW(kUnimplemented,
                  "{}: STOCHASTIC pooling has no CPU implementation (Caffe has none either); "
                  "use MAX or AVE",
                  Describe());
  }
}

void PoolingLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.pooling_param();
  const std::string me = Describe();
  pool_ = p.pool();
  if (ctx_->device().is_cpu()) ThrowIfStochastic();
  global_ = p.global_pooling();
  const bool has_hw_kernel = p.has_kernel_h() || p.has_kernel_w();
  if (global_) {
    if (p.has_kernel_size() || has_hw_kernel) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: with global_pooling the kernel is the whole input; do not give a kernel "
                    "size",
                    me);
    }
  } else {
    if (p.has_kernel_size() && has_hw_kernel) {
      CORTADO_THROW(kInvalidArgument, "{}: give kernel_size or kernel_h and kernel_w, not both",
                    me);
    }
    if (!p.has_kernel_size() && !(p.has_kernel_h() && p.has_kernel_w())) {
      CORTADO_THROW(kInvalidArgument, "{}: needs kernel_size, or both kernel_h and kernel_w", me);
    }
  }
  if (p.has_pad_h() || p.has_pad_w()) {
    if (p.has_pad() || !(p.has_pad_h() && p.has_pad_w())) {
      CORTADO_THROW(kInvalidArgument, "{}: give pad, or both pad_h and pad_w", me);
    }
  }
  if (p.has_stride_h() || p.has_stride_w()) {
    if (p.has_stride() || !(p.has_stride_h() && p.has_stride_w())) {
      CORTADO_THROW(kInvalidArgument, "{}: give stride, or both stride_h and stride_w", me);
    }
  }
  if (!global_) {
    kernel_h_ = static_cast<int>(p.has_kernel_size() ? p.kernel_size() : p.kernel_h());
    kernel_w_ = static_cast<int>(p.has_kernel_size() ? p.kernel_size() : p.kernel_w());
    if (kernel_h_ <= 0 || kernel_w_ <= 0) {
      CORTADO_THROW(kInvalidArgument, "{}: kernel must be positive, got {}x{}", me, kernel_h_,
                    kernel_w_);
    }
  }
  pad_h_ = static_cast<int>(p.has_pad_h() ? p.pad_h() : p.pad());
  pad_w_ = static_cast<int>(p.has_pad_h() ? p.pad_w() : p.pad());
  stride_h_ = static_cast<int>(p.has_stride_h() ? p.stride_h() : p.stride());
  stride_w_ = static_cast<int>(p.has_stride_h() ? p.stride_w() : p.stride());
  if (stride_h_ <= 0 || stride_w_ <= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: stride must be positive, got {}x{}", me, stride_h_,
                  stride_w_);
  }
  if (global_ && (pad_h_ != 0 || pad_w_ != 0 || stride_h_ != 1 || stride_w_ != 1)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: global_pooling allows only pad 0 and stride 1, got pad {}x{} stride {}x{}",
                  me, pad_h_, pad_w_, stride_h_, stride_w_);
  }
  if (!global_ && (pad_h_ != 0 || pad_w_ != 0)) {
    if (pool_ != caffe::PoolingParameter::MAX && pool_ != caffe::PoolingParameter::AVE) {
      CORTADO_THROW(kInvalidArgument, "{}: padding is implemented only for MAX and AVE pooling",
                    me);
    }
    if (pad_h_ >= kernel_h_ || pad_w_ >= kernel_w_) {
      CORTADO_THROW(kInvalidArgument, "{}: pad {}x{} must be smaller than the kernel {}x{}", me,
                    pad_h_, pad_w_, kernel_h_, kernel_w_);
    }
  }
  (void)bottom;
}

void PoolingLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (in.num_axes() != 4) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bottom must have 4 axes (num, channels, height, width), got shape {}",
                  Describe(), in.ShapeString());
  }
  channels_ = in.shape(1);
  height_ = in.shape(2);
  width_ = in.shape(3);
  if (global_) {
    kernel_h_ = height_;
    kernel_w_ = width_;
  }
  if (height_ + 2 * pad_h_ < kernel_h_ || width_ + 2 * pad_w_ < kernel_w_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: kernel {}x{} is larger than the padded input (bottom shape {}, pad {}x{})",
                  Describe(), kernel_h_, kernel_w_, in.ShapeString(), pad_h_, pad_w_);
  }
  const bool ceil_mode = param_.pooling_param().round_mode() == caffe::PoolingParameter::CEIL;
  auto pooled = [ceil_mode](int size, int pad, int kernel, int stride) {
    const int span = size + 2 * pad - kernel;  // >= 0, checked above
    return (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  };
  pooled_h_ = pooled(height_, pad_h_, kernel_h_, stride_h_);
  pooled_w_ = pooled(width_, pad_w_, kernel_w_, stride_w_);
  if (pad_h_ != 0 || pad_w_ != 0) {
    // Caffe's rule: the last window must start inside the image or its leading padding;
    // one that would start in the trailing padding is dropped.
    if ((pooled_h_ - 1) * stride_h_ >= height_ + pad_h_) --pooled_h_;
    if ((pooled_w_ - 1) * stride_w_ >= width_ + pad_w_) --pooled_w_;
  }
  top[0]->Reshape(in.shape(0), channels_, pooled_h_, pooled_w_);
  if (top.size() > 1) top[1]->ReshapeLike(*top[0]);
  if (pool_ == caffe::PoolingParameter::MAX && top.size() == 1) {
    // Room for channel blocks of up to 16 with a padded last one (PassBlocks).
    const size_t padded_channels = (channels_ + 15) / 16 * 16;
    max_idx_.resize(static_cast<size_t>(in.shape(0)) * padded_channels * pooled_h_ * pooled_w_);
  }
}

void PoolingLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  ThrowIfStochastic();
  if (bottom[0]->cpu_block() != 0 || top[0]->cpu_block() != 0) {
    PassBlocks(/*forward=*/true, bottom[0], top[0]);
    return;
  }
  const float* bottom_data = bottom[0]->cpu_data();
  float* top_data = top[0]->mutable_cpu_data();
  const int planes = bottom[0]->shape(0) * channels_;
  const int in_plane = height_ * width_;
  const int out_plane = pooled_h_ * pooled_w_;
  if (pool_ == caffe::PoolingParameter::MAX) {
    float* top_mask = top.size() > 1 ? top[1]->mutable_cpu_data() : nullptr;
    int* mask = top_mask ? nullptr : max_idx_.data();
    // A row of outputs at a time, each window's values visited in Caffe's order (rows, then
    // columns) with the first maximum winning on ties (strict >), as selects rather than
    // branches: a maximum among random values is a branch mispredicted about every other time.
#pragma omp parallel
    {
      std::vector<float> best(pooled_w_);
      std::vector<int> best_index(pooled_w_);
#pragma omp for schedule(static)
      for (int plane = 0; plane < planes; ++plane) {
        const float* src = bottom_data + static_cast<size_t>(plane) * in_plane;
        const size_t out_offset = static_cast<size_t>(plane) * out_plane;
        for (int ph = 0; ph < pooled_h_; ++ph) {
          const int hstart = std::max(ph * stride_h_ - pad_h_, 0);
          const int hend = std::min(ph * stride_h_ - pad_h_ + kernel_h_, height_);
          std::fill(best.begin(), best.end(), -FLT_MAX);
          std::fill(best_index.begin(), best_index.end(), -1);
          for (int h = hstart; h < hend; ++h) {
            const float* row = src + h * width_;
            for (int kw = 0; kw < kernel_w_; ++kw) {
              // Columns whose window has this kw inside the row: [first, last).
              const int offset = kw - pad_w_;
              const int first = offset >= 0 ? 0 : (-offset + stride_w_ - 1) / stride_w_;
              const int last = std::min(pooled_w_, (width_ - 1 - offset) / stride_w_ + 1);
              const int stride = stride_w_;
              float* b = best.data();
              int* bi = best_index.data();
              for (int pw = first; pw < last; ++pw) {
                const int w = pw * stride + offset;
                const float v = row[w];
                const bool larger = v > b[pw];
                b[pw] = larger ? v : b[pw];
                bi[pw] = larger ? h * width_ + w : bi[pw];
              }
            }
          }
          const size_t out = out_offset + static_cast<size_t>(ph) * pooled_w_;
          for (int pw = 0; pw < pooled_w_; ++pw) {
            top_data[out + pw] = best_index[pw] < 0 ? 0.0f : best[pw];
            if (top_mask) {
              top_mask[out + pw] = static_cast<float>(best_index[pw]);
            } else {
              mask[out + pw] = best_index[pw];
            }
          }
        }
      }
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int plane = 0; plane < planes; ++plane) {
      const float* src = bottom_data + static_cast<size_t>(plane) * in_plane;
      float* dst = top_data + static_cast<size_t>(plane) * out_plane;
      for (int ph = 0; ph < pooled_h_; ++ph) {
        int hstart = ph * stride_h_ - pad_h_;
        int hend = std::min(hstart + kernel_h_, height_ + pad_h_);
        const int window_h = hend - hstart;
        hstart = std::max(hstart, 0);
        hend = std::min(hend, height_);
        for (int pw = 0; pw < pooled_w_; ++pw) {
          int wstart = pw * stride_w_ - pad_w_;
          int wend = std::min(wstart + kernel_w_, width_ + pad_w_);
          // The divisor counts padding inside [-pad, size + pad) (Caffe's rule).
          const int pool_size = window_h * (wend - wstart);
          wstart = std::max(wstart, 0);
          wend = std::min(wend, width_);
          float sum = 0.0f;
          for (int h = hstart; h < hend; ++h) {
            for (int w = wstart; w < wend; ++w) sum += src[h * width_ + w];
          }
          dst[ph * pooled_w_ + pw] = pool_size > 0 ? sum / pool_size : 0.0f;
        }
      }
    }
  }
}

void PoolingLayer::BackwardCpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  ThrowIfStochastic();
  if (!propagate_down[0]) return;
  if (bottom[0]->cpu_block() != 0 || top[0]->cpu_block() != 0) {
    PassBlocks(/*forward=*/false, bottom[0], top[0]);
    return;
  }
  const float* top_diff = top[0]->cpu_diff();
  float* bottom_diff = bottom[0]->mutable_cpu_diff();
  const int planes = bottom[0]->shape(0) * channels_;
  const int in_plane = height_ * width_;
  const int out_plane = pooled_h_ * pooled_w_;
  if (pool_ == caffe::PoolingParameter::MAX) {
    const float* top_mask = top.size() > 1 ? top[1]->cpu_data() : nullptr;
    const int* mask = top_mask ? nullptr : max_idx_.data();
    for (int plane = 0; plane < planes; ++plane) {
      float* dst = bottom_diff + static_cast<size_t>(plane) * in_plane;
      std::fill(dst, dst + in_plane, 0.0f);
      const size_t out_offset = static_cast<size_t>(plane) * out_plane;
      for (int i = 0; i < out_plane; ++i) {
        const size_t out = out_offset + i;
        const int index = top_mask ? static_cast<int>(top_mask[out]) : mask[out];
        if (index >= 0) dst[index] += top_diff[out];
      }
    }
  } else {
    for (int plane = 0; plane < planes; ++plane) {
      float* dst = bottom_diff + static_cast<size_t>(plane) * in_plane;
      const float* src = top_diff + static_cast<size_t>(plane) * out_plane;
      std::fill(dst, dst + in_plane, 0.0f);
      for (int ph = 0; ph < pooled_h_; ++ph) {
        int hstart = ph * stride_h_ - pad_h_;
        int hend = std::min(hstart + kernel_h_, height_ + pad_h_);
        const int window_h = hend - hstart;
        hstart = std::max(hstart, 0);
        hend = std::min(hend, height_);
        for (int pw = 0; pw < pooled_w_; ++pw) {
          int wstart = pw * stride_w_ - pad_w_;
          int wend = std::min(wstart + kernel_w_, width_ + pad_w_);
          const int pool_size = window_h * (wend - wstart);
          wstart = std::max(wstart, 0);
          wend = std::min(wend, width_);
          if (pool_size <= 0) continue;
          const float g = src[ph * pooled_w_ + pw] / pool_size;
          for (int h = hstart; h < hend; ++h) {
            for (int w = wstart; w < wend; ++w) dst[h * width_ + w] += g;
          }
        }
      }
    }
  }
}

// ---- the same with channel blocks on either side ---------------------------------------------
// Groups of L channels (the block) at a time, one vector lane per channel: each window's values
// are visited in the NCHW passes' order (rows, then columns; outputs in order for the gradients'
// sums), so either layout gives the same bits. MAX keeps its argmax per output in max_idx_ in
// the blocked order ([n][group][ph][pw][lane]), as the index h * W + w. Each side's layout is a
// template argument, so that a blocked side's lanes are contiguous to the compiler.

namespace {

struct PoolGeometry {
  bool max;
  int height, width, pooled_h, pooled_w;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

// Position p's lane l of a group: contiguous lanes in blocks, a plane apart in NCHW.
template <int L, bool kBlocked>
CORTADO_ALWAYS_INLINE inline size_t At(int p, int l, int plane) {
  return kBlocked ? static_cast<size_t>(p) * L + l : static_cast<size_t>(l) * plane + p;
}

// A group's L lanes as one vector (GCC's vector extensions: the compiler's own vectors on every
// target the passes are built for, element for element the same arithmetic as scalars).
template <int L>
struct Lanes {
  typedef float Floats __attribute__((vector_size(L * sizeof(float))));
  typedef int Ints __attribute__((vector_size(L * sizeof(int))));
};

template <int L, bool kBlocked, typename V>
CORTADO_ALWAYS_INLINE inline void LoadLanes(const float* group, int p, int plane, V* v) {
  if constexpr (kBlocked) {
    std::memcpy(v, group + static_cast<size_t>(p) * L, sizeof(V));
  } else {
    for (int l = 0; l < L; ++l) (*v)[l] = group[static_cast<size_t>(l) * plane + p];
  }
}

template <int L, bool kBlocked, typename V>
CORTADO_ALWAYS_INLINE inline void StoreLanes(const V& v, int p, int plane, float* group) {
  if constexpr (kBlocked) {
    std::memcpy(group + static_cast<size_t>(p) * L, &v, sizeof(V));
  } else {
    for (int l = 0; l < L; ++l) group[static_cast<size_t>(l) * plane + p] = v[l];
  }
}

template <int L, bool kIn, bool kOut>
CORTADO_CPU_CLONES void ForwardGroup(const PoolGeometry& g, const float* src, float* dst,
                                     int* mask) {
  using Floats = typename Lanes<L>::Floats;
  using Ints = typename Lanes<L>::Ints;
  const int in_plane = g.height * g.width, out_plane = g.pooled_h * g.pooled_w;
  for (int ph = 0; ph < g.pooled_h; ++ph) {
    for (int pw = 0; pw < g.pooled_w; ++pw) {
      const int o = ph * g.pooled_w + pw;
      int hstart = ph * g.stride_h - g.pad_h, wstart = pw * g.stride_w - g.pad_w;
      if (g.max) {
        const int hend = std::min(hstart + g.kernel_h, g.height);
        const int wend = std::min(wstart + g.kernel_w, g.width);
        hstart = std::max(hstart, 0);
        wstart = std::max(wstart, 0);
        Floats acc = Floats{} - FLT_MAX;
        Ints best = Ints{} - 1;
        for (int h = hstart; h < hend; ++h) {
          for (int x = wstart; x < wend; ++x) {
            const int p = h * g.width + x;
            Floats value;
            LoadLanes<L, kIn>(src, p, in_plane, &value);
            const Ints larger = value > acc;  // the first maximum wins, as in NCHW
            acc = larger ? value : acc;
            best = larger ? Ints{} + p : best;
          }
        }
        const Floats out = best < 0 ? Floats{} : acc;
        StoreLanes<L, kOut>(out, o, out_plane, dst);
        std::memcpy(mask + static_cast<size_t>(o) * L, &best, sizeof(best));
        continue;
      }
      int hend = std::min(hstart + g.kernel_h, g.height + g.pad_h);
      int wend = std::min(wstart + g.kernel_w, g.width + g.pad_w);
      const int pool_size = (hend - hstart) * (wend - wstart);
      hstart = std::max(hstart, 0);
      wstart = std::max(wstart, 0);
      hend = std::min(hend, g.height);
      wend = std::min(wend, g.width);
      Floats acc = {};
      for (int h = hstart; h < hend; ++h) {
        for (int x = wstart; x < wend; ++x) {
          Floats value;
          LoadLanes<L, kIn>(src, h * g.width + x, in_plane, &value);
          acc += value;
        }
      }
      const Floats out = pool_size > 0 ? acc / static_cast<float>(pool_size) : Floats{};
      StoreLanes<L, kOut>(out, o, out_plane, dst);
    }
  }
}

template <int L, bool kIn, bool kOut>
CORTADO_CPU_CLONES void BackwardGroup(const PoolGeometry& g, const float* top_diff,
                                      float* bottom_diff, const int* mask) {
  using Floats = typename Lanes<L>::Floats;
  const int in_plane = g.height * g.width, out_plane = g.pooled_h * g.pooled_w;
  for (int p = 0; p < in_plane; ++p) StoreLanes<L, kIn>(Floats{}, p, in_plane, bottom_diff);
  if (g.max) {
    for (int o = 0; o < out_plane; ++o) {
      for (int l = 0; l < L; ++l) {
        const int index = mask[o * L + l];
        if (index >= 0) {
          bottom_diff[At<L, kIn>(index, l, in_plane)] += top_diff[At<L, kOut>(o, l, out_plane)];
        }
      }
    }
    return;
  }
  for (int ph = 0; ph < g.pooled_h; ++ph) {
    int hstart = ph * g.stride_h - g.pad_h;
    int hend = std::min(hstart + g.kernel_h, g.height + g.pad_h);
    const int window_h = hend - hstart;
    hstart = std::max(hstart, 0);
    hend = std::min(hend, g.height);
    for (int pw = 0; pw < g.pooled_w; ++pw) {
      int wstart = pw * g.stride_w - g.pad_w;
      int wend = std::min(wstart + g.kernel_w, g.width + g.pad_w);
      const int pool_size = window_h * (wend - wstart);
      wstart = std::max(wstart, 0);
      wend = std::min(wend, g.width);
      if (pool_size <= 0) continue;
      Floats grad;
      LoadLanes<L, kOut>(top_diff, ph * g.pooled_w + pw, out_plane, &grad);
      grad /= static_cast<float>(pool_size);
      for (int h = hstart; h < hend; ++h) {
        for (int x = wstart; x < wend; ++x) {
          const int p = h * g.width + x;
          Floats d;
          LoadLanes<L, kIn>(bottom_diff, p, in_plane, &d);
          d += grad;
          StoreLanes<L, kIn>(d, p, in_plane, bottom_diff);
        }
      }
    }
  }
}

// Calls f(L, kIn, kOut) (std::integral_constant values) for the layouts of a bottom and a top,
// at least one of them in blocks of L.
template <typename F>
void WithLayouts(int in_block, int out_block, F f) {
  auto sides = [&](auto lanes) {
    if (in_block != 0 && out_block != 0) {
      f(lanes, std::true_type(), std::true_type());
    } else if (in_block != 0) {
      f(lanes, std::true_type(), std::false_type());
    } else {
      f(lanes, std::false_type(), std::true_type());
    }
  };
  if ((in_block != 0 ? in_block : out_block) == 8) {
    sides(std::integral_constant<int, 8>());
  } else {
    sides(std::integral_constant<int, 16>());
  }
}

}  // namespace

// Values of the bottom from which the blocked backward pass runs on the OpenMP threads.
constexpr size_t kParallelBackward = size_t{1} << 20;

namespace {

// A padded last block's lanes between an NCHW side and an L-lane block (zeros beyond `lanes`).
void GatherLanes(const float* plain, int lanes, int plane, int L, float* block) {
  for (int p = 0; p < plane; ++p) {
    for (int l = 0; l < L; ++l) block[p * L + l] = l < lanes ? plain[l * plane + p] : 0.0f;
  }
}
void ScatterLanes(const float* block, int lanes, int plane, int L, float* plain) {
  for (int l = 0; l < lanes; ++l) {
    for (int p = 0; p < plane; ++p) plain[l * plane + p] = block[p * L + l];
  }
}

}  // namespace

void PoolingLayer::PassBlocks(bool forward, Tensor* bottom, Tensor* top) {
  const int lanes = bottom->cpu_block() != 0 ? bottom->cpu_block() : top->cpu_block();
  CORTADO_CHECK(lanes == 8 || lanes == 16, "{}: channel blocks of {}", Describe(), lanes);
  const PoolGeometry g{pool_ == caffe::PoolingParameter::MAX,
                       height_,
                       width_,
                       pooled_h_,
                       pooled_w_,
                       kernel_h_,
                       kernel_w_,
                       stride_h_,
                       stride_w_,
                       pad_h_,
                       pad_w_};
  int* mask = g.max ? max_idx_.data() : nullptr;
  // Channels that are not a multiple of the block end in a padded block (Tensor::set_cpu_block):
  // its extra lanes are zeros on a blocked side and absent on an NCHW one, where that block goes
  // through an L-lane copy.
  const int blocks = (channels_ + lanes - 1) / lanes, tail = channels_ % lanes;
  const int groups = bottom->shape(0) * blocks;
  const int in_plane = height_ * width_, out_plane = pooled_h_ * pooled_w_;
  WithLayouts(bottom->cpu_block(), top->cpu_block(), [&](auto width, auto in, auto out) {
    constexpr int L = decltype(width)::value;
    constexpr bool kIn = decltype(in)::value, kOut = decltype(out)::value;
    // A group's first value on each side.
    auto at = [&](int i, bool blocked, int plane) {
      return blocked ? static_cast<size_t>(i) * L * plane
                     : (static_cast<size_t>(i / blocks) * channels_ + i % blocks * L) * plane;
    };
    // One group's pass, reading `from` (a side of `from_plane` positions) and writing `to`:
    // `pass` on the sides as they are, or, for a padded last block with an NCHW side,
    // `blocked_pass` (the pass with both sides blocked) on L-lane copies of the NCHW sides.
    auto group = [&](int i, const float* from, bool from_blocked, int from_plane, float* to,
                     bool to_blocked, int to_plane, auto pass, auto blocked_pass) {
      if (tail == 0 || (from_blocked && to_blocked) || i % blocks != blocks - 1) {
        pass(from, to);
        return;
      }
      std::vector<float> from_lanes(from_blocked ? 0 : static_cast<size_t>(L) * from_plane);
      std::vector<float> to_lanes(to_blocked ? 0 : static_cast<size_t>(L) * to_plane);
      if (!from_blocked) GatherLanes(from, tail, from_plane, L, from_lanes.data());
      blocked_pass(from_blocked ? from : from_lanes.data(), to_blocked ? to : to_lanes.data());
      if (!to_blocked) ScatterLanes(to_lanes.data(), tail, to_plane, L, to);
    };
    if (forward) {
      const float* src = bottom->cpu_data_kept(true);
      float* dst = top->mutable_cpu_data_kept(true);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < groups; ++i) {
        int* argmax = mask != nullptr ? mask + static_cast<size_t>(i) * L * out_plane : nullptr;
        group(
            i, src + at(i, kIn, in_plane), kIn, in_plane, dst + at(i, kOut, out_plane), kOut,
            out_plane,
            [&](const float* from, float* to) { ForwardGroup<L, kIn, kOut>(g, from, to, argmax); },
            [&](const float* from, float* to) {
              ForwardGroup<L, true, true>(g, from, to, argmax);
            });
      }
      return;
    }
    const float* top_diff = top->cpu_diff_kept(true);
    float* bottom_diff = bottom->mutable_cpu_diff_kept(true);
    const bool parallel = static_cast<size_t>(bottom->count()) >= kParallelBackward;
#pragma omp parallel for if (parallel) schedule(static)
    for (int i = 0; i < groups; ++i) {
      const int* argmax = mask != nullptr ? mask + static_cast<size_t>(i) * L * out_plane : nullptr;
      group(
          i, top_diff + at(i, kOut, out_plane), kOut, out_plane, bottom_diff + at(i, kIn, in_plane),
          kIn, in_plane,
          [&](const float* from, float* to) { BackwardGroup<L, kIn, kOut>(g, from, to, argmax); },
          [&](const float* from, float* to) { BackwardGroup<L, true, true>(g, from, to, argmax); });
    }
  });
}

CORTADO_REGISTER_LAYER(Pooling, PoolingLayer);

}  // namespace cortado
