#include "comm/work.h"

#include "autograd/error.h"

namespace ddpkit::comm {

Work::Work(OpType op, uint64_t sequence_number) : op_(op), sequence_number_(sequence_number) {}

bool Work::IsCompleted() const {
  absl::MutexLock lock(&mu_);
  return completed_;
}

absl::Status Work::Wait() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&completed_));
  return status_;
}

absl::Status Work::Wait(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&completed_), timeout)) {
    return absl::DeadlineExceededError(StrCat(OpTypeName(op_), " (sequence number ",
                                              sequence_number_, ") did not complete within ",
                                              absl::FormatDuration(timeout)));
  }
  return status_;
}

absl::Status Work::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Duration Work::duration() const {
  absl::MutexLock lock(&mu_);
  return duration_;
}

void Work::OnCompletion(std::function<void(const absl::Status&)> callback) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!completed_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    status = status_;
  }
  callback(status);
}

void Work::MarkStarted() {
  absl::MutexLock lock(&mu_);
  started_ = absl::Now();
}

void Work::Finish(absl::Status status) {
  std::vector<std::function<void(const absl::Status&)>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    completed_ = true;
    status_ = status;
    duration_ = started_ == absl::Time() ? absl::ZeroDuration() : absl::Now() - started_;
    callbacks.swap(callbacks_);
  }
  for (auto& callback : callbacks) callback(status);
}

}  // namespace ddpkit::comm
