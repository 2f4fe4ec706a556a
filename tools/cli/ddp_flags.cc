#include "tools/cli/ddp_flags.h"

#include <cmath>

#include "absl/flags/flag.h"
#include "reducer/extras/named_comm_hook.h"

ABSL_FLAG(double, bucket_cap_mb, 25, "DDP bucket size cap in MiB (after the rebuild)");
ABSL_FLAG(double, first_bucket_mb, 1, "DDP first bucket's size cap in MiB (after the rebuild)");
ABSL_FLAG(bool, find_unused_parameters, false,
          "search each forward's graph for parameters that get no gradient");
ABSL_FLAG(bool, static_graph, false,
          "the graph is the same every iteration (supports checkpointing and reused parameters)");
ABSL_FLAG(bool, gradient_as_bucket_view, false, ".grad tensors are views into the bucket buffers");
ABSL_FLAG(
    std::string, comm_hook, "",
    "communication hook: allreduce, fp16, bf16, powersgd or batched_powersgd (default: none)");
ABSL_FLAG(int32_t, powersgd_rank, 1,
          "--comm-hook powersgd|batched_powersgd: the rank of the approximation (PyTorch's "
          "matrix_approximation_rank)");
ABSL_FLAG(int32_t, powersgd_start_iter, 10,
          "--comm-hook powersgd|batched_powersgd: synced iterations of plain allreduce before "
          "compression starts (PyTorch's start_powerSGD_iter, > 1; its default 1000 suits long "
          "runs)");
ABSL_FLAG(double, powersgd_min_compression_rate, 2,
          "--comm-hook powersgd: a gradient viewed as an n x m matrix is compressed only when "
          "(n + m) * rank * RATE < n * m; the others are allreduced as they are");

namespace ddpkit::cli {

absl::StatusOr<reducer::DdpOptions> DdpOptionsFromFlags() {
  reducer::DdpOptions options{
      .bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb),
      .first_bucket_mb = absl::GetFlag(FLAGS_first_bucket_mb),
      .find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters),
      .static_graph = absl::GetFlag(FLAGS_static_graph),
      .gradient_as_bucket_view = absl::GetFlag(FLAGS_gradient_as_bucket_view)};
  if (!(options.bucket_cap_mb > 0) || reducer::MegabytesToBytes(options.bucket_cap_mb) == 0) {
    return absl::InvalidArgumentError(StrCat(
        "--bucket-cap-mb must be positive (at least one byte), got ", options.bucket_cap_mb));
  }
  if (!(options.first_bucket_mb > 0) || reducer::MegabytesToBytes(options.first_bucket_mb) == 0) {
    return absl::InvalidArgumentError(StrCat(
        "--first-bucket-mb must be positive (at least one byte), got ", options.first_bucket_mb));
  }
  DDPKIT_RETURN_IF_ERROR(CommHookFromFlags().status());
  DDPKIT_RETURN_IF_ERROR(PowerSgdOptionsFromFlags().status());
  return options;
}

absl::StatusOr<std::string> CommHookFromFlags() {
  const std::string hook = absl::GetFlag(FLAGS_comm_hook);
  if (hook.empty()) return hook;
  if (absl::Status s = reducer::ValidateCommHookName(hook); !s.ok()) {
    return absl::InvalidArgumentError(StrCat("--comm-hook: ", s.message()));
  }
  return hook;
}

absl::StatusOr<reducer::PowerSgdOptions> PowerSgdOptionsFromFlags() {
  const reducer::PowerSgdOptions options{
      .matrix_approximation_rank = absl::GetFlag(FLAGS_powersgd_rank),
      .start_iteration = absl::GetFlag(FLAGS_powersgd_start_iter),
      .min_compression_rate = absl::GetFlag(FLAGS_powersgd_min_compression_rate)};
  if (!reducer::IsPowerSgdHookName(absl::GetFlag(FLAGS_comm_hook))) {
    if (options.matrix_approximation_rank != 1 || options.start_iteration != 10 ||
        options.min_compression_rate != 2) {
      return absl::InvalidArgumentError(
          "--powersgd-rank, --powersgd-start-iter and --powersgd-min-compression-rate need "
          "--comm-hook powersgd or batched_powersgd");
    }
    return options;
  }
  if (options.matrix_approximation_rank < 1) {
    return absl::InvalidArgumentError(
        StrCat("--powersgd-rank must be at least 1, got ", options.matrix_approximation_rank));
  }
  if (options.start_iteration <= 1) {
    return absl::InvalidArgumentError(
        StrCat("--powersgd-start-iter must be more than 1, got ", options.start_iteration,
               ": DDP rebuilds its buckets at iteration 1, and PowerSGD's error feedback and "
               "warm start keep state per bucket"));
  }
  if (!(options.min_compression_rate >= 0) || !std::isfinite(options.min_compression_rate)) {
    return absl::InvalidArgumentError(
        StrCat("--powersgd-min-compression-rate must be finite and >= 0, got ",
               options.min_compression_rate));
  }
  DDPKIT_RETURN_IF_ERROR(reducer::ValidatePowerSgdOptions(options));
  return options;
}

}  // namespace ddpkit::cli
