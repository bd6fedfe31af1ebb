// SPDX-License-Identifier: Apache-2.0
// Cortado's own GPU kernels for pooling, LRN, ReLU and softmax beside cuDNN's for the same
// shapes (CaffeNet's at batch 256, ResNet-50's ReLU at batch 64), forward and backward: the
// evidence for which of the two the layers use. Each pass is timed with CUDA events over 20
// runs after 3 warm-up runs, on random inputs. Then mixed precision's cost: ResNet-50's
// convolution shapes at batch 128 as Convolution layers in TF32 and in float16 (which copies its
// operands into NHWC float16 and back), beside the time of those copies alone. Last, the passes
// over 16-bit blobs that stream memory (the half blobs' layout copies and BatchNorm), in device
// copies of the same tensor (TimeHalfBlobPasses).
//
//   cortado_cudnn_ops_bench [gpu=0]
// prints one line per case: "<case> <shape> ours fwd <ms> bwd <ms> cudnn fwd <ms> bwd <ms>",
// then one per convolution: "<conv> tf32 fwd <ms> bwd <ms> float16 fwd <ms> bwd <ms> copies
// fwd <ms> bwd <ms>", then one per 16-bit blob shape.
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
#include "layers/batch_norm_layer.hpp"
#include "layers/layer.hpp"
#include "layers/scale_layer.hpp"
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

// The passes over 16-bit blobs that stream memory, at ResNet-50's shapes (batch 128, float16
// blobs): the NCHW <-> NHWC copies around a convolution on tensor cores, and BatchNorm with its
// Scale and ReLU fused, forward and backward. Each beside a device-to-device copy of the same
// tensor (cudaMemcpyAsync: its bytes read once and written once), the memory's own rate: "copies"
// is a pass's time in such copies, and a pass that reads k tensors and writes l cannot do better
// than (k + l) / 2 of them.
void TimeHalfBlobPasses(int gpu) {
  struct Shape {
    const char* name;
    int channels, size;
  };
  const Shape shapes[] = {{"res2a", 64, 56},
                          {"res2c", 256, 56},
                          {"res3", 512, 28},
                          {"res4", 1024, 14},
                          {"res5", 2048, 7}};
  constexpr int kBatch = 128;
  const HalfType f16 = HalfType::kFloat16;
  for (const Shape& sh : shapes) {
    Context ctx(Device::Cuda(gpu), 1);
    ctx.MakeCurrent();
    ctx.set_half_compute(f16);
    const int hw = sh.size * sh.size;
    const std::vector<int> shape = {kBatch, sh.channels, sh.size, sh.size};
    Tensor a(shape), b(shape);
    a.set_home_type(f16);
    b.set_home_type(f16);
    void* ap = a.mutable_gpu_half_data(f16);
    void* bp = b.mutable_gpu_half_data(f16);
    const size_t bytes = 2 * static_cast<size_t>(a.count());
    const cudaStream_t stream = cuda::Stream(ctx);
    const double copy = TimeMs(ctx, [&] {
      CORTADO_CUDA_CHECK(cudaMemcpyAsync(bp, ap, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    const double to_nhwc =
        TimeMs(ctx, [&] { math::gpu::HalfNchwToNhwc(ctx, f16, kBatch, sh.channels, hw, ap, bp); });
    const double to_nchw = TimeMs(ctx, [&] {
      math::gpu::HalfNhwcToNchw(ctx, f16, kBatch, sh.channels, hw, ap, nullptr, bp);
    });
    // BatchNorm + Scale + ReLU as Net fuses them, on 16-bit blobs.
    caffe::LayerParameter param;
    io::ReadProtoFromTextString(
        "name: 'bn' type: 'BatchNorm' batch_norm_param { use_global_stats: false }", "<bench>",
        &param);
    auto bn_layer = CreateLayer(param, &ctx);
    auto* bn = static_cast<BatchNormLayer*>(bn_layer.get());
    caffe::LayerParameter scale_param;
    io::ReadProtoFromTextString("name: 'scale' type: 'Scale' scale_param { bias_term: true }",
                                "<bench>", &scale_param);
    auto scale_layer = CreateLayer(scale_param, &ctx);
    auto* scale = static_cast<ScaleLayer*>(scale_layer.get());
    Tensor x(shape), y(shape);
    x.set_home_type(f16);
    y.set_home_type(f16);
    const std::vector<Tensor*> bottom = {&x}, top = {&y};
    bn->Initialize(bottom, top);
    scale->Initialize(top, top);
    bn->FuseScale(scale, /*scale_backward=*/true, /*relu=*/true, 0.0f);
    math::gpu::RngUniform(ctx, x.count(), -1.0f, 1.0f, x.mutable_gpu_data());
    math::gpu::RngUniform(ctx, y.count(), -1.0f, 1.0f, y.mutable_gpu_diff());
    const double bn_fwd = TimeMs(ctx, [&] { bn->Forward(bottom, top); });
    const double bn_bwd = TimeMs(ctx, [&] { bn->Backward(top, {true}, bottom); });
    std::printf(
        "%-6s %3dx%4dx%2dx%2d float16 copy %.4f ms (%.0f GB/s) | in copies: to NHWC %.2f, to NCHW "
        "%.2f, BatchNorm+Scale+ReLU fwd %.2f bwd %.2f\n",
        sh.name, kBatch, sh.channels, sh.size, sh.size, copy, 2.0 * bytes / copy / 1e6,
        to_nhwc / copy, to_nchw / copy, bn_fwd / copy, bn_bwd / copy);
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
  TimeHalfBlobPasses(gpu);
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
