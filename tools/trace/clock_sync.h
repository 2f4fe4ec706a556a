// One clock per job. The ranks of a threads world share this process's steady clock; the
// processes of a gloo job each have their own, so at startup every rank measures its offset to
// rank 0's and takes rank 0's epoch as time 0. Then every trace file of the job is on one clock
// and `ddpkit trace merge` only has to concatenate.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "tools/trace/recorder.h"

namespace ddpkit::trace {

struct JobClock {
  TraceClock::time_point epoch{};  // time 0, on this process's steady clock
  int64_t offset_ns = 0;           // rank 0's steady clock minus this process's
  int64_t uncertainty_ns = 0;      // half the best round trip of the measurement
  uint64_t job_id = 0;             // rank 0's, so files of different jobs are not merged
};

// Collective (every rank calls it): rounds of a barrier, an allreduce (every rank has joined)
// and a broadcast of rank 0's clock; the round with the shortest round trip gives the offset.
// Rank 0's epoch is "now" on rank 0.
absl::StatusOr<JobClock> AlignClocks(comm::ProcessGroup& group);

// A clock for one process (a threads world): epoch now, offset 0, a fresh job id.
JobClock LocalClock();

}  // namespace ddpkit::trace
