// SPDX-License-Identifier: Apache-2.0
// Cortado's own GPU kernels for pooling, LRN, ReLU and softmax beside cuDNN's for the same
// shapes (CaffeNet's at batch 256, ResNet-50's ReLU at batch 64), forward and backward: the
// evidence for which of the two the layers use. Each pass is timed with CUDA events over 20
// runs after 3 warm-up runs, on random inputs. Then mixed precision's cost: ResNet-50's
// convolution shapes at batch 128 as Convolution layers in TF32 and in float16 (which copies its
// operands into NHWC float16 and back), beside the time of those copies alone.
//
//   cortado_cudnn_ops_bench [gpu=0]
// prints one line per case: "<case> <shape> ours fwd <ms> bwd <ms> cudnn fwd <ms> bwd <ms>",
// then one per convolution: "<conv> tf32 fwd <ms> bwd <ms> float16 fwd <ms> bwd <ms> copies
// fwd <ms> bwd <ms>".
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "layers/layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

constexpr int kWarmup = 3;
constexpr int kRuns = 20;

// Milliseconds per run of `pass`, timed on the context's stream.
double TimeMs(Context& ctx, const std::function<void()>& pass) {
  cudaStream_t stream = cuda::Stream(ctx);
  for (int i = 0; i < kWarmup; ++i) pass();
  cudaEvent_t start, stop;
  CORTADO_CUDA_CHECK(cudaEventCreate(&start));
  CORTADO_CUDA_CHECK(cudaEventCreate(&stop));
  CORTADO_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kRuns; ++i) pass();
  CORTADO_CUDA_CHECK(cudaEventRecord(stop, stream));
  CORTADO_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CORTADO_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / kRuns;
}

struct Case {
  std::string name;
  std::string layer;  // LayerParameter text
  std::vector<int> shape;
};

cudnnTensorDescriptor_t Descriptor4d(const std::vector<int>& s) {
  cudnnTensorDescriptor_t d;
  CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  const int n = s[0], c = s.size() > 1 ? s[1] : 1, h = s.size() > 2 ? s[2] : 1,
            w = s.size() > 3 ? s[3] : 1;
  CORTADO_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  return d;
}

// cuDNN's forward and backward for one case, on the same tensors as the layer.
struct CudnnPasses {
  std::function<void()> forward, backward;
};

CudnnPasses CudnnFor(Context& ctx, const Case& c, Tensor& x, Tensor& y) {
  cudnnHandle_t h = cuda::Get(ctx).cudnn;
  cudnnTensorDescriptor_t xd = Descriptor4d(x.shape()), yd = Descriptor4d(y.shape());
  static const float one = 1.0f, zero = 0.0f;
  const float* xp = x.gpu_data();
  float* yp = y.mutable_gpu_data();
  const float* dyp = y.gpu_diff();
  float* dxp = x.mutable_gpu_diff();
  if (c.name.rfind("maxpool", 0) == 0) {
    cudnnPoolingDescriptor_t pd;
    CORTADO_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pd));
    CORTADO_CUDNN_CHECK(
        cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 3, 3, 0, 0, 2, 2));
    return {[=] { CORTADO_CUDNN_CHECK(cudnnPoolingForward(h, pd, &one, xd, xp, &zero, yd, yp)); },
            [=] {
              CORTADO_CUDNN_CHECK(
                  cudnnPoolingBackward(h, pd, &one, yd, yp, yd, dyp, xd, xp, &zero, xd, dxp));
            }};
  }
  if (c.name.rfind("lrn", 0) == 0) {
    cudnnLRNDescriptor_t ld;
    CORTADO_CUDNN_CHECK(cudnnCreateLRNDescriptor(&ld));
    CORTADO_CUDNN_CHECK(cudnnSetLRNDescriptor(ld, 5, 1e-4, 0.75, 1.0));
    return {
        [=] {
          CORTADO_CUDNN_CHECK(cudnnLRNCrossChannelForward(h, ld, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one,
                                                          xd, xp, &zero, yd, yp));
        },
        [=] {
          CORTADO_CUDNN_CHECK(cudnnLRNCrossChannelBackward(
              h, ld, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, yd, yp, yd, dyp, xd, xp, &zero, xd, dxp));
        }};
  }
  if (c.name.rfind("relu", 0) == 0) {
    cudnnActivationDescriptor_t ad;
    CORTADO_CUDNN_CHECK(cudnnCreateActivationDescriptor(&ad));
    CORTADO_CUDNN_CHECK(
        cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    return {
        [=] { CORTADO_CUDNN_CHECK(cudnnActivationForward(h, ad, &one, xd, xp, &zero, yd, yp)); },
        [=] {
          CORTADO_CUDNN_CHECK(
              cudnnActivationBackward(h, ad, &one, yd, yp, yd, dyp, xd, xp, &zero, xd, dxp));
        }};
  }
  // softmax over the channels
  return {
      [=] {
        CORTADO_CUDNN_CHECK(cudnnSoftmaxForward(
            h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, &one, xd, xp, &zero, yd, yp));
      },
      [=] {
        CORTADO_CUDNN_CHECK(cudnnSoftmaxBackward(h, CUDNN_SOFTMAX_ACCURATE,
                                                 CUDNN_SOFTMAX_MODE_CHANNEL, &one, yd, yp, yd, dyp,
                                                 &zero, xd, dxp));
      }};
}

