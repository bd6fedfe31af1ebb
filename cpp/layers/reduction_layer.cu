// SPDX-License-Identifier: Apache-2.0
// Reduction on the GPU. Forward: one block per row, each thread summing a strided part of the
// row in double, then a fixed-order tree over the block (so a run repeats bit for bit).
// Backward: one thread per bottom element.
#include "core/cuda.hpp"
#include "layers/reduction_layer.hpp"

namespace cortado {
namespace {

constexpr int kSumThreads = 256;

// op: 0 sum, 1 absolute sum, 2 sum of squares.
__global__ void ReductionForward(int dim, const float* x, int op, float coeff, float* y) {
  __shared__ double partial[kSumThreads];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * dim;
  double sum = 0.0;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    const double v = row[j];
    sum += op == 1 ? fabs(v) : (op == 2 ? v * v : v);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[blockIdx.x] = static_cast<float>(partial[0]) * coeff;
}

__global__ void ReductionBackward(int64_t n, int dim, const float* x, const float* dy, int op,
                                  float coeff, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float g = dy[i / dim] * coeff;
    if (op == 1) {
      const float v = x[i];
      dx[i] = g * static_cast<float>((v > 0.0f) - (v < 0.0f));
    } else if (op == 2) {
      dx[i] = (2.0f * g) * x[i];
    } else {
      dx[i] = g;
    }
  }
}

int OpCode(caffe::ReductionParameter::ReductionOp op) {
  switch (op) {
    case caffe::ReductionParameter::ASUM:
      return 1;
    case caffe::ReductionParameter::SUMSQ:
      return 2;
    default:  // SUM, MEAN (MEAN's 1/count is in coeff)
      return 0;
  }
}

}  // namespace

void ReductionLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  if (num_ == 0) return;
  ReductionForward<<<num_, kSumThreads, 0, cuda::Stream(*ctx_)>>>(
      dim_, bottom[0]->gpu_data(), OpCode(op_), coeff_, top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ReductionLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = bottom[0]->count();
  if (n == 0) return;
  const float* x = BackwardReadsBottomData(0) ? bottom[0]->gpu_data() : nullptr;
  ReductionBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, dim_, x, top[0]->gpu_diff(), OpCode(op_), coeff_, bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
