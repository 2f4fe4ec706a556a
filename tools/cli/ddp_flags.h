// The DDP option flags shared by `ddpkit train`, `ddpkit join` and `ddpkit buckets`.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "reducer/distributed_data_parallel.h"

ABSL_DECLARE_FLAG(double, bucket_cap_mb);
ABSL_DECLARE_FLAG(double, first_bucket_mb);
ABSL_DECLARE_FLAG(bool, find_unused_parameters);
ABSL_DECLARE_FLAG(bool, static_graph);
ABSL_DECLARE_FLAG(bool, gradient_as_bucket_view);
ABSL_DECLARE_FLAG(std::string, comm_hook);

namespace ddpkit::cli {

// Flag names (Abseil spelling) a subcommand lists to accept the DDP options.
inline const std::vector<std::string> kDdpFlagNames = {"bucket_cap_mb",           "first_bucket_mb",
                                                       "find_unused_parameters",  "static_graph",
                                                       "gradient_as_bucket_view", "comm_hook"};

// The options from the flags; InvalidArgument for a non-positive size.
absl::StatusOr<reducer::DdpOptions> DdpOptionsFromFlags();
// The --comm-hook flag: empty for none, else allreduce|fp16|bf16.
absl::StatusOr<std::string> CommHookFromFlags();

}  // namespace ddpkit::cli
