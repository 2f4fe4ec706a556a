// A world to run on, as the --backend, --world-size and --timeout flags describe it: what
// RunOnWorld (comm/world/world.h) starts and the thread budget (thread_budget.h) sizes.
#pragma once

#include "comm/backend.h"
#include "comm/process_group.h"

namespace ddpkit::comm {

// More rank threads than this in one process is a typing error, not a job.
inline constexpr int kMaxThreadsWorldSize = 1024;

struct WorldSpec {
  // What each backend is and how its ranks start: comm/backend.h.
  Backend backend = Backend::kThreads;
  int world_size = 1;  // threads only; gloo and nccl take WORLD_SIZE from the launcher, mpi MPI's
  ProcessGroupOptions options = {};
  int threads_per_rank = 0;  // compute threads per rank; 0: the thread budget decides
  // K > 1: each rank's group is a ProcessGroupRoundRobin over K groups (comm/round_robin.h), so
  // K collectives run at once. threads and gloo; nccl takes 1.
  int round_robin_groups = 1;
};

}  // namespace ddpkit::comm
