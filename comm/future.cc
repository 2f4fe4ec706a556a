#include "comm/future.h"

#include "autograd/cuda/runtime.h"

namespace ddpkit::comm {

std::shared_ptr<Future> Future::Completed(Tensor value) {
  auto future = std::make_shared<Future>();
  future->SetValue(std::move(value));
  return future;
}

std::shared_ptr<Future> Future::FromWork(const std::shared_ptr<Work>& work, Tensor value) {
  auto future = std::make_shared<Future>();
  future->awaiting_ =
      StrCat(OpTypeName(work->op()), " (sequence number ", work->sequence_number(), ")");
  work->OnCompletion([future, value = std::move(value)](const absl::Status& status) {
    if (status.ok()) {
      future->SetValue(value);
    } else {
      future->SetError(status);
    }
  });
  return future;
}

std::shared_ptr<Future> Future::Then(std::function<Tensor(const Tensor&)> fn) {
  auto next = std::make_shared<Future>();
  next->awaiting_ = awaiting_;
  done_.OnCompletion([next, fn = std::move(fn)](const absl::StatusOr<Tensor>& result) {
    if (!result.ok()) {
      next->SetError(result.status());
      return;
    }
    try {
      Tensor value = fn(*result);
      // fn's GPU kernels went on this thread's stream; whoever waits on `next` reads the value
      // on another, so it completes only once they are done.
      if (value.defined() && value.is_cuda())
        cuda::Synchronize(cuda::CurrentStream(value.device()));
      next->SetValue(std::move(value));
    } catch (const Error& e) {
      next->SetError(e.ToStatus());
    } catch (const std::exception& e) {
      next->SetError(absl::InternalError(e.what()));
    }
  });
  return next;
}

void Future::Complete(absl::StatusOr<Tensor> result) {
  DDPKIT_CHECK(done_.Complete(std::move(result)), "[Future] completed twice");
}

bool Future::IsCompleted() const { return done_.IsCompleted(); }

absl::StatusOr<Tensor> Future::Wait() const { return done_.Wait(); }

absl::StatusOr<Tensor> Future::Wait(absl::Duration timeout) const {
  std::optional<absl::StatusOr<Tensor>> result = done_.Wait(timeout);
  if (result) return *std::move(result);
  if (awaiting_.empty()) {
    return absl::DeadlineExceededError(
        StrCat("the future did not complete within ", absl::FormatDuration(timeout)));
  }
  return absl::DeadlineExceededError(
      StrCat(awaiting_, " did not complete within ", absl::FormatDuration(timeout),
             ": a peer is stuck or gone (the other ranks' errors and the flight recorder say "
             "which)"));
}

Future::Clock::time_point Future::completed_at() const { return done_.completed_at(); }

}  // namespace ddpkit::comm
