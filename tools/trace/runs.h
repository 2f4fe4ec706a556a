// Several ddpkit traces of separate runs as one view, one run after another: what
// `simulate --calibrate A.json,B.json` learns from. One run prices the allreduce at the sizes of
// its own plan's buckets only, so a cap that makes larger (or smaller) buckets is an
// extrapolation; a second run at another cap measures those sizes too (docs/simulate.md).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/trace/trace_view.h"

namespace ddpkit::trace {

// `runs[k]` read from `names[k]`. Each later run's times (its collectives' queueing too) are moved
// to start a second after the runs before it ended, and its iteration numbers to follow theirs,
// so every iteration stays its own (and each run's first, the initial plan's, is still the one
// before its rebuild), and its collectives' sequence numbers follow theirs. The runs
// must be of one job kind, backend and world size, hold the same ranks, and train the same
// parameters with the same DDP options, the bucket cap aside; InvalidArgument names the run and
// what differs.
absl::StatusOr<TraceView> RunsOneAfterAnother(std::vector<TraceView> runs,
                                              const std::vector<std::string>& names);

}  // namespace ddpkit::trace
