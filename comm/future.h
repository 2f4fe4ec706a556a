// Future: a tensor that will be ready later — the value a DDP communication hook returns.
//
// A future completes once, with a tensor or an error. Futures chain: Then(fn) is a new future
// completing with fn(value) as soon as this one completes, computed on the completing thread
// (for a collective, the group's communication thread), so a hook's decompression overlaps the
// backward pass just as the collective does. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "autograd/tensor.h"
#include "comm/completion.h"
#include "comm/work.h"

namespace ddpkit::comm {

class Future : public std::enable_shared_from_this<Future> {
 public:
  using Clock = std::chrono::steady_clock;

  Future() = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  // Already complete with `value`.
  static std::shared_ptr<Future> Completed(Tensor value);
  // Completes with `value` (the collective's in-place result) when `work` completes, or with
  // the work's error.
  static std::shared_ptr<Future> FromWork(const std::shared_ptr<Work>& work, Tensor value);

  // A future completing with fn(value) once this one completes (at once if it has), or with
  // this one's error; an exception thrown by fn becomes the new future's error.
  std::shared_ptr<Future> Then(std::function<Tensor(const Tensor&)> fn);

  void SetValue(Tensor value) { Complete(std::move(value)); }
  void SetError(absl::Status error) { Complete(std::move(error)); }

  bool IsCompleted() const;
  // Blocks until complete. Wait(timeout) gives up after `timeout` with DeadlineExceeded.
  absl::StatusOr<Tensor> Wait() const;
  absl::StatusOr<Tensor> Wait(absl::Duration timeout) const;
  // When it completed (Clock's epoch until then); DDP measures communication time with it.
  Clock::time_point completed_at() const;

 private:
  void Complete(absl::StatusOr<Tensor> result);

  Completion<absl::StatusOr<Tensor>> done_;
  std::string awaiting_;  // the collective it waits for, "ALLREDUCE (sequence number 7)"; set
                          // before the future is shared, so read without a lock
};

}  // namespace ddpkit::comm
