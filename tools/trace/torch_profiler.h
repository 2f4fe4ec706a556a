// PyTorch's profiler traces (`torch.profiler.profile(...).export_chrome_trace(path)`, one file
// per rank) read into the TraceView that `ddpkit trace stats|svg` measure and draw, so a PyTorch
// DDP job gets the same figures and picture as a ddpkit one. docs/inspect.md ("your PyTorch
// job") says how to record one and how each phase is recovered:
//  * an iteration per `DistributedDataParallel.forward` (numbered by its `ProfilerStep#N`);
//  * forward: DDP's forward until backward's first `autograd::engine::evaluate_function`;
//    backward: until the last one ends (DDP's "backward compute end"); finalize: from there to
//    the last `torch.distributed.ddp.reducer::copy_bucket_to_grad` (or bucket allreduce) end;
//    optimizer: `Optimizer.step#...`;
//  * a gradient's ready time: its `AccumulateGrad`; a bucket: each `c10d::allreduce_` DDP issues
//    during backward, in order, with the hooks up to the one that issued it; the bucket's
//    communication: the backend's span (`gloo:all_reduce`, `nccl:all_reduce`) matched to it by
//    kind and order;
//  * ranks on one clock: each file starts at 0, then each rank is shifted so its collectives end
//    when the lowest rank's do (a collective ends at about the same moment on every rank).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tools/trace/trace_view.h"

namespace ddpkit::trace {

// DDP's bucket plan, when the user has it (optional): names gradients and sizes collectives.
struct TorchPlan {
  std::vector<std::string> param_names;  // by parameter index; may be empty
  // Per bucket in launch order, its parameters in the order their gradients arrive (PyTorch's
  // rebuilt_per_bucket_param_indices).
  std::vector<std::vector<int>> buckets;
  std::vector<int64_t> bucket_bytes;  // per bucket; may be empty
};

// The plan from JSON: PyTorch's own `ddp._get_ddp_logging_data()` dumped with json.dump
// (rebuilt_per_bucket_param_indices "5 4, 3 2", rebuilt_bucket_sizes "a, b"), or lists
// (per_bucket_param_indices, bucket_sizes, parameter_names). InvalidArgument naming `what`.
absl::StatusOr<TorchPlan> ParseTorchPlan(const nlohmann::json& json, const std::string& what);

// One rank's file as text, and what to call it in messages (its path). The rank comes from the
// file's distributedInfo, else a number after "rank" in `name`, else its place in the list.
struct TorchTraceText {
  std::string name;
  std::string text;
};

// Whether `json` is a Chrome trace that is not ddpkit's own (a bare array of events, or an
// object with traceEvents and no otherData.ddpkit): what ReadTraces hands to this reader.
bool IsForeignChromeTrace(const nlohmann::json& json);

// The ranks' traces as one view. InvalidArgument, one line naming the file, for text that is
// not JSON, not a Chrome trace, not PyTorch's, has no DDP iteration, or holds a rank twice.
// `plan` may be null.
absl::StatusOr<TraceView> ParseTorchTraces(const std::vector<TorchTraceText>& files,
                                           const TorchPlan* plan);
// The same, from files already parsed.
struct TorchTraceJson {
  std::string name;
  nlohmann::json json;
};
absl::StatusOr<TraceView> TorchTracesView(const std::vector<TorchTraceJson>& files,
                                          const TorchPlan* plan);

}  // namespace ddpkit::trace
