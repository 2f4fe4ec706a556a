// A CollectiveListener sees every collective of a process group as it happens — what a trace
// recorder needs (tools/trace/). Queued is called on the thread that issued the collective,
// Started and Finished on the group's communication thread, so implementations must be
// thread-safe, and must neither block nor issue collectives.
#pragma once

#include <cstdint>

#include "comm/types.h"

namespace ddpkit::comm {

class CollectiveListener {
 public:
  virtual ~CollectiveListener() = default;
  // `c` has its sequence number and tag set.
  virtual void OnQueued(const Collective& c) = 0;
  virtual void OnStarted(uint64_t sequence_number) = 0;
  virtual void OnFinished(uint64_t sequence_number, bool ok) = 0;
};

}  // namespace ddpkit::comm
