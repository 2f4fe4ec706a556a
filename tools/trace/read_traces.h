// What `ddpkit trace stats|svg` and `simulate --calibrate` read: one ddpkit trace file (or
// several, separate runs of one job), or PyTorch profiler traces (one file per rank, or a
// folder of them), told apart by their content.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/trace/torch_profiler.h"
#include "tools/trace/trace_view.h"

namespace ddpkit::trace {

// `paths`: one ddpkit trace; several, each a separate run of one job (runs.h: one after
// another); or PyTorch profiler traces; or one folder, whose *.json Chrome traces are read as
// PyTorch's (other JSON there, such as a saved logging-data dump, is skipped). `plan` (may be
// null) names PyTorch's gradients and sizes its buckets.
absl::StatusOr<TraceView> ReadTraces(const std::vector<std::string>& paths, const TorchPlan* plan);

// A plan file for ReadTraces (TorchPlan's JSON forms).
absl::StatusOr<TorchPlan> ReadTorchPlan(const std::string& path);

}  // namespace ddpkit::trace
