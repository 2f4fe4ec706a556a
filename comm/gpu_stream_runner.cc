#include "comm/gpu_stream_runner.h"

#include <chrono>
#include <thread>

#include "autograd/base/error.h"
#include "autograd/cuda/runtime.h"

namespace ddpkit::comm {

absl::Status GpuStreamRunner::Run(const Collective& c) {
  const size_t index = static_cast<size_t>(c.device.index);
  if (streams_.size() <= index) streams_.resize(index + 1, nullptr);
  if (streams_[index] == nullptr) streams_[index] = cuda::PoolStream(c.device);
  cuda::StreamGuard on_comm_stream(c.device, streams_[index]);
  if (c.host_staged) return RunHostStaged(c);
  DDPKIT_RETURN_IF_ERROR(group_.execute(c));
  cuda::Event done(c.device);
  done.Record(streams_[index]);
  return WatchUntilDone(c, done);
}

absl::Status GpuStreamRunner::RunHostStaged(const Collective& c) {
  Collective on_gpu = c;
  on_gpu.host_staged = false;
  if (c.input.defined()) on_gpu.input = c.input.To(c.device);
  const bool in_place = c.input.defined() && c.input.IsAliasOf(c.output);
  if (c.output.defined()) {
    on_gpu.output =
        in_place ? on_gpu.input : Tensor::Empty(c.output.shape(), c.output.dtype(), c.device);
  }
  DDPKIT_RETURN_IF_ERROR(group_.execute(on_gpu));
  cuda::Event done(c.device);
  done.Record(cuda::CurrentStream(c.device));
  DDPKIT_RETURN_IF_ERROR(WatchUntilDone(c, done));
  if (c.output.defined()) c.output.CopyFrom(on_gpu.output);
  return absl::OkStatus();
}

absl::Status GpuStreamRunner::WatchUntilDone(const Collective& c, const cuda::Event& done) {
  const absl::Duration timeout = group_.timeout();
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  while (!done.Query()) {
    if (absl::Status error = group_.async_error(); !error.ok()) {
      group_.abort_communication();
      return absl::Status(error.code(), StrCat(group_.describe(c), " failed on ",
                                               c.device.ToString(), ": ", error.message()));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      group_.abort_communication();
      return absl::DeadlineExceededError(StrCat(
          group_.describe(c), " timed out after ", absl::FormatDuration(timeout), " on ",
          c.device.ToString(),
          ": the GPU never finished it (a peer that did not issue it, or one that died); the "
          "communicator was aborted"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return absl::OkStatus();
}

}  // namespace ddpkit::comm
