// Reading traces from the command line: `trace stats|svg` and `simulate --calibrate` both take
// a ddpkit trace or PyTorch profiler traces, with --torch-plan to name PyTorch's gradients.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "tools/trace/trace_view.h"

ABSL_DECLARE_FLAG(std::string, torch_plan);

namespace ddpkit::cli {

// The traces named (trace/read_traces.h), with the --torch-plan when given.
absl::StatusOr<trace::TraceView> ReadTracesWithPlan(const std::vector<std::string>& paths);

}  // namespace ddpkit::cli
