// torch.compile's split of a DDP model (Dynamo's DDPOptimizer, PyTorch 2.x): which forward
// subgraphs it compiles apart, computed from a plan file's compiled section (compiled_record.h),
// set beside eager DDP's bucket plan and checked against the split PyTorch recorded.
//
// Under torch.compile each subgraph's backward is one fused function: every gradient it
// produces becomes ready at once, when it ends. So the split, not only DDP's plan, decides how
// soon a bucket's allreduce can start (docs/plan_files.md, "Compiled DDP").
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/jobs/bucket_plans.pb.h"
#include "tools/torch_formats/compiled_record.h"
#include "tools/torch_formats/plan_file.h"

namespace ddpkit::jobs {

using torch_formats::CompiledSubgraph;
using torch_formats::PlanFile;

// DDPOptimizer's two caps: the first subgraph to fill (the last in the graph, the first in
// backward) closes at `first`, the others at `cap`.
struct CompiledCaps {
  int64_t cap = 0;
  int64_t first = 0;
};

// The split DDPOptimizer makes of `file`'s recorded forward graph under `caps`, subgraphs in
// graph order (compiled_split.cc spells the rule out). InvalidArgument when the file has no
// compiled section, or for caps PyTorch refuses (a first cap above the cap).
absl::StatusOr<std::vector<CompiledSubgraph>> DdpOptimizerSplit(const PlanFile& file,
                                                                CompiledCaps caps);

// The report: ddpkit's split under `caps` (the recorded ones when not given), beside `eager`'s
// plan (PlanFileBucketPlans' report for the same file: its rebuilt plan, else its initial one),
// and compared with PyTorch's recorded split when the caps are PyTorch's.
absl::StatusOr<CompiledSplit> CompiledSplitReport(const PlanFile& file, const ModelBuckets& eager,
                                                  std::optional<CompiledCaps> caps = {});

}  // namespace ddpkit::jobs
