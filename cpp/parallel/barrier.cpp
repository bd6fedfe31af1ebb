// SPDX-License-Identifier: Apache-2.0
#include "parallel/barrier.hpp"

#include "core/error.hpp"

namespace cortado {

Barrier::Barrier(int count) : count_(count) {
  CORTADO_CHECK_GE(count, 1, "a barrier needs at least one thread");
}

void Barrier::Wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) CORTADO_THROW(kAborted, "another replica failed: this one stops too");
  const uint64_t generation = generation_;
  if (++waiting_ == count_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return aborted_ || generation_ != generation; });
  if (generation_ == generation) {
    CORTADO_THROW(kAborted, "another replica failed: this one stops too");
  }
}

void Barrier::Abort() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }
  cv_.notify_all();
}

bool Barrier::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

}  // namespace cortado
