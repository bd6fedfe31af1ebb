// SPDX-License-Identifier: Apache-2.0
// 2-D convolution on cuDNN behind math::ConvolutionPlan (math/convolution.hpp).
#include <cstdlib>
#include <vector>

#include "core/cuda.hpp"
#include "core/logging.hpp"
#include "math/convolution.hpp"

namespace cortado::math {

#if CORTADO_WITH_CUDNN
namespace {

size_t WorkspaceLimit() {
  const char* env = std::getenv("CORTADO_CUDNN_WORKSPACE_MB");
  const long mb = env != nullptr ? std::strtol(env, nullptr, 10) : 1024;
  return static_cast<size_t>(mb > 0 ? mb : 0) << 20;
}

// Device scratch freed on scope exit (the tensors the algorithm search writes into).
class Scratch {
 public:
  explicit Scratch(size_t bytes)
      : ptr_(cuda::Malloc(bytes, "the cuDNN algorithm search")), bytes_(bytes) {}
  ~Scratch() { cuda::Free(ptr_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class CudnnConvolution final : public ConvolutionPlan {
 public:
  CudnnConvolution(Context& ctx, const ConvolutionShape& s) : ctx_(ctx), shape_(s) {
    auto& res = cuda::Get(ctx_);
    handle_ = res.cudnn;
    CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&src_));
    CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&dst_));
    CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_));
    CORTADO_CUDNN_CHECK(cudnnCreateFilterDescriptor(&filter_));
    CORTADO_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    CORTADO_CUDNN_CHECK(cudnnSetTensor4dDescriptor(src_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.num,
                                                   s.channels, s.height, s.width));
    CORTADO_CUDNN_CHECK(cudnnSetTensor4dDescriptor(dst_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.num,
                                                   s.num_output, s.output_h(), s.output_w()));
    CORTADO_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                                   s.num_output, 1, 1));
    CORTADO_CUDNN_CHECK(cudnnSetFilter4dDescriptor(filter_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                   s.num_output, s.channels / s.group, s.kernel_h,
                                                   s.kernel_w));
    CORTADO_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, s.pad_h, s.pad_w, s.stride_h,
                                                        s.stride_w, s.dilation_h, s.dilation_w,
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CORTADO_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_, s.group));
    CORTADO_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_, CUDNN_FMA_MATH));
    ChooseAlgorithms();
  }

  ~CudnnConvolution() override {
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyFilterDescriptor(filter_);
    cudnnDestroyTensorDescriptor(bias_);
    cudnnDestroyTensorDescriptor(dst_);
    cudnnDestroyTensorDescriptor(src_);
  }

  void Forward(const float* src, const float* weights, const float* bias, float* dst) override {
    const float one = 1.0f, zero = 0.0f;
    void* workspace = cuda::Get(ctx_).Workspace(forward_bytes_);
    CORTADO_CUDNN_CHECK(cudnnConvolutionForward(handle_, &one, src_, src, filter_, weights, conv_,
                                                forward_algo_, workspace, forward_bytes_, &zero,
                                                dst_, dst));
    if (shape_.bias && bias != nullptr) {
      CORTADO_CUDNN_CHECK(cudnnAddTensor(handle_, &one, bias_, bias, &one, dst_, dst));
    }
  }

  void BackwardData(const float* diff_dst, const float* weights, float* diff_src) override {
    const float one = 1.0f, zero = 0.0f;
    void* workspace = cuda::Get(ctx_).Workspace(data_bytes_);
    CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_, &one, filter_, weights, dst_,
                                                     diff_dst, conv_, data_algo_, workspace,
                                                     data_bytes_, &zero, src_, diff_src));
  }

  void BackwardWeights(const float* src, const float* diff_dst, float* diff_weights,
                       float* diff_bias) override {
    const float one = 1.0f;
    if (diff_weights != nullptr) {
      void* workspace = cuda::Get(ctx_).Workspace(filter_bytes_);
      CORTADO_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
          handle_, &one, src_, src, dst_, diff_dst, conv_, filter_algo_, workspace, filter_bytes_,
          &one, filter_, diff_weights));
    }
    if (shape_.bias && diff_bias != nullptr) {
      CORTADO_CUDNN_CHECK(
          cudnnConvolutionBackwardBias(handle_, &one, dst_, diff_dst, &one, bias_, diff_bias));
    }
  }

  std::string Name() const override {
    return fmt::format("cuDNN fwd {} bwd-data {} bwd-filter {}", static_cast<int>(forward_algo_),
                       static_cast<int>(data_algo_), static_cast<int>(filter_algo_));
  }

 private:
  // Times cuDNN's candidates for each pass on scratch tensors of this shape and keeps the
  // fastest one whose workspace fits the limit.
  void ChooseAlgorithms() {
    const size_t limit = WorkspaceLimit();
    const ConvolutionShape& s = shape_;
    const size_t src_count = static_cast<size_t>(s.num) * s.channels * s.height * s.width;
    const size_t dst_count =
        static_cast<size_t>(s.num) * s.num_output * s.output_h() * s.output_w();
    const size_t filter_count =
        static_cast<size_t>(s.num_output) * (s.channels / s.group) * s.kernel_h * s.kernel_w;
    Scratch src(src_count * sizeof(float)), dst(dst_count * sizeof(float)),
        filter(filter_count * sizeof(float));
    // Random-free but non-zero contents: zeros can favour algorithms unrealistically.
    CORTADO_CUDA_CHECK(
        cudaMemsetAsync(src.get(), 0x3c, src_count * sizeof(float), cuda::Get(ctx_).stream));
    CORTADO_CUDA_CHECK(
        cudaMemsetAsync(dst.get(), 0x3c, dst_count * sizeof(float), cuda::Get(ctx_).stream));
    CORTADO_CUDA_CHECK(
        cudaMemsetAsync(filter.get(), 0x3c, filter_count * sizeof(float), cuda::Get(ctx_).stream));
    Scratch search_space(limit);
    void* workspace = search_space.get();
    constexpr int kCandidates = 8;
    int found = 0;

    cudnnConvolutionFwdAlgoPerf_t fwd[kCandidates];
    CORTADO_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
        handle_, src_, src.get(), filter_, filter.get(), conv_, dst_, dst.get(), kCandidates,
        &found, fwd, workspace, limit));
    for (int i = 0; i < found; ++i) {
      if (fwd[i].status == CUDNN_STATUS_SUCCESS && fwd[i].memory <= limit) {
        forward_algo_ = fwd[i].algo;
        forward_bytes_ = fwd[i].memory;
        break;
      }
    }
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[kCandidates];
    CORTADO_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        handle_, filter_, filter.get(), dst_, dst.get(), conv_, src_, src.get(), kCandidates,
        &found, bwd_data, workspace, limit));
    for (int i = 0; i < found; ++i) {
      if (bwd_data[i].status == CUDNN_STATUS_SUCCESS && bwd_data[i].memory <= limit) {
        data_algo_ = bwd_data[i].algo;
        data_bytes_ = bwd_data[i].memory;
        break;
      }
    }
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[kCandidates];
    CORTADO_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        handle_, src_, src.get(), dst_, dst.get(), conv_, filter_, filter.get(), kCandidates,
        &found, bwd_filter, workspace, limit));
    for (int i = 0; i < found; ++i) {
      if (bwd_filter[i].status == CUDNN_STATUS_SUCCESS && bwd_filter[i].memory <= limit) {
        filter_algo_ = bwd_filter[i].algo;
        filter_bytes_ = bwd_filter[i].memory;
        break;
      }
    }
    CORTADO_CUDA_CHECK(cudaStreamSynchronize(cuda::Get(ctx_).stream));
    CORTADO_LOG_DEBUG("convolution {}x{}x{}x{} -> {}: {}", s.num, s.channels, s.height, s.width,
                      s.num_output, Name());
  }

  Context& ctx_;
  ConvolutionShape shape_;
  cudnnHandle_t handle_ = nullptr;
  cudnnTensorDescriptor_t src_ = nullptr, dst_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t filter_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t forward_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnConvolutionBwdFilterAlgo_t filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  size_t forward_bytes_ = 0, data_bytes_ = 0, filter_bytes_ = 0;
};

}  // namespace

std::unique_ptr<ConvolutionPlan> MakeGpuConvolution(Context& ctx, const ConvolutionShape& shape) {
  return std::make_unique<CudnnConvolution>(ctx, shape);
}

#else

std::unique_ptr<ConvolutionPlan> MakeGpuConvolution(Context& /*ctx*/,
                                                    const ConvolutionShape& /*shape*/) {
  return nullptr;
}

#endif

}  // namespace cortado::math
