// SPDX-License-Identifier: Apache-2.0
#include "layers/batch_norm_layer.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "layers/eltwise_layer.hpp"
#include "layers/scale_layer.hpp"
#include "math/lane_sum.hpp"
#include "math/math.hpp"

namespace cortado {
namespace {

// One row of the fused top: y = relu(z * s + b) for z = normalised(i), each step rounded as the
// Scale and ReLU layers round it (`has_bias`, `relu` as fused), also storing z in x_norm when
// given. Forward and RecomputeTops both write through it, so they agree bit for bit.
template <typename Normalised>
CORTADO_ALWAYS_INLINE inline void AffineRow(int n, Normalised normalised, float sc, float bc,
                                            bool has_bias, bool relu, float slope, float* x_norm,
                                            float* y) {
  if (has_bias && relu) {  // the common case, without branches in the loop
    for (int i = 0; i < n; ++i) {
      const float z = normalised(i);
      if (x_norm != nullptr) x_norm[i] = z;
      const float v = z * sc + bc;
      y[i] = std::max(v, 0.0f) + slope * std::min(v, 0.0f);
    }
    return;
  }
  for (int i = 0; i < n; ++i) {
    const float z = normalised(i);
    if (x_norm != nullptr) x_norm[i] = z;
    float v = z * sc;
    if (has_bias) v += bc;
    if (relu) v = std::max(v, 0.0f) + slope * std::min(v, 0.0f);
    y[i] = v;
  }
}

// dy masked by the fused ReLU: dy where the Scale's output y * sc + bc is positive, else
// dy * slope. Adding a zero bias (no bias term) does not change the sign test, and both sides
// are computed unconditionally so that the choice is a blend the compiler can vectorise.
CORTADO_ALWAYS_INLINE inline float MaskedGradient(float y, float dy, float sc, float bc,
                                                  float slope) {
  const float v = y * sc + bc;
  const float leaky = dy * slope;
  return v > 0.0f ? dy : leaky;
}

// The layout both passes walk: num rows of `spatial` values per channel, m = num * spatial.
struct ChannelRows {
  int num, channels, spatial, m;
};

// What ForwardChannel reads and writes: the bottom, the residual of a folded sum (or null),
// the fused Scale's scale and bias (or null), x_norm (the top itself when it is not kept), the
// top, and the per-channel statistics (mean and variance given for global statistics, else
// computed here).
struct ForwardPlan {
  const float* in;
  const float* residual;
  const float* scale;
  const float* bias;
  float* x_norm;
  float* out;
  float* mean;
  float* variance;
  float* std;
  ChannelRows rows;
  float eps, slope, sum_slope;
  bool batch_stats, relu, sum_relu;
};

// Channel c of the forward pass, from its statistics to its top.
CORTADO_CPU_CLONES void ForwardChannel(const ForwardPlan& p, int c) {
  const ChannelRows& rows = p.rows;
  if (p.batch_stats) {
    // Two passes (mean, then the mean of squared deviations), like Caffe.
    double sum = 0.0;
    for (int n = 0; n < rows.num; ++n) {
      const float* x = p.in + (n * rows.channels + c) * rows.spatial;
      sum += math::LaneSum(rows.spatial, [x](int i) { return x[i]; });
    }
    const float channel_mean = static_cast<float>(sum / rows.m);
    p.mean[c] = channel_mean;
    sum = 0.0;
    for (int n = 0; n < rows.num; ++n) {
      const float* x = p.in + (n * rows.channels + c) * rows.spatial;
      sum += math::LaneSum(rows.spatial, [x, channel_mean](int i) {
        const float d = x[i] - channel_mean;
        return d * d;
      });
    }
    p.variance[c] = static_cast<float>(sum / rows.m);
  }
  p.std[c] = std::sqrt(p.variance[c] + p.eps);
  const float mean = p.mean[c];
  const float sd = p.std[c];
  const float sc = p.scale != nullptr ? p.scale[c] : 1.0f;
  const float bc = p.bias != nullptr ? p.bias[c] : 0.0f;
  for (int n = 0; n < rows.num; ++n) {
    const int offset = (n * rows.channels + c) * rows.spatial;
    const float* x = p.in + offset;
    float* xn = p.x_norm + offset;
    float* y = p.out + offset;
    // Divide (not multiply by 1 / std) to round as Caffe does.
    auto normalised = [x, mean, sd](int i) { return (x[i] - mean) / sd; };
    if (p.scale == nullptr) {
      for (int i = 0; i < rows.spatial; ++i) xn[i] = normalised(i);
      if (xn != y) {
        for (int i = 0; i < rows.spatial; ++i) y[i] = xn[i];
      }
    } else {  // x_norm kept, or not (then only the fused top is written)
      AffineRow(rows.spatial, normalised, sc, bc, p.bias != nullptr, p.relu, p.slope,
                xn != y ? xn : nullptr, y);
    }
    if (p.residual != nullptr) {  // the folded sum, as eltwise_layer.cpp computes it
      const float* r = p.residual + offset;
      if (p.sum_relu) {
        for (int i = 0; i < rows.spatial; ++i) {
          const float v = r[i] + y[i];
          y[i] = std::max(v, 0.0f) + p.sum_slope * std::min(v, 0.0f);
        }
      } else {
        for (int i = 0; i < rows.spatial; ++i) y[i] = r[i] + y[i];
      }
    }
  }
}

// What BackwardChannel reads and writes: dy (the folded sum's gradient when one is folded in),
// x_norm, the bottom's diff (null when it is not propagated), the fused Scale's scale and bias
// (or null), the forward pass's std, and the per-channel sums it computes when `sums`.
struct BackwardPlan {
  const float* top_diff;
  const float* x_norm;
  float* diff;
  const float* scale;
  const float* bias;
  const float* std;
  double* sum_g;
  double* sum_gy;
  ChannelRows rows;
  float slope;
  bool sums, global, relu;
};

// Channel c of the backward pass: sum(g) and sum(g * x_norm), then the bottom's diff.
CORTADO_CPU_CLONES void BackwardChannel(const BackwardPlan& p, int c) {
  const ChannelRows& rows = p.rows;
  const float sc = p.scale != nullptr ? p.scale[c] : 1.0f;
  const float bc = p.bias != nullptr ? p.bias[c] : 0.0f;
  const float slope = p.slope;
  if (p.sums) {
    for (int n = 0; n < rows.num; ++n) {
      const int offset = (n * rows.channels + c) * rows.spatial;
      const float* dy = p.top_diff + offset;
      const float* yn = p.x_norm + offset;
      double a = 0.0, b = 0.0;
      if (!p.relu) {
        math::LaneSum2(
            rows.spatial, [dy](int i) { return dy[i]; }, [dy, yn](int i) { return dy[i] * yn[i]; },
            &a, &b);
      } else {
        auto gi = [=](int i) { return MaskedGradient(yn[i], dy[i], sc, bc, slope); };
        math::LaneSum2(
            rows.spatial, gi, [gi, yn](int i) { return gi(i) * yn[i]; }, &a, &b);
      }
      p.sum_g[c] += a;
      p.sum_gy[c] += b;
    }
  }
  if (p.diff == nullptr) return;
  // dy at the normalised output is s * g: with the statistics constant, dx = s * g / std;
  // with batch statistics (means over the channel's m values)
  //   dx = (s * g - mean(s * g) - mean(s * g * y) * y) / std.
  const float a = p.global ? 0.0f : static_cast<float>(sc * p.sum_g[c] / rows.m);
  const float b = p.global ? 0.0f : static_cast<float>(sc * p.sum_gy[c] / rows.m);
  const float sd = p.std[c];
  for (int n = 0; n < rows.num; ++n) {
    const int offset = (n * rows.channels + c) * rows.spatial;
    const float* dy = p.top_diff + offset;
    const float* yn = p.x_norm + offset;
    float* dx = p.diff + offset;
    auto gi = [=](int i) { return MaskedGradient(yn[i], dy[i], sc, bc, slope); };
    if (p.global) {
      if (p.relu) {
        for (int i = 0; i < rows.spatial; ++i) dx[i] = gi(i) * sc / sd;
      } else {
        for (int i = 0; i < rows.spatial; ++i) dx[i] = dy[i] * sc / sd;
      }
    } else if (p.relu) {
      for (int i = 0; i < rows.spatial; ++i) dx[i] = (gi(i) * sc - a - b * yn[i]) / sd;
    } else {
      for (int i = 0; i < rows.spatial; ++i) dx[i] = (dy[i] * sc - a - b * yn[i]) / sd;
    }
  }
}

// ---- the same in channel blocks (Tensor::cpu_block): [n][c / B][spatial][c % B] ----------------
// A block's B channels are done together, lane l for channel c0 + l, each value computed with
// the same operations in the same order as the NCHW passes above (the sums through BlockLaneSum,
// LaneSum's order lane for lane), so that either layout gives the same bits.

// Where image n's values of channel block cb start.
inline size_t BlockAt(const ChannelRows& rows, int block, int n, int cb) {
  return (static_cast<size_t>(n) * (rows.channels / block) + cb) * rows.spatial * block;
}

// The fused top of one image's block: AffineRow with a scale and bias per lane.
template <int B, typename Normalised>
CORTADO_ALWAYS_INLINE inline void AffineBlock(int spatial, Normalised normalised, const float* sc,
                                              const float* bc, bool has_bias, bool relu,
                                              float slope, float* x_norm, float* y) {
  if (has_bias && relu) {
    for (int i = 0; i < spatial; ++i) {
      for (int l = 0; l < B; ++l) {
        const int e = i * B + l;
        const float z = normalised(e, l);
        if (x_norm != nullptr) x_norm[e] = z;
        const float v = z * sc[l] + bc[l];
        y[e] = std::max(v, 0.0f) + slope * std::min(v, 0.0f);
      }
    }
    return;
  }
  for (int i = 0; i < spatial; ++i) {
    for (int l = 0; l < B; ++l) {
      const int e = i * B + l;
      const float z = normalised(e, l);
      if (x_norm != nullptr) x_norm[e] = z;
      float v = z * sc[l];
      if (has_bias) v += bc[l];
      if (relu) v = std::max(v, 0.0f) + slope * std::min(v, 0.0f);
      y[e] = v;
    }
  }
}

template <int B>
CORTADO_CPU_CLONES void ForwardBlock(const ForwardPlan& p, int cb) {
  const ChannelRows& rows = p.rows;
  const int c0 = cb * B;
  const int values = rows.spatial * B;  // one image's block
  if (p.batch_stats) {
    double sum[B] = {};
    for (int n = 0; n < rows.num; ++n) {
      const float* x = p.in + BlockAt(rows, B, n, cb);
      math::BlockLaneSum<B>(
          rows.spatial, [x](int i, int l) { return x[i * B + l]; }, sum);
    }
    float mean[B];
    for (int l = 0; l < B; ++l) {
      mean[l] = static_cast<float>(sum[l] / rows.m);
      p.mean[c0 + l] = mean[l];
    }
    double squares[B] = {};
    for (int n = 0; n < rows.num; ++n) {
      const float* x = p.in + BlockAt(rows, B, n, cb);
      math::BlockLaneSum<B>(
          rows.spatial,
          [x, &mean](int i, int l) {
            const float d = x[i * B + l] - mean[l];
            return d * d;
          },
          squares);
    }
    for (int l = 0; l < B; ++l) p.variance[c0 + l] = static_cast<float>(squares[l] / rows.m);
  }
  float mean[B], sd[B], sc[B], bc[B];
  for (int l = 0; l < B; ++l) {
    const int c = c0 + l;
    p.std[c] = std::sqrt(p.variance[c] + p.eps);
    mean[l] = p.mean[c];
    sd[l] = p.std[c];
    sc[l] = p.scale != nullptr ? p.scale[c] : 1.0f;
    bc[l] = p.bias != nullptr ? p.bias[c] : 0.0f;
  }
  for (int n = 0; n < rows.num; ++n) {
    const size_t offset = BlockAt(rows, B, n, cb);
    const float* x = p.in + offset;
    float* xn = p.x_norm + offset;
    float* y = p.out + offset;
    auto normalised = [x, &mean, &sd](int e, int l) { return (x[e] - mean[l]) / sd[l]; };
    if (p.scale == nullptr) {
      for (int i = 0; i < rows.spatial; ++i) {
        for (int l = 0; l < B; ++l) xn[i * B + l] = normalised(i * B + l, l);
      }
      if (xn != y) {
        for (int e = 0; e < values; ++e) y[e] = xn[e];
      }
    } else {
      AffineBlock<B>(rows.spatial, normalised, sc, bc, p.bias != nullptr, p.relu, p.slope,
                     xn != y ? xn : nullptr, y);
    }
    if (p.residual != nullptr) {  // element by element: as ForwardChannel's
      const float* r = p.residual + offset;
      if (p.sum_relu) {
        for (int e = 0; e < values; ++e) {
          const float v = r[e] + y[e];
          y[e] = std::max(v, 0.0f) + p.sum_slope * std::min(v, 0.0f);
        }
      } else {
        for (int e = 0; e < values; ++e) y[e] = r[e] + y[e];
      }
    }
  }
}

template <int B>
CORTADO_CPU_CLONES void BackwardBlock(const BackwardPlan& p, int cb) {
  const ChannelRows& rows = p.rows;
  const int c0 = cb * B;
  float sc[B], bc[B];
  for (int l = 0; l < B; ++l) {
    sc[l] = p.scale != nullptr ? p.scale[c0 + l] : 1.0f;
    bc[l] = p.bias != nullptr ? p.bias[c0 + l] : 0.0f;
  }
  const float slope = p.slope;
  if (p.sums) {
    for (int n = 0; n < rows.num; ++n) {
      const size_t offset = BlockAt(rows, B, n, cb);
      const float* dy = p.top_diff + offset;
      const float* yn = p.x_norm + offset;
      if (!p.relu) {
        math::BlockLaneSum2<B>(
            rows.spatial, [dy](int i, int l) { return dy[i * B + l]; },
            [dy, yn](int i, int l) { return dy[i * B + l] * yn[i * B + l]; }, p.sum_g + c0,
            p.sum_gy + c0);
      } else {
        auto gi = [=, &sc, &bc](int i, int l) {
          const int e = i * B + l;
          return MaskedGradient(yn[e], dy[e], sc[l], bc[l], slope);
        };
        math::BlockLaneSum2<B>(
            rows.spatial, gi, [gi, yn](int i, int l) { return gi(i, l) * yn[i * B + l]; },
            p.sum_g + c0, p.sum_gy + c0);
      }
    }
  }
  if (p.diff == nullptr) return;
  float a[B], b[B], sd[B];
  for (int l = 0; l < B; ++l) {
    const int c = c0 + l;
    a[l] = p.global ? 0.0f : static_cast<float>(sc[l] * p.sum_g[c] / rows.m);
    b[l] = p.global ? 0.0f : static_cast<float>(sc[l] * p.sum_gy[c] / rows.m);
    sd[l] = p.std[c];
  }
  for (int n = 0; n < rows.num; ++n) {
    const size_t offset = BlockAt(rows, B, n, cb);
    const float* dy = p.top_diff + offset;
    const float* yn = p.x_norm + offset;
    float* dx = p.diff + offset;
    auto gi = [=, &sc, &bc](int e, int l) {
      return MaskedGradient(yn[e], dy[e], sc[l], bc[l], slope);
    };
    auto each = [&](auto value) {
      for (int i = 0; i < rows.spatial; ++i) {
        for (int l = 0; l < B; ++l) dx[i * B + l] = value(i * B + l, l);
      }
    };
    if (p.global) {
      if (p.relu) {
        each([&](int e, int l) { return gi(e, l) * sc[l] / sd[l]; });
      } else {
        each([&](int e, int l) { return dy[e] * sc[l] / sd[l]; });
      }
    } else if (p.relu) {
      each([&](int e, int l) { return (gi(e, l) * sc[l] - a[l] - b[l] * yn[e]) / sd[l]; });
    } else {
      each([&](int e, int l) { return (dy[e] * sc[l] - a[l] - b[l] * yn[e]) / sd[l]; });
    }
  }
}

// RecomputeTops's passes (the fused top from x_norm, as Forward computes it), built for each
// CPU like the passes above: channel c (NCHW) or channel block cb.
struct RecomputePlan {
  ChannelRows rows;
  const float* x_norm;
  const float* scale;
  const float* bias;  // or null
  bool relu;
  float slope;
  float* out;
};

CORTADO_CPU_CLONES void RecomputeChannel(const RecomputePlan& p, int c) {
  const float sc = p.scale[c];
  const float bc = p.bias != nullptr ? p.bias[c] : 0.0f;
  for (int n = 0; n < p.rows.num; ++n) {
    const int offset = (n * p.rows.channels + c) * p.rows.spatial;
    const float* xn = p.x_norm + offset;
    AffineRow(
        p.rows.spatial, [xn](int i) { return xn[i]; }, sc, bc, p.bias != nullptr, p.relu, p.slope,
        nullptr, p.out + offset);
  }
}

template <int B>
CORTADO_CPU_CLONES void RecomputeBlock(const RecomputePlan& p, int cb) {
  const float* sc = p.scale + cb * B;
  float bc[B] = {};
  if (p.bias != nullptr) std::copy(p.bias + cb * B, p.bias + cb * B + B, bc);
  for (int n = 0; n < p.rows.num; ++n) {
    const size_t offset = BlockAt(p.rows, B, n, cb);
    const float* xn = p.x_norm + offset;
    AffineBlock<B>(
        p.rows.spatial, [xn](int e, int) { return xn[e]; }, sc, bc, p.bias != nullptr, p.relu,
        p.slope, nullptr, p.out + offset);
  }
}

// The channel block the passes run in: the bottom's when its top and a folded sum's other
// bottom keep the same (SameCpuBlocks), else 0 (every one read and written as NCHW views).
int CommonBlock(const Tensor* bottom, const Tensor* top, const Tensor* residual) {
  return SameCpuBlocks({bottom, top, residual}) ? bottom->cpu_block() : 0;
}

// Runs a pass over every channel (block 0: channel(c) for each c) or every block of 8 or 16
// channels (block8(cb), block16(cb)) across the threads, each unit one thread's work.
template <typename Channel, typename Block8, typename Block16>
void ForEachChannel(int channels, int block, int count, Channel channel, Block8 block8,
                    Block16 block16) {
  CORTADO_CHECK(block == 0 || block == 8 || block == 16, "a channel block of {}", block);
  const int units = block != 0 ? channels / block : channels;
#pragma omp parallel for if (count > math::kParallelThreshold) schedule(static)
  for (int u = 0; u < units; ++u) {
    if (block == 16) {
      block16(u);
    } else if (block == 8) {
      block8(u);
    } else {
      channel(u);
    }
  }
}

}  // namespace

void BatchNormLayer::Setup(const std::vector<Tensor*>& bottom,
                           const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.batch_norm_param();
  use_global_stats_ = p.has_use_global_stats() ? p.use_global_stats() : phase() == caffe::TEST;
  moving_average_fraction_ = p.moving_average_fraction();
  eps_ = p.eps();
  if (bottom[0]->num_axes() < 2) {
    CORTADO_THROW(kInvalidArgument, "{}: bottom of shape {} has no channel axis (needs >= 2 axes)",
                  Describe(), bottom[0]->ShapeString());
  }
  channels_ = bottom[0]->shape(1);
  if (blobs_.empty()) {
    blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{channels_}));
    blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{channels_}));
    blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{1}));
    for (auto& blob : blobs_) math::Set(blob->count(), 0.0f, blob->mutable_cpu_data());
  }
  // The statistics are not parameters: keep solvers and Backward away from them (as Caffe).
  for (int i = 0; i < static_cast<int>(blobs_.size()); ++i) {
    if (param_.param_size() == i) {
      param_.add_param()->set_lr_mult(0.0f);
    } else if (param_.param(i).lr_mult() != 0.0f) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: param {} has lr_mult {}; the batch statistics cannot be learned "
                    "(lr_mult must be 0)",
                    Describe(), i, param_.param(i).lr_mult());
    }
    set_param_propagate_down(i, false);
  }
}

void BatchNormLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (in.num_axes() < 2 || in.shape(1) != channels_) {
    CORTADO_THROW(kInvalidArgument, "{}: bottom of shape {} does not have {} channels on axis 1",
                  Describe(), in.ShapeString(), channels_);
  }
  if (top[0] != bottom[0]) top[0]->ReshapeLike(in);
  CORTADO_CHECK(!keep_input_ || top[0] != bottom[0],
                "{}: KeepInput needs a top other than the bottom", Describe());
  CORTADO_CHECK(
      bottom.size() == (sum_ != nullptr ? 2u : 1u) && (sum_ == nullptr || top[0] != bottom[0]),
      "{}: {} bottoms with {} sum folded in", Describe(), bottom.size(),
      sum_ != nullptr ? "a" : "no");
  if (sum_ != nullptr && bottom[1]->shape() != in.shape()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the sum folded into it ('{}') adds a bottom of shape {} to its output of "
                  "shape {}; all bottoms of a sum must have the same shape",
                  Describe(), sum_->name(), bottom[1]->ShapeString(), in.ShapeString());
  }
  input_ = bottom[0];
  num_ = in.shape(0);
  spatial_dim_ = in.count(2);
  mean_.assign(channels_, 0.0f);
  std_.assign(channels_, 0.0f);
  x_norm_.ReshapeLike(in);
}

void BatchNormLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  // In channel blocks where the net keeps the bottom, the top and a folded sum's other bottom so.
  const int block = CommonBlock(bottom[0], top[0], sum_ != nullptr ? bottom[1] : nullptr);
  const float* in = block != 0 ? bottom[0]->cpu_home_data() : bottom[0]->cpu_data();
  float* out = block != 0 ? top[0]->mutable_cpu_home_data() : top[0]->mutable_cpu_data();
  const int count = bottom[0]->count();
  const int m = count / channels_;  // values per channel
  std::vector<float> variance(channels_, 0.0f);

  if (use_global_stats_) {
    // A zero normaliser (no training yet) means all-zero statistics, as in Caffe.
    const float norm = blobs_[2]->cpu_data()[0];
    const float factor = norm == 0.0f ? 0.0f : 1.0f / norm;
    math::Scale(channels_, factor, blobs_[0]->cpu_data(), mean_.data());
    math::Scale(channels_, factor, blobs_[1]->cpu_data(), variance.data());
  }
  const bool batch_stats = !use_global_stats_;

  // Without Backward the top itself takes x_norm (in place too: each element is read first).
  float* x_norm = keep_x_norm_ ? x_norm_.mutable_cpu_data() : out;
  // Fused, top = relu(x_norm * s + b), each step rounded as the Scale and ReLU layers round it,
  // in the same pass that normalises (one read of the bottom, one write of each output).
  const Affine affine = scale_ != nullptr ? FusedAffine() : Affine{};
  const float* s = affine.scale != nullptr ? affine.scale->cpu_data() : nullptr;
  const float* b = affine.bias != nullptr ? affine.bias->cpu_data() : nullptr;
  const bool relu = relu_;
  const float slope = relu_slope_;
  const float* residual = sum_ == nullptr ? nullptr
                          : block != 0    ? bottom[1]->cpu_home_data()
                                          : bottom[1]->cpu_data();
  const bool sum_relu = sum_ != nullptr && sum_->fused_relu();
  const float sum_slope = sum_ != nullptr ? sum_->relu_slope() : 0.0f;
  // One channel after another, each one thread's work from its statistics to its top, so that
  // the sums (and the results) do not depend on the thread count, and the channel's values are
  // read from memory once: the passes after the first find them in the cache (a channel of
  // ResNet-50's largest BatchNorm at batch 8 is 400 KB).
  ForwardPlan plan;
  plan.in = in;
  plan.residual = residual;
  plan.scale = s;
  plan.bias = b;
  plan.x_norm = x_norm;
  plan.out = out;
  plan.mean = mean_.data();
  plan.variance = variance.data();
  plan.std = std_.data();
  plan.rows = {num_, channels_, spatial_dim_, m};
  plan.eps = eps_;
  plan.slope = slope;
  plan.sum_slope = sum_slope;
  plan.batch_stats = batch_stats;
  plan.relu = relu;
  plan.sum_relu = sum_relu;
  ForEachChannel(
      channels_, block, count, [&plan](int c) { ForwardChannel(plan, c); },
      [&plan](int cb) { ForwardBlock<8>(plan, cb); },
      [&plan](int cb) { ForwardBlock<16>(plan, cb); });
  if (batch_stats) {
    // Running sums; the normaliser in blobs[2] turns them into averages.
    float* norm = blobs_[2]->mutable_cpu_data();
    norm[0] = norm[0] * moving_average_fraction_ + 1.0f;
    math::Axpby(channels_, 1.0f, mean_.data(), moving_average_fraction_,
                blobs_[0]->mutable_cpu_data());
    // Unbiased variance estimate for the running average, as Caffe.
    const float bias_correction = m > 1 ? static_cast<float>(m) / (m - 1) : 1.0f;
    math::Axpby(channels_, bias_correction, variance.data(), moving_average_fraction_,
                blobs_[1]->mutable_cpu_data());
  }
}

void BatchNormLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  const Affine affine = scale_ != nullptr ? FusedAffine() : Affine{};
  const bool param_grads = affine.scale_grad != nullptr || affine.bias_grad != nullptr;
  SumBackward(propagate_down, propagate_down[0] || param_grads);
  if (!propagate_down[0] && !param_grads) return;
  CORTADO_CHECK(keep_x_norm_, "{}: Backward after DropBackwardState", Describe());
  // In place, top diff and bottom diff are one buffer; every step below reads an element
  // before writing the same element. A folded sum's gradient is bottom 1's.
  const int block = CommonBlock(bottom[0], top[0], sum_ != nullptr ? bottom[1] : nullptr);
  const Tensor* dy_blob = sum_ != nullptr ? bottom[1] : top[0];
  const float* top_diff = block != 0 ? dy_blob->cpu_home_diff() : dy_blob->cpu_diff();
  const float* y = x_norm_.cpu_data();  // in the layout of the forward pass
  const int m = num_ * spatial_dim_;
  // Fused, g is the gradient at the Scale's output: dy, times the ReLU's slope where the Scale's
  // output v = x_norm * s (+ b) is not positive (v > 0 exactly when relu(v) > 0 for slope >= 0).
  // v is recomputed from x_norm with the forward pass's rounding, so the test is the forward's,
  // without reading the top's data. Unfused, g = dy.
  const float* s = affine.scale != nullptr ? affine.scale->cpu_data() : nullptr;
  const float* bias = affine.bias != nullptr ? affine.bias->cpu_data() : nullptr;
  const bool relu = relu_;
  const float slope = relu_slope_;
  // Per channel: sum(g) and sum(g * y), needed for batch statistics and for the Scale's diffs;
  // then the bottom's diff. One channel after another, each one thread's work, so that the
  // channel's dy and x_norm come from the cache in the second pass (as in Forward).
  std::vector<double> sum_g(channels_, 0.0), sum_gy(channels_, 0.0);
  const int count = bottom[0]->count();
  const bool sums = !use_global_stats_ || param_grads;
  float* diff = !propagate_down[0] ? nullptr
                : block != 0       ? bottom[0]->mutable_cpu_home_diff()
                                   : bottom[0]->mutable_cpu_diff();
  BackwardPlan plan;
  plan.top_diff = top_diff;
  plan.x_norm = y;
  plan.diff = diff;
  plan.scale = s;
  plan.bias = bias;
  plan.std = std_.data();
  plan.sum_g = sum_g.data();
  plan.sum_gy = sum_gy.data();
  plan.rows = {num_, channels_, spatial_dim_, m};
  plan.slope = slope;
  plan.sums = sums;
  plan.global = use_global_stats_;
  plan.relu = relu;
  ForEachChannel(
      channels_, block, count, [&plan](int c) { BackwardChannel(plan, c); },
      [&plan](int cb) { BackwardBlock<8>(plan, cb); },
      [&plan](int cb) { BackwardBlock<16>(plan, cb); });
  // The Scale's diffs (accumulated, as its own Backward does): d scale = sum(g * x_norm),
  // d bias = sum(g).
  if (affine.scale_grad != nullptr) {
    float* ds = affine.scale_grad->mutable_cpu_diff();
    for (int c = 0; c < channels_; ++c) ds[c] += static_cast<float>(sum_gy[c]);
  }
  if (affine.bias_grad != nullptr) {
    float* db = affine.bias_grad->mutable_cpu_diff();
    for (int c = 0; c < channels_; ++c) db[c] += static_cast<float>(sum_g[c]);
  }
}

