// Completion<T>: a value set once, and the callbacks waiting for it — what Work (a collective's
// outcome) and Future (a hook's tensor) are built on.
//
// Callbacks run on the completing thread before completion is published, so once Wait returns,
// every callback — and whatever it chained — has run; a callback may add more, which run too.
// Thread-safe. std::mutex, not absl::Mutex: ThreadSanitizer sees pthread synchronisation but
// not that of Debian's uninstrumented Abseil.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "comm/spin_wait.h"

namespace ddpkit::comm {

template <typename T>
class Completion {
 public:
  using Clock = std::chrono::steady_clock;
  using Callback = std::function<void(const T&)>;

  bool IsCompleted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return value_.has_value();
  }

  // The value, once complete.
  std::optional<T> Peek() const {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }

  // Blocks until complete (a short spin first where `spin`: comm/spin_wait.h). Wait(timeout):
  // nullopt when `timeout` passes first.
  T Wait(bool spin = true) const {
    if (spin) SpinUntil([this] { return published_.load(std::memory_order_acquire); });
    std::unique_lock<std::mutex> lock(mu_);
    completed_cv_.wait(lock, [this] { return value_.has_value(); });
    return *value_;
  }
  std::optional<T> Wait(absl::Duration timeout, bool spin = true) const {
    if (spin) SpinUntil([this] { return published_.load(std::memory_order_acquire); });
    std::unique_lock<std::mutex> lock(mu_);
    if (!completed_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                                [this] { return value_.has_value(); })) {
      return std::nullopt;
    }
    return value_;
  }

  // When it completed (Clock's epoch until then).
  Clock::time_point completed_at() const {
    std::lock_guard<std::mutex> lock(mu_);
    return completed_at_;
  }

  // Runs `callback` with the value on completion, at once when already complete.
  void OnCompletion(Callback callback) {
    std::optional<T> value;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!value_) {
        callbacks_.push_back(std::move(callback));
        return;
      }
      value = value_;
    }
    callback(*value);
  }

  // Runs the callbacks (and those they add), then publishes `value`. False, with no effect,
  // when it had already completed.
  bool Complete(T value) {
    while (true) {
      std::vector<Callback> callbacks;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (value_) return false;
        if (callbacks_.empty()) {
          value_ = std::move(value);
          completed_at_ = Clock::now();
          published_.store(true, std::memory_order_release);
          break;
        }
        callbacks.swap(callbacks_);
      }
      for (Callback& callback : callbacks) callback(value);
    }
    completed_cv_.notify_all();
    return true;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable completed_cv_;
  // Guarded by mu_:
  std::optional<T> value_;
  Clock::time_point completed_at_{};
  std::vector<Callback> callbacks_;
  // Set with value_, read without the lock: what a spinning Wait polls.
  std::atomic<bool> published_{false};
};

}  // namespace ddpkit::comm
