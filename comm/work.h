// Work: the handle an asynchronous collective returns.
//
// A collective is queued on its group's communication thread and runs there in submission
// order; the caller keeps computing and waits on the Work when it needs the result. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/completion.h"
#include "comm/types.h"

namespace ddpkit::comm {

class Work {
 public:
  // `spin_on_wait`: whether Wait polls briefly before it sleeps (comm/spin_wait.h); a backend
  // whose progress needs another of this process's threads turns it off.
  Work(OpType op, uint64_t sequence_number, bool spin_on_wait = true);
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  OpType op() const { return op_; }
  uint64_t sequence_number() const { return sequence_number_; }

  bool IsCompleted() const;
  // Blocks until the collective finished; returns its outcome. The group's own timeout bounds
  // the wait: a collective that cannot complete fails with DeadlineExceeded.
  absl::Status Wait() const;
  // As Wait, but gives up after `timeout` with DeadlineExceeded (the collective goes on).
  absl::Status Wait(absl::Duration timeout) const;
  // The outcome once completed; OK before.
  absl::Status status() const;
  // Time from the start of execution to completion (zero until completed).
  absl::Duration duration() const;
  // Runs `callback` with the outcome on completion (at once if already completed), on the
  // thread that completes the work, before Wait() returns. DDP's communication hooks chain
  // on this.
  void OnCompletion(std::function<void(const absl::Status&)> callback);

  // For process groups: mark the start of execution, and completion.
  void MarkStarted();
  void Finish(absl::Status status);

 private:
  const OpType op_;
  const uint64_t sequence_number_;
  const bool spin_on_wait_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point started_{};  // guarded by mu_
  Completion<absl::Status> done_;
};

}  // namespace ddpkit::comm
