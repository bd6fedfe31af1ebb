// SPDX-License-Identifier: Apache-2.0
// Multi-tensor element-wise kernels (math/gpu.hpp): the pointers and sizes of the tensors'
// pieces travel in the kernel's parameters, kMultiTensorBatch at a time; blockIdx.y picks the
// piece and the blocks along x stride over its elements.
#include <algorithm>
#include <vector>

#include "core/cuda.hpp"
#include "math/gpu.hpp"

namespace cortado::math::gpu {
namespace {

struct ZeroBatch {
  float* ptr[kMultiTensorBatch];
  int count[kMultiTensorBatch];
};

struct SgdBatch {
  float* data[kMultiTensorBatch];
  float* diff[kMultiTensorBatch];
  float* history[kMultiTensorBatch];
  int count[kMultiTensorBatch];
  float rate[kMultiTensorBatch];
  float decay[kMultiTensorBatch];
};
// Kernel parameters are limited to 4 KiB on older toolkits.
static_assert(sizeof(SgdBatch) + 2 * sizeof(float) <= 4096, "SgdBatch exceeds 4 KiB");

__global__ void ZeroKernel(ZeroBatch b) {
  const int t = blockIdx.y;
  float* p = b.ptr[t];
  const int n = b.count[t];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    p[i] = 0.0f;
  }
}

__global__ void SgdKernel(SgdBatch b, float momentum, float diff_scale) {
  const int t = blockIdx.y;
  float* data = b.data[t];
  float* diff = b.diff[t];
  float* history = b.history[t];
  const int n = b.count[t];
  const float rate = b.rate[t];
  const float decay = b.decay[t];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    float g = diff[i] * diff_scale;
    g = decay * data[i] + g;
    const float h = rate * g + momentum * history[i];
    history[i] = h;
    diff[i] = h;
    data[i] = data[i] - h;
  }
}

// Tensors are cut into pieces of at most kPiece elements, sorted by size (largest first) so that
// each launch holds pieces of similar sizes, and launched kMultiTensorBatch pieces at a time
// with enough blocks along x for the largest piece of the batch (each thread then handles about
// four elements). Independent elements: the order of the pieces does not matter.
constexpr int kPiece = 1 << 20;

struct Piece {
  size_t tensor;
  int offset;
  int count;
};

// The pieces of `tensors` (anything with an int `count`; empty ones have none).
template <typename T>
std::vector<Piece> Pieces(const std::vector<T>& tensors) {
  std::vector<Piece> pieces;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const int count = tensors[t].count;
    for (int offset = 0; offset < count; offset += kPiece) {
      pieces.push_back({t, offset, std::min(kPiece, count - offset)});
    }
  }
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const Piece& a, const Piece& b) { return a.count > b.count; });
  return pieces;
}

// Calls launch(first, last, grid) for each batch of pieces [first, last).
template <typename Launch>
void ForEachBatch(const std::vector<Piece>& pieces, Launch launch) {
  for (size_t first = 0; first < pieces.size(); first += kMultiTensorBatch) {
    const size_t last = std::min(pieces.size(), first + kMultiTensorBatch);
    const int per_block = cuda::kThreads * 4;
    const int blocks = std::clamp((pieces[first].count + per_block - 1) / per_block, 1, 1024);
    launch(first, last, dim3(blocks, static_cast<unsigned>(last - first)));
  }
}

}  // namespace

void ZeroMany(Context& ctx, const std::vector<DeviceSpan>& tensors) {
  const std::vector<Piece> pieces = Pieces(tensors);
  ForEachBatch(pieces, [&](size_t first, size_t last, dim3 grid) {
    ZeroBatch batch{};
    for (size_t i = first; i < last; ++i) {
      const Piece& p = pieces[i];
      batch.ptr[i - first] = tensors[p.tensor].ptr + p.offset;
      batch.count[i - first] = p.count;
    }
    ZeroKernel<<<grid, cuda::kThreads, 0, cuda::Stream(ctx)>>>(batch);
    CORTADO_CUDA_CHECK_LAUNCH();
  });
}

void SgdUpdateMany(Context& ctx, const std::vector<SgdTensor>& tensors, float momentum,
                   float diff_scale) {
  const std::vector<Piece> pieces = Pieces(tensors);
  ForEachBatch(pieces, [&](size_t first, size_t last, dim3 grid) {
    SgdBatch batch{};
    for (size_t i = first; i < last; ++i) {
      const Piece& p = pieces[i];
      const SgdTensor& t = tensors[p.tensor];
      const size_t k = i - first;
      batch.data[k] = t.data + p.offset;
      batch.diff[k] = t.diff + p.offset;
      batch.history[k] = t.history + p.offset;
      batch.count[k] = p.count;
      batch.rate[k] = t.rate;
      batch.decay[k] = t.decay;
    }
    SgdKernel<<<grid, cuda::kThreads, 0, cuda::Stream(ctx)>>>(batch, momentum, diff_scale);
    CORTADO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace cortado::math::gpu
