// SPDX-License-Identifier: Apache-2.0
// Cortado's own GPU kernels for pooling, LRN, ReLU and softmax beside cuDNN's for the same
// shapes (CaffeNet's at batch 256, ResNet-50's ReLU at batch 64), forward and backward: the
// evidence for which of the two the layers use. Each pass is timed with CUDA events over 20
// runs after 3 warm-up runs, on random inputs.
//
//   cortado_cudnn_ops_bench [gpu=0]
// prints one line per case: "<case> <shape> ours fwd <ms> bwd <ms> cudnn fwd <ms> bwd <ms>".
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
