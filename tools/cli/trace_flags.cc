#include "tools/cli/trace_flags.h"

#include "absl/flags/flag.h"
#include "tools/trace/read_traces.h"

ABSL_FLAG(std::string, torch_plan, "",
          "PyTorch profiler traces (trace stats|svg, simulate --calibrate): DDP's bucket plan as "
          "JSON (a json.dump of ddp._get_ddp_logging_data(), or {per_bucket_param_indices, "
          "bucket_sizes, parameter_names}), to name gradients and size buckets");

namespace ddpkit::cli {

absl::StatusOr<trace::TraceView> ReadTracesWithPlan(const std::vector<std::string>& paths) {
  const std::string plan_path = absl::GetFlag(FLAGS_torch_plan);
  if (plan_path.empty()) return trace::ReadTraces(paths, nullptr);
  absl::StatusOr<trace::TorchPlan> plan = trace::ReadTorchPlan(plan_path);
  if (!plan.ok()) return plan.status();
  return trace::ReadTraces(paths, &*plan);
}

}  // namespace ddpkit::cli