void BatchNormLayer::RecomputeTops(const std::vector<Tensor*>& top) {
  CORTADO_CHECK(keep_x_norm_, "{}: RecomputeTops after DropBackwardState", Describe());
#if CORTADO_WITH_CUDA
  if (ctx_->device().is_cuda()) {
    RecomputeTopGpu(top[0]);
    return;
  }
#endif
  const float* x_norm = x_norm_.cpu_data();  // in the layout of the forward pass
  const int block = top[0]->cpu_block();
  float* out = block != 0 ? top[0]->mutable_cpu_home_data() : top[0]->mutable_cpu_data();
  const int count = top[0]->count();
  if (scale_ == nullptr) {
    math::Copy(count, x_norm, out);
    return;
  }
  // As Forward computes the top from its x_norm, step for step.
  const Affine affine = FusedAffine();
  RecomputePlan plan;
  plan.rows = {num_, channels_, spatial_dim_, num_ * spatial_dim_};
  plan.x_norm = x_norm;
  plan.scale = affine.scale->cpu_data();
  plan.bias = affine.bias != nullptr ? affine.bias->cpu_data() : nullptr;
  plan.relu = relu_;
  plan.slope = relu_slope_;
  plan.out = out;
  ForEachChannel(
      channels_, block, count, [&plan](int c) { RecomputeChannel(plan, c); },
      [&plan](int cb) { RecomputeBlock<8>(plan, cb); },
      [&plan](int cb) { RecomputeBlock<16>(plan, cb); });
}