// Mixed precision's copies beside the convolutions they feed (see the file comment).
void TimeHalfCopies(int gpu) {
  struct Conv {
    const char* name;
    int channels, size, outputs, kernel;
  };
  const Conv convs[] = {{"res2_3x3", 64, 56, 64, 3},     {"res2_1x1", 64, 56, 256, 1},
                        {"res2_1x1r", 256, 56, 64, 1},   {"res3_3x3", 128, 28, 128, 3},
                        {"res3_1x1", 128, 28, 512, 1},   {"res4_3x3", 256, 14, 256, 3},
                        {"res4_1x1r", 1024, 14, 256, 1}, {"res5_1x1", 512, 7, 2048, 1}};
  constexpr int kBatch = 128;
  // The float16 columns time the half path for every shape, those that training leaves in TF32
  // included (cudnn_convolution.cu's HalfPays).
  ::setenv("CORTADO_HALF_CONVOLUTIONS", "all", 1);
  for (const Conv& c : convs) {
    double ms[2][2] = {};
    for (int half = 0; half < 2; ++half) {
      Context ctx(Device::Cuda(gpu), 1);
      ctx.MakeCurrent();
      ctx.set_allow_tf32(true);
      if (half) ctx.set_half_compute(Context::HalfType::kFloat16);
      caffe::LayerParameter param;
      io::ReadProtoFromTextString(
          std::string("name: 'conv' type: 'Convolution' convolution_param { num_output: ") +
              std::to_string(c.outputs) + " kernel_size: " + std::to_string(c.kernel) + " pad: " +
              std::to_string(c.kernel / 2) + " bias_term: false weight_filler { type: 'msra' } }",
          "<bench>", &param);
      auto layer = CreateLayer(param, &ctx);
      Tensor x({kBatch, c.channels, c.size, c.size}), y;
      const std::vector<Tensor*> bottom = {&x}, top = {&y};
      layer->Initialize(bottom, top);
      math::gpu::RngUniform(ctx, x.count(), -1.0f, 1.0f, x.mutable_gpu_data());
      y.mutable_gpu_diff();
      math::gpu::RngUniform(ctx, y.count(), -1.0f, 1.0f, y.mutable_gpu_diff());
      ms[half][0] = TimeMs(ctx, [&] { layer->Forward(bottom, top); });
      ms[half][1] = TimeMs(ctx, [&] { layer->Backward(top, {true}, bottom); });
    }
    // The copies alone: forward x, w in and y out; backward x, dy, w in, dw (added) and dx out.
    Context ctx(Device::Cuda(gpu), 1);
    ctx.MakeCurrent();
    const auto f16 = Context::HalfType::kFloat16;
    const int hw = c.size * c.size, taps = c.kernel * c.kernel;
    Tensor x({kBatch, c.channels, hw}), w({c.outputs, c.channels, taps}),
        y({kBatch, c.outputs, hw});
    Tensor xh({(x.count() + 1) / 2}), wh({(w.count() + 1) / 2}), yh({(y.count() + 1) / 2});
    const double copies_fwd = TimeMs(ctx, [&] {
      math::gpu::ToHalfNhwc(ctx, f16, kBatch, c.channels, hw, x.gpu_data(), xh.mutable_gpu_data());
      math::gpu::ToHalfNhwc(ctx, f16, c.outputs, c.channels, taps, w.gpu_data(),
                            wh.mutable_gpu_data());
      math::gpu::FromHalfNhwc(ctx, f16, kBatch, c.outputs, hw, yh.gpu_data(), 0.0f,
                              y.mutable_gpu_data());
    });
    const double copies_bwd = TimeMs(ctx, [&] {
      math::gpu::ToHalfNhwc(ctx, f16, kBatch, c.channels, hw, x.gpu_data(), xh.mutable_gpu_data());
      math::gpu::ToHalfNhwc(ctx, f16, kBatch, c.outputs, hw, y.gpu_data(), yh.mutable_gpu_data());
      math::gpu::FromHalfNhwc(ctx, f16, c.outputs, c.channels, taps, wh.gpu_data(), 1.0f,
                              w.mutable_gpu_data());
      math::gpu::ToHalfNhwc(ctx, f16, c.outputs, c.channels, taps, w.gpu_data(),
                            wh.mutable_gpu_data());
      math::gpu::FromHalfNhwc(ctx, f16, kBatch, c.channels, hw, xh.gpu_data(), 0.0f,
                              x.mutable_gpu_data());
    });
    std::printf(
        "%-9s %3dx%3dx%2dx%2d->%4d tf32 fwd %.4f bwd %.4f float16 fwd %.4f bwd %.4f copies fwd "
        "%.4f bwd %.4f\n",
        c.name, kBatch, c.channels, c.size, c.size, c.outputs, ms[0][0], ms[0][1], ms[1][0],
        ms[1][1], copies_fwd, copies_bwd);
  }
}

