#include "comm/future.h"

namespace ddpkit::comm {

std::shared_ptr<Future> Future::Completed(Tensor value) {
  auto future = std::make_shared<Future>();
  future->SetValue(std::move(value));
  return future;
}

std::shared_ptr<Future> Future::FromWork(const std::shared_ptr<Work>& work, Tensor value) {
  auto future = std::make_shared<Future>();
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
  OnCompletion([next, fn = std::move(fn)](const absl::StatusOr<Tensor>& result) {
    if (!result.ok()) {
      next->SetError(result.status());
      return;
    }
    try {
      next->SetValue(fn(*result));
    } catch (const Error& e) {
      next->SetError(e.ToStatus());
    } catch (const std::exception& e) {
      next->SetError(absl::InternalError(e.what()));
    }
  });
  return next;
}

void Future::OnCompletion(std::function<void(const absl::StatusOr<Tensor>&)> callback) {
  absl::StatusOr<Tensor> result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!completed_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    result = result_;
  }
  callback(result);
}

void Future::Complete(absl::StatusOr<Tensor> result) {
  // As Work::Finish: chained callbacks run before completion is published, so a waiter sees
  // every chained future already complete.
  while (true) {
    std::vector<std::function<void(const absl::StatusOr<Tensor>&)>> callbacks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      DDPKIT_CHECK(!completed_, "[Future] completed twice");
      if (callbacks_.empty()) {
        completed_ = true;
        result_ = std::move(result);
        completed_at_ = Clock::now();
        break;
      }
      callbacks.swap(callbacks_);
    }
    for (auto& callback : callbacks) callback(result);
  }
  completed_cv_.notify_all();
}

bool Future::IsCompleted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

absl::StatusOr<Tensor> Future::Wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  completed_cv_.wait(lock, [this] { return completed_; });
  return result_;
}

absl::StatusOr<Tensor> Future::Wait(absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (!completed_cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                              [this] { return completed_; })) {
    return absl::DeadlineExceededError(
        StrCat("the future did not complete within ", absl::FormatDuration(timeout)));
  }
  return result_;
}

Future::Clock::time_point Future::completed_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_at_;
}

}  // namespace ddpkit::comm
