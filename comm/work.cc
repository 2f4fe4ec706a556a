#include "comm/work.h"

#include "autograd/error.h"

namespace ddpkit::comm {

Work::Work(OpType op, uint64_t sequence_number) : op_(op), sequence_number_(sequence_number) {}

bool Work::IsCompleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

absl::Status Work::Wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  completed_cv_.wait(lock, [this] { return completed_; });
  return status_;
}

absl::Status Work::Wait(absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (!completed_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                              [this] { return completed_; })) {
    return absl::DeadlineExceededError(StrCat(OpTypeName(op_), " (sequence number ",
                                              sequence_number_, ") did not complete within ",
                                              absl::FormatDuration(timeout)));
  }
  return status_;
}

absl::Status Work::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

absl::Duration Work::duration() const {
  std::lock_guard<std::mutex> lock(mu_);
  return duration_;
}

void Work::OnCompletion(std::function<void(const absl::Status&)> callback) {
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!completed_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    status = status_;
  }
  callback(status);
}

void Work::MarkStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = absl::Now();
}

void Work::Finish(absl::Status status) {
  // Callbacks run before completion is published, so once Wait() returns every callback
  // chained on this work has run. A callback may chain another: loop until none is left.
  while (true) {
    std::vector<std::function<void(const absl::Status&)>> callbacks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (callbacks_.empty()) {
        completed_ = true;
        status_ = status;
        duration_ = started_ == absl::Time() ? absl::ZeroDuration() : absl::Now() - started_;
        break;
      }
      callbacks.swap(callbacks_);
    }
    for (auto& callback : callbacks) callback(status);
  }
  completed_cv_.notify_all();
}

}  // namespace ddpkit::comm
