// The DDP option flags shared by `ddpkit train`, `ddpkit join` and `ddpkit buckets`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "reducer/distributed_data_parallel.h"
#include "reducer/extras/powersgd_hook.h"

ABSL_DECLARE_FLAG(std::string, pytorch_version);
ABSL_DECLARE_FLAG(std::string, bucket_cap_mb);
ABSL_DECLARE_FLAG(std::string, first_bucket_mb);
ABSL_DECLARE_FLAG(std::string, bucket_cap_mb_list);
ABSL_DECLARE_FLAG(bool, find_unused_parameters);
ABSL_DECLARE_FLAG(bool, static_graph);
ABSL_DECLARE_FLAG(bool, gradient_as_bucket_view);
ABSL_DECLARE_FLAG(bool, broadcast_buffers);
ABSL_DECLARE_FLAG(std::string, forward_sync_buffers);
ABSL_DECLARE_FLAG(bool, init_sync);
ABSL_DECLARE_FLAG(bool, skip_all_reduce_unused_params);
ABSL_DECLARE_FLAG(bool, batched_grad_copy);
ABSL_DECLARE_FLAG(std::string, mixed_precision);
ABSL_DECLARE_FLAG(std::string, comm_hook);
ABSL_DECLARE_FLAG(int32_t, powersgd_rank);
ABSL_DECLARE_FLAG(int32_t, powersgd_start_iter);
ABSL_DECLARE_FLAG(double, powersgd_min_compression_rate);

namespace ddpkit::cli {

// Flag names (Abseil spelling) a subcommand lists to accept the DDP options.
inline const std::vector<std::string> kDdpFlagNames = {"pytorch_version",
                                                       "bucket_cap_mb",
                                                       "first_bucket_mb",
                                                       "bucket_cap_mb_list",
                                                       "find_unused_parameters",
                                                       "static_graph",
                                                       "gradient_as_bucket_view",
                                                       "broadcast_buffers",
                                                       "forward_sync_buffers",
                                                       "init_sync",
                                                       "skip_all_reduce_unused_params",
                                                       "batched_grad_copy",
                                                       "mixed_precision",
                                                       "comm_hook",
                                                       "powersgd_rank",
                                                       "powersgd_start_iter",
                                                       "powersgd_min_compression_rate"};

// The options from the flags, checked by reducer::ValidateDdpOptions; InvalidArgument for a bad
// size or version, an unknown hook or bad PowerSGD flags.
// `recorded`: the version a plan file was recorded with, followed unless --pytorch-version is
// given (without either: today's, reducer::kDefaultPyTorch).
absl::StatusOr<reducer::DdpOptions> DdpOptionsFromFlags(
    std::optional<reducer::PyTorchVersion> recorded = std::nullopt);
// Only --pytorch-version and the caps (--bucket-cap-mb, --first-bucket-mb, --bucket-cap-mb-list),
// the rest left at their defaults: for subcommands that take no other DDP flag.
absl::StatusOr<reducer::DdpOptions> DdpCapsFromFlags(
    std::optional<reducer::PyTorchVersion> recorded = std::nullopt);
// The --comm-hook flag: empty for none, else allreduce|fp16|bf16|powersgd|batched_powersgd.
absl::StatusOr<std::string> CommHookFromFlags();
// The --powersgd-* flags; InvalidArgument naming the flag for a bad value, or when one is set
// without a PowerSGD --comm-hook.
absl::StatusOr<reducer::PowerSgdOptions> PowerSgdOptionsFromFlags();

}  // namespace ddpkit::cli