void BatchNormLayer::FuseScale(ScaleLayer* scale, bool scale_backward, bool relu,
                               float relu_slope) {
  CORTADO_CHECK(scale != nullptr && scale->ScalesChannels(), "{}: cannot fuse {}", Describe(),
                scale == nullptr ? "nothing" : scale->name());
  CORTADO_CHECK(relu_slope >= 0.0f);
  scale_ = scale;
  scale_backward_ = scale_backward;
  relu_ = relu;
  relu_slope_ = relu_slope;
}

void BatchNormLayer::FoldSum(EltwiseLayer* sum, std::vector<Tensor*> sum_bottom,
                             std::vector<Tensor*> sum_top, int residual) {
  CORTADO_CHECK(sum != nullptr && sum->plain_sum() && sum_bottom.size() == 2 &&
                    sum_top.size() == 1 && (residual == 0 || residual == 1) && scale_ != nullptr &&
                    !relu_ && sum_ == nullptr,
                "{}: cannot fold {} into it", Describe(), sum == nullptr ? "nothing" : sum->name());
  sum_ = sum;
  sum_bottom_ = std::move(sum_bottom);
  sum_top_ = std::move(sum_top);
  residual_index_ = residual;
}

void BatchNormLayer::ReplaceSumBlob(Tensor* from, Tensor* to) {
  for (auto* blobs : {&sum_bottom_, &sum_top_}) {
    std::replace(blobs->begin(), blobs->end(), from, to);
  }
}

