// SPDX-License-Identifier: Apache-2.0
// Accuracy on the GPU: one thread per labelled position decides whether its label is a hit
// (the same rule as accuracy_layer.cpp) and adds to integer counters (integer atomics, so the
// totals are exact and repeat run to run); one small kernel then writes the tops. The first
// out-of-range label position is kept so that Forward throws the CPU pass's error; reading it
// back is the pass's only host round trip (one int).
#include <climits>

#include "core/cuda.hpp"
#include "layers/accuracy_layer.hpp"

namespace cortado {
namespace {

// Counters in the workspace: hits, labelled positions, first bad position, then per class the
// labels seen and the hits.
constexpr int kHits = 0, kCount = 1, kBadPosition = 2, kPerClass = 3;

__global__ void ResetCounters(int n, int* counters) {
  CORTADO_KERNEL_LOOP(i, n) counters[i] = i == kBadPosition ? INT_MAX : 0;
}

__global__ void CountHits(int positions, int classes, int inner, int top_k, bool has_ignore,
                          int ignore_label, const float* scores, const float* labels,
                          int* counters) {
  CORTADO_KERNEL_LOOP(p, positions) {
    const int label = static_cast<int>(labels[p]);
    if (has_ignore && label == ignore_label) continue;
    if (label < 0 || label >= classes) {
      atomicMin(&counters[kBadPosition], static_cast<int>(p));
      continue;
    }
    const int64_t i = p / inner, j = p - i * inner;
    const float* s = scores + i * classes * inner + j;
    const float truth = s[static_cast<int64_t>(label) * inner];
    // Classes scoring at least as high as the true one, the true one included.
    int at_least = 0;
    for (int c = 0; c < classes && at_least <= top_k; ++c) {
      at_least += s[static_cast<int64_t>(c) * inner] >= truth ? 1 : 0;
    }
    int* label_counts = counters + kPerClass;
    atomicAdd(&label_counts[label], 1);
    atomicAdd(&counters[kCount], 1);
    if (at_least <= top_k) {
      atomicAdd(&counters[kHits], 1);
      atomicAdd(&label_counts[classes + label], 1);
    }
  }
}

__global__ void WriteAccuracy(int classes, const int* counters, float* accuracy,
                              float* class_accuracy) {
  CORTADO_KERNEL_LOOP(c, classes + 1) {
    if (c == classes) {
      const int count = counters[kCount];
      *accuracy =
          count == 0 ? 0.0f : static_cast<float>(counters[kHits]) / static_cast<float>(count);
    } else if (class_accuracy != nullptr) {
      const int* label_counts = counters + kPerClass;
      class_accuracy[c] = label_counts[c] == 0 ? 0.0f
                                               : static_cast<float>(label_counts[classes + c]) /
                                                     static_cast<float>(label_counts[c]);
    }
  }
}

}  // namespace

void AccuracyLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                               const std::vector<Tensor*>& top) {
  cuda::Resources& res = cuda::Get(*ctx_);
  const int num_counters = kPerClass + 2 * classes_;
  int* counters = static_cast<int*>(res.Workspace(sizeof(int) * num_counters));
  ResetCounters<<<cuda::Blocks(num_counters), cuda::kThreads, 0, res.stream>>>(num_counters,
                                                                               counters);
  CORTADO_CUDA_CHECK_LAUNCH();
  const int positions = outer_num_ * inner_num_;
  const float* labels = bottom[1]->gpu_data();
  if (positions > 0) {
    CountHits<<<cuda::Blocks(positions), cuda::kThreads, 0, res.stream>>>(
        positions, classes_, inner_num_, top_k_, has_ignore_label_, ignore_label_,
        bottom[0]->gpu_data(), labels, counters);
    CORTADO_CUDA_CHECK_LAUNCH();
  }
  WriteAccuracy<<<cuda::Blocks(classes_ + 1), cuda::kThreads, 0, res.stream>>>(
      classes_, counters, top[0]->mutable_gpu_data(),
      top.size() > 1 ? top[1]->mutable_gpu_data() : nullptr);
  CORTADO_CUDA_CHECK_LAUNCH();
  int bad_position = INT_MAX;
  CORTADO_CUDA_CHECK(cudaMemcpyAsync(&bad_position, counters + kBadPosition, sizeof(int),
                                     cudaMemcpyDeviceToHost, res.stream));
  CORTADO_CUDA_CHECK(cudaStreamSynchronize(res.stream));
  if (bad_position != INT_MAX) {
    float value = 0.0f;
    CORTADO_CUDA_CHECK(cudaMemcpyAsync(&value, labels + bad_position, sizeof(float),
                                       cudaMemcpyDeviceToHost, res.stream));
    CORTADO_CUDA_CHECK(cudaStreamSynchronize(res.stream));
    CORTADO_THROW(kInvalidArgument, "{}: label value {} at position {} is outside [0, {})",
                  Describe(), static_cast<int>(value), bad_position, classes_);
  }
}

void AccuracyLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                const std::vector<bool>& propagate_down,
                                const std::vector<Tensor*>& bottom) {
  BackwardCpu(top, propagate_down, bottom);  // throws when asked for the scores' gradient
}

}  // namespace cortado
