// `ddpkit buckets --params FILE` on a file with a compiled section: torch.compile's split
// (DDPOptimizer) beside eager DDP's plan, and the verdict against the split PyTorch recorded.
#pragma once

#include "absl/status/status.h"
#include "tools/jobs/bucket_plans.h"
#include "tools/jobs/compiled_split.h"

namespace ddpkit::cli {

// Fills plans.compiled from `file`'s compiled section (nothing when it has none), with the caps
// PyTorch split with unless --bucket-cap-mb says otherwise (the first cap stays PyTorch's).
absl::Status AddCompiledSplit(const torch_formats::PlanFile& file, jobs::ModelBuckets& plans);

// The split in backward order, the two plans side by side, and the verdict line
// "Compiled split agrees with PyTorch: yes (...)" / "NO (...)"; nothing without a split.
void PrintCompiledSplit(const jobs::ModelBuckets& plans);

}  // namespace ddpkit::cli
