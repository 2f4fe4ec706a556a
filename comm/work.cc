#include "comm/work.h"

#include "autograd/base/error.h"

namespace ddpkit::comm {

Work::Work(OpType op, uint64_t sequence_number, bool spin_on_wait)
    : op_(op), sequence_number_(sequence_number), spin_on_wait_(spin_on_wait) {}

bool Work::IsCompleted() const { return done_.IsCompleted(); }

absl::Status Work::Wait() const { return done_.Wait(spin_on_wait_); }

absl::Status Work::Wait(absl::Duration timeout) const {
  std::optional<absl::Status> status = done_.Wait(timeout, spin_on_wait_);
  if (status) return *status;
  return absl::DeadlineExceededError(StrCat(OpTypeName(op_), " (sequence number ", sequence_number_,
                                            ") did not complete within ",
                                            absl::FormatDuration(timeout)));
}

absl::Status Work::status() const { return done_.Peek().value_or(absl::OkStatus()); }

absl::Duration Work::duration() const {
  if (!done_.IsCompleted()) return absl::ZeroDuration();
  std::lock_guard<std::mutex> lock(mu_);
  if (started_ == std::chrono::steady_clock::time_point{}) return absl::ZeroDuration();
  return absl::FromChrono(done_.completed_at() - started_);
}

void Work::OnCompletion(std::function<void(const absl::Status&)> callback) {
  done_.OnCompletion(std::move(callback));
}

void Work::MarkStarted() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = std::chrono::steady_clock::now();
}

void Work::Finish(absl::Status status) {
  done_.Complete(std::move(status));  // the communication thread finishes each work once
}

}  // namespace ddpkit::comm
