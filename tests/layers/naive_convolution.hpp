// SPDX-License-Identifier: Apache-2.0
// A direct-loop reference convolution for the Convolution and Deconvolution tests: no im2col,
// no GEMM, double accumulators. Handles 1 to 3 spatial axes (fewer axes are padded with
// size-1 axes), groups, stride, pad and dilation.
#pragma once

#include <algorithm>
#include <vector>

namespace cortado::testing {

struct NaiveConvGeometry {
  int num = 1;         // images
  int channels = 1;    // input channels
  int num_output = 1;  // output channels
  int group = 1;
  int in[3] = {1, 1, 1};  // input spatial size (depth, height, width)
  int out[3] = {1, 1, 1};
  int kernel[3] = {1, 1, 1};
  int stride[3] = {1, 1, 1};
  int pad[3] = {0, 0, 0};
  int dilation[3] = {1, 1, 1};

  // Spatial values given for the last in.size() axes; output sizes follow Caffe's rule.
  static NaiveConvGeometry Make(int num, int channels, int num_output, int group,
                                const std::vector<int>& in, const std::vector<int>& kernel,
                                const std::vector<int>& stride, const std::vector<int>& pad,
                                const std::vector<int>& dilation) {
    NaiveConvGeometry g;
    g.num = num;
    g.channels = channels;
    g.num_output = num_output;
    g.group = group;
    const int skip = 3 - static_cast<int>(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      g.in[skip + i] = in[i];
      g.kernel[skip + i] = kernel[i];
      g.stride[skip + i] = stride[i];
      g.pad[skip + i] = pad[i];
      g.dilation[skip + i] = dilation[i];
      const int extent = dilation[i] * (kernel[i] - 1) + 1;
      g.out[skip + i] = (in[i] + 2 * pad[i] - extent) / stride[i] + 1;
    }
    return g;
  }
  int in_count() const { return in[0] * in[1] * in[2]; }
  int out_count() const { return out[0] * out[1] * out[2]; }
  int kernel_count() const { return kernel[0] * kernel[1] * kernel[2]; }

  // Calls f(out_index, in_index, weight_index) for every product term
  // y[out_index] += w[weight_index] * x[in_index] whose input position is inside the image.
  template <typename F>
  void ForEachTerm(F f) const {
    const int cg = channels / group, og = num_output / group;
    for (int n = 0; n < num; ++n)
      for (int o = 0; o < num_output; ++o)
        for (int c = 0; c < cg; ++c)
          for (int od = 0; od < out[0]; ++od)
            for (int oh = 0; oh < out[1]; ++oh)
              for (int ow = 0; ow < out[2]; ++ow)
                for (int kd = 0; kd < kernel[0]; ++kd)
                  for (int kh = 0; kh < kernel[1]; ++kh)
                    for (int kw = 0; kw < kernel[2]; ++kw) {
                      const int id = od * stride[0] - pad[0] + kd * dilation[0];
                      const int ih = oh * stride[1] - pad[1] + kh * dilation[1];
                      const int iw = ow * stride[2] - pad[2] + kw * dilation[2];
                      if (id < 0 || id >= in[0] || ih < 0 || ih >= in[1] || iw < 0 || iw >= in[2]) {
                        continue;
                      }
                      const int ci = (o / og) * cg + c;
                      const size_t out_index =
                          ((static_cast<size_t>(n) * num_output + o) * out[0] + od) * out[1] *
                              out[2] +
                          oh * out[2] + ow;
                      const size_t in_index =
                          ((static_cast<size_t>(n) * channels + ci) * in[0] + id) * in[1] * in[2] +
                          ih * in[2] + iw;
                      const size_t weight_index =
                          ((static_cast<size_t>(o) * cg + c) * kernel[0] + kd) * kernel[1] *
                              kernel[2] +
                          kh * kernel[2] + kw;
                      f(out_index, in_index, weight_index);
                    }
  }

  // y = conv(x, w) + b (b may be null): y has num x num_output x out, w is
  // num_output x channels/group x kernel.
  std::vector<float> Forward(const float* x, const float* w, const float* b) const {
    std::vector<double> y(static_cast<size_t>(num) * num_output * out_count(), 0.0);
    ForEachTerm([&](size_t yi, size_t xi, size_t wi) { y[yi] += double(w[wi]) * x[xi]; });
    if (b != nullptr) {
      for (size_t i = 0; i < y.size(); ++i) y[i] += b[(i / out_count()) % num_output];
    }
    return std::vector<float>(y.begin(), y.end());
  }

  // Gradients of sum(dy * y) for the y above: dx (overwritten), dw, db (overwritten; null to
  // skip).
  void Backward(const float* x, const float* w, const float* dy, std::vector<float>* dx,
                std::vector<float>* dw, std::vector<float>* db) const {
    std::vector<double> gx(static_cast<size_t>(num) * channels * in_count(), 0.0);
    std::vector<double> gw(static_cast<size_t>(num_output) * (channels / group) * kernel_count(),
                           0.0);
    ForEachTerm([&](size_t yi, size_t xi, size_t wi) {
      gx[xi] += double(w[wi]) * dy[yi];
      gw[wi] += double(x[xi]) * dy[yi];
    });
    if (dx) dx->assign(gx.begin(), gx.end());
    if (dw) dw->assign(gw.begin(), gw.end());
    if (db) {
      std::vector<double> gb(num_output, 0.0);
      const size_t total = static_cast<size_t>(num) * num_output * out_count();
      for (size_t i = 0; i < total; ++i) gb[(i / out_count()) % num_output] += dy[i];
      db->assign(gb.begin(), gb.end());
    }
  }
};

}  // namespace cortado::testing
