// How a process group runs a collective on GPU tensors: Execute with the group's communication
// stream current for c.device (it only queues the work there), then an event behind it, watched
// until the GPU is done (the watchdog): each round it asks the backend's AsyncError(), and at
// the timeout it calls AbortCommunication() and fails the collective. Host tensors on a GPU-only
// backend are staged through the GPU. Used by ProcessGroup's communication thread only.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "comm/types.h"

namespace ddpkit::comm {

class ProcessGroup;

class GpuStreamRunner {
 public:
  explicit GpuStreamRunner(ProcessGroup& group) : group_(group) {}

  absl::Status Run(const Collective& c);

 private:
  // Host tensors on a GPU-only backend: copied to c.device, run there, copied back.
  absl::Status RunHostStaged(const Collective& c);
  absl::Status WatchUntilDone(const Collective& c, const cuda::Event& done);

  ProcessGroup& group_;
  std::vector<cuda::Stream> streams_;  // per GPU index
};

}  // namespace ddpkit::comm
