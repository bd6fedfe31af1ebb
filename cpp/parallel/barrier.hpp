// SPDX-License-Identifier: Apache-2.0
// Barrier: a reusable rendezvous of a fixed number of threads that can be aborted, so that a
// thread that fails never leaves the others waiting for it (std::barrier cannot be aborted).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace cortado {

class Barrier {
 public:
  // A barrier for `count` (>= 1) threads.
  explicit Barrier(int count);
  Barrier(const Barrier&) = delete;
  Barrier& operator=(const Barrier&) = delete;

  // Blocks until `count` threads have called Wait since the last time the barrier opened, then
  // returns in all of them. What a thread wrote before its Wait is visible to every thread after
  // theirs. Throws kAborted (at once, or when woken) once Abort has been called.
  void Wait();
  // Makes every pending and future Wait throw kAborted; idempotent, never throws.
  void Abort() noexcept;
  bool aborted() const;

 private:
  const int count_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace cortado
