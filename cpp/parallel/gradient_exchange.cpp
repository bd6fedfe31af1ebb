// SPDX-License-Identifier: Apache-2.0
#include "parallel/gradient_exchange.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "math/on_device.hpp"
#if CORTADO_WITH_CUDA
#include "core/cuda.hpp"
#endif

namespace cortado {
namespace {

void ScaleHost(float* data, size_t count, float scale) {
  for (size_t i = 0; i < count; ++i) data[i] *= scale;
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

GradientExchange::GradientExchange(comm::Communicator* comm, Net* net, Context* ctx, int iter_size,
                                   bool overlap, const ExchangeOptions& options)
    : comm_(comm),
      net_(net),
      ctx_(ctx),
      iter_size_(std::max(iter_size, 1)),
      overlap_(overlap && options.overlap && net->flat_diff() && net->FlatDiffIntact() &&
               (ctx->device().is_cpu() ||
                (options.overlap_gpu && comm->backend() != std::string("nccl")))),
      scale_(1.0f / static_cast<float>(comm->size())) {
  if (options.wire) {
    wire_ = *options.wire;
  } else if (ctx->device().is_cuda()) {
    wire_ = ctx->half_compute() == Context::HalfType::kBFloat16  ? comm::WireType::kBFloat16
            : ctx->half_compute() == Context::HalfType::kFloat16 ? comm::WireType::kFloat16
                                                                 : comm::WireType::kFloat32;
  }
  if (wire_ != comm::WireType::kFloat32) {
    if (comm->SupportsWire(wire_)) {
      CORTADO_LOG_INFO("Gradients travel between the ranks as {}", comm::WireTypeName(wire_));
    } else {
      CORTADO_LOG_WARN("the {} backend exchanges gradients in float32 only, not {}",
                       comm->backend(), comm::WireTypeName(wire_));
      wire_ = comm::WireType::kFloat32;
    }
  }
  for (const auto& layer : net->layers()) {
    if (std::string(layer->type()) != "BatchNorm" || layer->blobs().size() < 2) continue;
    statistics_.push_back(layer->blobs()[0].get());
    statistics_.push_back(layer->blobs()[1].get());
  }
  if (!overlap_) return;
  device_overlap_ = ctx->device().is_cuda();
  // Buckets from the end of the flat buffer (the last layers' parameters, which backward
  // completes first) to its start, cut at parameter offsets; together they cover the buffer.
  const std::vector<size_t>& offsets = net->learnable_param_offsets();
  const std::vector<int> first_layers = net->LearnableParamFirstLayers();
  std::vector<size_t> order(offsets.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return offsets[a] > offsets[b]; });
  const size_t bucket_floats = std::max<size_t>(options.bucket_bytes / sizeof(float), 1);
  Bucket bucket;
  bucket.end = net->flat_diff_count();
  bucket.ready_layer = static_cast<int>(net->layers().size());
  // A parameter that would take a bucket that holds something past the size starts the next.
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const bool holds_some = bucket.ready_layer < static_cast<int>(net->layers().size());
    if (holds_some && bucket.end - offsets[i] > bucket_floats) {
      bucket.begin = offsets[order[k - 1]];
      buckets_.push_back(bucket);
      bucket.end = bucket.begin;
      bucket.ready_layer = static_cast<int>(net->layers().size());
    }
    bucket.ready_layer = std::min(bucket.ready_layer, first_layers[i]);
  }
  if (!order.empty()) {
    bucket.begin = 0;
    buckets_.push_back(bucket);
  }
#if CORTADO_WITH_CUDA
  if (device_overlap_) {
    try {
      CORTADO_CUDA_CHECK(cudaSetDevice(ctx->device().id));
      cudaStream_t stream = nullptr;
      CORTADO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      copy_stream_ = stream;
      for (size_t i = 0; i < buckets_.size(); ++i) {
        cudaEvent_t event = nullptr;
        CORTADO_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
        bucket_ready_.push_back(event);
      }
      staging_.Reserve(net->flat_diff_count());
    } catch (...) {
      ReleaseDeviceOverlap();
      throw;
    }
  }
#endif
  net->AddAfterBackward([this](int layer) { OnLayerBackward(layer); });
  thread_ = std::thread([this] { RunCommThread(); });
  CORTADO_LOG_INFO(
      "Gradients of {} floats go in {} buckets of about {} MB, overlapped with backward",
      net->flat_diff_count(), buckets_.size(),
      static_cast<double>(options.bucket_bytes) / (1 << 20));
}

GradientExchange::~GradientExchange() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  ReleaseDeviceOverlap();
}

