#include "tools/cli/ddp_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(double, bucket_cap_mb, 25, "DDP bucket size cap in MiB (after the rebuild)");
ABSL_FLAG(double, first_bucket_mb, 1, "DDP first bucket's size cap in MiB (after the rebuild)");
ABSL_FLAG(bool, find_unused_parameters, false,
          "search each forward's graph for parameters that get no gradient");
ABSL_FLAG(bool, static_graph, false,
          "the graph is the same every iteration (supports checkpointing and reused parameters)");
ABSL_FLAG(bool, gradient_as_bucket_view, false, ".grad tensors are views into the bucket buffers");
ABSL_FLAG(std::string, comm_hook, "",
          "communication hook: allreduce, fp16 or bf16 (default: none)");

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
  return options;
}

absl::StatusOr<std::string> CommHookFromFlags() {
  const std::string hook = absl::GetFlag(FLAGS_comm_hook);
  if (hook.empty()) return hook;
  absl::StatusOr<reducer::BuiltinCommHook> parsed = reducer::ParseBuiltinCommHook(hook);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(StrCat("--comm-hook: ", parsed.status().message()));
  }
  return hook;
}

}  // namespace ddpkit::cli