bool BatchNormLayer::BackwardReadsTopData(int /*index*/) const {
  return sum_ != nullptr && sum_->fused_relu();
}

void BatchNormLayer::SumBackward(const std::vector<bool>& propagate_down, bool chain) {
  if (sum_ == nullptr) return;
  CORTADO_CHECK(propagate_down.size() == 2 && (propagate_down[1] || !chain),
                "{}: the chain's gradient comes from the folded sum's for bottom 1, which is not "
                "propagated",
                Describe());
  if (!propagate_down[1]) return;
  // The sum's gradient for bottom 1 alone: the chain's would be the same values.
  std::vector<bool> down(2, false);
  down[residual_index_] = true;
  sum_->BackwardForHost(sum_top_, down, sum_bottom_);
}

BatchNormLayer::Affine BatchNormLayer::FusedAffine() const {
  // Looked up on every pass, like the Scale layer's own passes would.
  auto& blobs = scale_->blobs();
  if (blobs[0]->count() != channels_) {
    CORTADO_THROW(kInvalidArgument, "{}: fused layer '{}' has {} scale values for {} channels",
                  Describe(), scale_->name(), blobs[0]->count(), channels_);
  }
  Affine affine;
  affine.scale = blobs[0].get();
  const int bias = scale_->bias_index();
  if (bias >= 0) affine.bias = blobs[bias].get();
  if (scale_backward_) {
    if (scale_->param_propagate_down(0)) affine.scale_grad = blobs[0].get();
    if (bias >= 0 && scale_->param_propagate_down(bias)) affine.bias_grad = blobs[bias].get();
  }
  return affine;
}

CORTADO_REGISTER_LAYER(BatchNorm, BatchNormLayer);

}  // namespace cortado
