// DDP's bucket plans — for given tensor sizes (PyTorch's compute_bucket_assignment_by_size), for
// a model, before and after the rebuild (the latter measured by running real iterations), or
// for a PyTorch model's plan file (plan_file_buckets.cc). `ddpkit buckets` prints them;
// `simulate` and `fr analyze --plan` build on them, so they live at the jobs' root.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "reducer/bucket_assignment.h"
#include "reducer/distributed_data_parallel.h"
#include "tools/jobs/bucket_plans.pb.h"
#include "tools/torch_formats/plan_file.h"

namespace ddpkit::jobs {

using torch_formats::PlanFile;

// The assignment in PyTorch's shape.
BucketPlan PlanOf(const reducer::BucketAssignment& assignment);

// Per bucket: indices, names (when given, one per spec), bytes, limit and dtype.
google::protobuf::RepeatedPtrField<reducer::BucketInfo> DescribeBuckets(
    const reducer::BucketAssignment& assignment,
    const std::vector<reducer::BucketTensorSpec>& specs,
    const std::vector<std::string>& names = {});

// DDP's plans for an MLP: the initial one from DDP's rules, the rebuilt one from real iterations
// on a world of one (the gradient arrival order is a property of the backward pass).
absl::StatusOr<ModelBuckets> ModelBucketPlans(const std::string& model,
                                              const reducer::DdpOptions& options);

// DDP's plans for a plan file's parameters, from DDP's rules alone (nothing runs): the initial
// one, and the rebuilt one walking the file's gradient-ready order — reverse registration order,
// flagged as an estimate, when the file has none — under `options`' limits; compared with the
// plans PyTorch's DDP logged in the file when it ran with the same options. Indices are DDP's:
// among the parameters that require a gradient. InvalidArgument for a file whose recorded order
// is not a permutation of those, or a parameter needing a gradient in a dtype ddpkit lacks.
absl::StatusOr<ModelBuckets> PlanFileBucketPlans(const PlanFile& file,
                                                 const reducer::DdpOptions& options);

// The options the file's DDP run was recorded with: its PyTorch's rules (today's without a
// torch_version), caps — a given bucket_cap_mb told apart from an unset one — and mode. Without
// a "ddp" section, the defaults under the file's PyTorch.
reducer::DdpOptions RecordedDdpOptions(const PlanFile& file);

}  // namespace ddpkit::jobs
