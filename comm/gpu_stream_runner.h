// How a process group runs a collective on GPU tensors: Execute with the group's communication
// stream current for c.device (it only queues the work there), then an event behind it, watched
// until the GPU is done (the watchdog): each round it asks the backend's AsyncError(), and at
// the timeout it calls AbortCommunication() and fails the collective. Host tensors on a GPU-only
// backend are staged through the GPU. Used by ProcessGroup's communication thread only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/types.h"

namespace ddpkit::comm {

// What the runner needs of its process group, which hands it these at construction (so the
// runner, below the group, never includes it).
struct GpuStreamRunnerCalls {
  std::function<absl::Status(const Collective&)> execute;  // the backend's Execute
  std::function<absl::Status()> async_error;               // the backend's AsyncError
  std::function<void()> abort_communication;               // the backend's AbortCommunication
  std::function<std::string(const Collective&)> describe;  // "ALLREDUCE (sequence number 5, ...)"
  std::function<absl::Duration()> timeout;                 // the group's collective timeout
};

class GpuStreamRunner {
 public:
  explicit GpuStreamRunner(GpuStreamRunnerCalls group) : group_(std::move(group)) {}

  absl::Status Run(const Collective& c);

 private:
  // Host tensors on a GPU-only backend: copied to c.device, run there, copied back.
  absl::Status RunHostStaged(const Collective& c);
  absl::Status WatchUntilDone(const Collective& c, const cuda::Event& done);

  GpuStreamRunnerCalls group_;
  std::vector<cuda::Stream> streams_;  // per GPU index
};

}  // namespace ddpkit::comm