void GradientExchange::ReleaseDeviceOverlap() noexcept {
#if CORTADO_WITH_CUDA
  for (void* event : bucket_ready_) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  bucket_ready_.clear();
  if (copy_stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(copy_stream_));
  copy_stream_ = nullptr;
#endif
}

void GradientExchange::OnLayerBackward(int layer) {
  // Backward reports layers in descending order within a pass: a report at or above the last
  // one starts a new pass.
  if (layer >= last_layer_) {
    ++pass_;
    if (pass_ == iter_size_) last_pass_started_ = Seconds();
    if (pass_ == 1) {
      iteration_overlaps_ = net_->FlatDiffIntact();
      if (!iteration_overlaps_) {
        CORTADO_LOG_WARN_ONCE(
            "{}: the gradients are no longer one buffer; exchanging them after backward",
            net_->name());
      }
    }
  }
  last_layer_ = layer;
  if (pass_ == iter_size_ && iteration_overlaps_) StartBucketsUpTo(layer);
}

void GradientExchange::StartBucketsUpTo(int layer) {
  if (next_bucket_ == buckets_.size() || buckets_[next_bucket_].ready_layer < layer) return;
  if (device_overlap_) {
    if (device_flat_ == nullptr) {
      device_flat_ = net_->mutable_flat_gpu_diff();
      flat_ = staging_.Reserve(net_->flat_diff_count());
    }
  } else if (flat_ == nullptr) {
    flat_ = net_->mutable_flat_cpu_diff();
  }
  size_t queued = next_bucket_;
  while (queued < buckets_.size() && buckets_[queued].ready_layer >= layer) ++queued;
#if CORTADO_WITH_CUDA
  // Each bucket's gradients are complete once the kernels queued so far have run.
  for (size_t i = next_bucket_; device_overlap_ && i < queued; ++i) {
    CORTADO_CUDA_CHECK(
        cudaEventRecord(static_cast<cudaEvent_t>(bucket_ready_[i]), cuda::Stream(*ctx_)));
  }
#endif
  next_bucket_ = queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued_ = queued;
  }
  cv_.notify_all();
}

void GradientExchange::RunCommThread() {
  size_t next = 0;  // the next bucket of the iteration to exchange
#if CORTADO_WITH_CUDA
  if (device_overlap_) cudaSetDevice(ctx_->device().id);
#endif
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || next < queued_; });
      if (stop_) return;
    }
    // A failed communicator fails every later bucket at once: each is still counted, so that
    // Finish sees the iteration end.
    const Bucket& bucket = buckets_[next];
    const double start = Seconds();
    try {
      const size_t count = bucket.end - bucket.begin;
#if CORTADO_WITH_CUDA
      auto copy = [&](float* to, const float* from, cudaMemcpyKind kind) {
        auto stream = static_cast<cudaStream_t>(copy_stream_);
        CORTADO_CUDA_CHECK(cudaMemcpyAsync(to, from, count * sizeof(float), kind, stream));
        CORTADO_CUDA_CHECK(cudaStreamSynchronize(stream));
      };
      if (device_overlap_) {
        CORTADO_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(bucket_ready_[next])));
        copy(flat_ + bucket.begin, device_flat_ + bucket.begin, cudaMemcpyDeviceToHost);
      }
#endif
      comm_->AllReduceAs(flat_ + bucket.begin, count, wire_);
      ScaleHost(flat_ + bucket.begin, count, scale_);
#if CORTADO_WITH_CUDA
      if (device_overlap_) {
        copy(device_flat_ + bucket.begin, flat_ + bucket.begin, cudaMemcpyHostToDevice);
      }
#endif
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      exchange_seconds_ += Seconds() - start;
      done_ = ++next;
      if (next == buckets_.size()) {
        next = 0;
        queued_ = 0;
      }
    }
    cv_.notify_all();
  }
}

void GradientExchange::ReduceHost(float* data, size_t count, comm::WireType wire) {
  comm_->AllReduceAs(data, count, wire);
  ScaleHost(data, count, scale_);
}

