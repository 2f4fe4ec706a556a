// `fr analyze DIR --plan FILE`: a PyTorch DDP job's collectives named by what DDP issued them
// for, read against the plan file of the same model and options (export_ddp_plan.py): each
// gradient allreduce as its bucket (which parameters) and iteration, the constructor's
// parameter check and broadcast, the rebuild's broadcasts, the used-parameter map, and what is
// not DDP's. With those names a hang reads as its cause: one rank a whole iteration behind the
// others is uneven inputs, which Join exists for.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/torch_formats/fr_dump.h"
#include "tools/torch_formats/plan_file.h"

namespace ddpkit::jobs {

using torch_formats::Dump;
using torch_formats::FrEntry;
using torch_formats::PlanFile;

// What DDP's collectives look like for the file's model: its buckets before and after the
// rebuild, each as its parameters (DDP's indices) and elements.
struct DdpCallPlan {
  struct Bucket {
    std::vector<std::string> params;
    int64_t elements = 0;
  };
  std::vector<Bucket> initial, rebuilt;  // rebuilt empty: DDP never rebuilds (static graph)
  int64_t parameters = 0;                // tensors DDP reduces
};

// The plans DDP makes for the file (PlanFileBucketPlans under the file's recorded options);
// its errors otherwise.
absl::StatusOr<DdpCallPlan> DdpCallPlanOf(const PlanFile& file);

// Labels every rank's entries in the default process group ("0") in issue order: purpose
// "bucket" (with bucket, iteration, ddp_params and last_bucket), "ddp_param_check",
// "ddp_module_states", "rebuild", "used_map", "one_element" or "not_ddp".
void LabelDdpCollectives(const DdpCallPlan& plan, std::map<int, Dump>& default_group);

// The purpose tag as words for a finding's line: "DDP's rebuild broadcast"; the tag itself when
// it is not one of the above.
std::string PurposeWords(const std::string& purpose);

// When rank `gone`'s last call ended a DDP iteration and the call it never issued begins the
// next (bucket 0): the line that says this is uneven inputs, and the fix.
std::optional<std::string> UnevenInputsHint(const FrEntry& gone_last, const FrEntry& missed,
                                            int gone);

}  // namespace ddpkit::jobs
