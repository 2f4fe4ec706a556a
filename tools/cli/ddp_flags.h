// The DDP option flags shared by `ddpkit train`, `ddpkit join` and `ddpkit buckets`.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "reducer/distributed_data_parallel.h"
#include "reducer/extras/powersgd_hook.h"

ABSL_DECLARE_FLAG(double, bucket_cap_mb);
ABSL_DECLARE_FLAG(double, first_bucket_mb);
ABSL_DECLARE_FLAG(bool, find_unused_parameters);
ABSL_DECLARE_FLAG(bool, static_graph);
ABSL_DECLARE_FLAG(bool, gradient_as_bucket_view);
ABSL_DECLARE_FLAG(std::string, comm_hook);
ABSL_DECLARE_FLAG(int32_t, powersgd_rank);
ABSL_DECLARE_FLAG(int32_t, powersgd_start_iter);
ABSL_DECLARE_FLAG(double, powersgd_min_compression_rate);

namespace ddpkit::cli {

// Flag names (Abseil spelling) a subcommand lists to accept the DDP options.
inline const std::vector<std::string> kDdpFlagNames = {
    "bucket_cap_mb", "first_bucket_mb",         "find_unused_parameters",
    "static_graph",  "gradient_as_bucket_view", "comm_hook",
    "powersgd_rank", "powersgd_start_iter",     "powersgd_min_compression_rate"};

// The options from the flags; InvalidArgument for a non-positive size, an unknown hook or bad
// PowerSGD flags.
absl::StatusOr<reducer::DdpOptions> DdpOptionsFromFlags();
// The --comm-hook flag: empty for none, else allreduce|fp16|bf16|powersgd|batched_powersgd.
absl::StatusOr<std::string> CommHookFromFlags();
// The --powersgd-* flags; InvalidArgument naming the flag for a bad value, or when one is set
// without a PowerSGD --comm-hook.
absl::StatusOr<reducer::PowerSgdOptions> PowerSgdOptionsFromFlags();

}  // namespace ddpkit::cli