void GradientExchange::Finish(const std::vector<DeviceBuffer>& gradients) {
  const bool overlapped = iteration_overlaps_ && pass_ == iter_size_;
  pass_ = 0;
  last_layer_ = -1;
  iteration_overlaps_ = false;
  if (overlapped) {
    CORTADO_CHECK(
        gradients.size() == 1 && gradients[0].data == (device_overlap_ ? device_flat_ : flat_),
        "the overlapped exchange expects the flat gradient buffer");
    StartBucketsUpTo(-1);  // every bucket left
    const double waited_from = Seconds();
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_ == buckets_.size() || error_ != nullptr; });
    if (done_ != buckets_.size()) {
      // A bucket failed: end the one in flight, and the rest fail at once.
      lock.unlock();
      comm_->Abort("an earlier gradient bucket failed");
      lock.lock();
      cv_.wait(lock, [&] { return done_ == buckets_.size(); });
    }
    done_ = 0;
    next_bucket_ = 0;
    if (error_) std::rethrow_exception(error_);
    // What the exchange cost this iteration: its buckets' allreduces in all, and the part of it
    // that backward did not hide (root waiting here).
    CORTADO_LOG_DEBUG(
        "exchange: {} buckets in {:.1f} ms, {:.1f} ms of it after backward ({:.1f} ms from the "
        "first layer's gradients)",
        buckets_.size(), exchange_seconds_ * 1e3, (Seconds() - waited_from) * 1e3,
        (waited_from - last_pass_started_) * 1e3);
    exchange_seconds_ = 0;
    lock.unlock();
    AverageStatistics();
    return;
  }
  next_bucket_ = 0;
  const bool device_memory = comm_->backend() == std::string("nccl");
  for (const DeviceBuffer& buffer : gradients) {
    const size_t count = static_cast<size_t>(buffer.count);
    if (ctx_->device().is_cpu() || count == 0) {
      ReduceHost(buffer.data, count, wire_);
      continue;
    }
#if CORTADO_WITH_CUDA
    if (device_memory) {
      // The backend works on device memory, after what root's stream queued.
      ctx_->Synchronize();
      comm_->AllReduceAs(buffer.data, count, wire_);
      math::dev::Scale(*ctx_, buffer.count, scale_, buffer.data);
      continue;
    }
    float* staged = staging_.Reserve(count);
    cudaStream_t stream = cuda::Stream(*ctx_);
    CORTADO_CUDA_CHECK(cudaMemcpyAsync(staged, buffer.data, count * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream));
    CORTADO_CUDA_CHECK(cudaStreamSynchronize(stream));
    ReduceHost(staged, count, wire_);
    CORTADO_CUDA_CHECK(cudaMemcpyAsync(buffer.data, staged, count * sizeof(float),
                                       cudaMemcpyHostToDevice, stream));
    CORTADO_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
    (void)device_memory;
    CORTADO_THROW(kUnimplemented, "device gradients in a build without CUDA");
#endif
  }
  AverageStatistics();
}

GradientExchange::PinnedStaging::~PinnedStaging() {
#if CORTADO_WITH_CUDA
  if (data_ != nullptr) cudaFreeHost(data_);
#else
  delete[] data_;
#endif
}

float* GradientExchange::PinnedStaging::Reserve(size_t count) {
  if (count <= capacity_) return data_;
#if CORTADO_WITH_CUDA
  if (data_ != nullptr) cudaFreeHost(data_);
  data_ = nullptr;
  capacity_ = 0;
  CORTADO_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(float)));
#else
  delete[] data_;
  data_ = nullptr;
  capacity_ = 0;
  data_ = new float[count];
#endif
  capacity_ = count;
  return data_;
}

void GradientExchange::AverageStatistics() {
  if (statistics_.empty()) return;
  size_t total = 0;
  for (const Tensor* t : statistics_) total += static_cast<size_t>(t->count());
  statistics_staging_.resize(total);
  float* at = statistics_staging_.data();
  for (const Tensor* t : statistics_) at = std::copy_n(t->cpu_data(), t->count(), at);
  // Statistics, not gradients: summed in float32 whatever the gradients travel as.
  ReduceHost(statistics_staging_.data(), total, comm::WireType::kFloat32);
  const float* from = statistics_staging_.data();
  for (Tensor* t : statistics_) {
    std::copy_n(from, t->count(), t->mutable_cpu_data());
    from += t->count();
  }
}

void GradientExchange::AllReduceHost(float* values, size_t n) { comm_->AllReduce(values, n); }

void GradientExchange::Abort(const std::string& reason) noexcept {
  comm_->Abort(reason);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) {
      try {
        CORTADO_THROW(kAborted, "{}", reason);
      } catch (...) {
        error_ = std::current_exception();
      }
    }
  }
  cv_.notify_all();
}

}  // namespace cortado