int Run(int argc, char** argv) {
  const int gpu = argc > 1 ? std::atoi(argv[1]) : 0;
  SetLogLevel("warn");
  Context ctx(Device::Cuda(gpu), 1);
  const std::vector<Case> cases = {
      {"maxpool1",
       "type: 'Pooling' pooling_param { pool: MAX kernel_size: 3 stride: 2 }",
       {256, 96, 55, 55}},
      {"maxpool2",
       "type: 'Pooling' pooling_param { pool: MAX kernel_size: 3 stride: 2 }",
       {256, 256, 27, 27}},
      {"lrn1",
       "type: 'LRN' lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 }",
       {256, 96, 27, 27}},
      {"lrn2",
       "type: 'LRN' lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 }",
       {256, 256, 13, 13}},
      {"relu", "type: 'ReLU'", {64, 256, 56, 56}},
      {"softmax", "type: 'Softmax'", {256, 1000}},
  };
  for (const Case& c : cases) {
    caffe::LayerParameter param;
    io::ReadProtoFromTextString("name: '" + c.name + "' " + c.layer, "<bench>", &param);
    auto layer = CreateLayer(param, &ctx);
    Tensor x(c.shape), y;
    const std::vector<Tensor*> bottom = {&x}, top = {&y};
    layer->Initialize(bottom, top);
    math::gpu::RngUniform(ctx, x.count(), -1.0f, 1.0f, x.mutable_gpu_data());
    y.mutable_gpu_diff();
    math::gpu::RngUniform(ctx, y.count(), -1.0f, 1.0f, y.mutable_gpu_diff());
    const double ours_fwd = TimeMs(ctx, [&] { layer->Forward(bottom, top); });
    const double ours_bwd = TimeMs(ctx, [&] { layer->Backward(top, {true}, bottom); });
    const CudnnPasses theirs = CudnnFor(ctx, c, x, y);
    const double cudnn_fwd = TimeMs(ctx, theirs.forward);
    const double cudnn_bwd = TimeMs(ctx, theirs.backward);
    std::printf("%-9s %-16s ours fwd %.4f bwd %.4f cudnn fwd %.4f bwd %.4f\n", c.name.c_str(),
                x.ShapeString().c_str(), ours_fwd, ours_bwd, cudnn_fwd, cudnn_bwd);
  }
  TimeHalfCopies(gpu);
  return 0;
}

}  // namespace
}  // namespace cortado

int main(int argc, char** argv) {
  try {
    return cortado::Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
