#include "tools/cli/ddp_flags.h"

#include <cmath>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "reducer/extras/named_comm_hook.h"

ABSL_FLAG(std::string, pytorch_version, "",
          "whose DDP to reproduce: 2.15 (today's, the default; with --params the plan file's "
          "torch_version) or an earlier release down to 1.13 (Debian's); docs/reducer.md's "
          "version table lists what changed when");
ABSL_FLAG(
    std::string, bucket_cap_mb, "",
    "DDP's bucket_cap_mb, the bucket size cap in MiB (unset: PyTorch's 25; from PyTorch 2.4 a "
    "given cap, even 25, caps the first bucket too)");
ABSL_FLAG(std::string, first_bucket_mb, "",
          "the first bucket's cap after the rebuild, in MiB (PyTorch's "
          "dist._DEFAULT_FIRST_BUCKET_BYTES; unset: 1; from 2.4 only while --bucket-cap-mb is "
          "unset)");
ABSL_FLAG(std::string, bucket_cap_mb_list, "",
          "PyTorch 2.11's bucket_cap_mb_list: a cap in MiB per bucket, A,B,C (the last repeats), "
          "for the first iteration and the rebuild");
ABSL_FLAG(bool, find_unused_parameters, false,
          "search each forward's graph for parameters that get no gradient");
ABSL_FLAG(bool, static_graph, false,
          "the graph is the same every iteration (supports checkpointing and reused parameters)");
ABSL_FLAG(bool, gradient_as_bucket_view, false, ".grad tensors are views into the bucket buffers");
ABSL_FLAG(bool, broadcast_buffers, true,
          "rank 0's buffers to every rank before each synced forward (from PyTorch 2.1 false also "
          "keeps them out of the construction broadcast and Join's final sync)");
ABSL_FLAG(
    std::string, forward_sync_buffers, "",
    "PyTorch 2.13's forward_sync_buffers, true or false: the per-forward buffer sync in place "
    "of --broadcast-buffers, with the buffers always sent at construction (default: unset)");
ABSL_FLAG(bool, init_sync, true,
          "check the model and broadcast rank 0's at construction (PyTorch 2.8's init_sync; "
          "--noinit-sync: no collective at construction)");
ABSL_FLAG(bool, skip_all_reduce_unused_params, false,
          "PyTorch 2.8's skip_all_reduce_unused_params: a bucket of parameters this rank left "
          "unused is not allreduced (needs --find-unused-parameters or --static-graph)");
ABSL_FLAG(std::string, mixed_precision, "",
          "PyTorch 2.1's mixed_precision with float32 parameters: the gradients reduced in this "
          "dtype (float16, bfloat16 or float32), summed before they are divided by the world "
          "size (default: unset)");
ABSL_FLAG(bool, batched_grad_copy, false,
          "PyTorch 2.13's batched_grad_copy: a bucket's gradients copied in together, then the "
          "bucket divided by the world size once");
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

namespace {

// A size flag in MiB: nullopt when not given (the empty default).
absl::StatusOr<std::optional<double>> OptionalMb(std::string_view flag, const std::string& text) {
  if (text.empty()) return std::nullopt;
  double mb = 0;
  if (!absl::SimpleAtod(text, &mb)) {
    return absl::InvalidArgumentError(StrCat("--", flag, ": '", text, "' is not a number of MiB"));
  }
  return mb;
}

absl::StatusOr<std::vector<double>> MbList(const std::string& text) {
  std::vector<double> list;
  if (text.empty()) return list;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    DDPKIT_ASSIGN_OR_RETURN(const std::optional<double> mb,
                            OptionalMb("bucket-cap-mb-list", std::string(part)));
    if (!mb) {
      return absl::InvalidArgumentError(
          StrCat("--bucket-cap-mb-list: '", text, "' has an empty entry; give A,B,C in MiB"));
    }
    list.push_back(*mb);
  }
  return list;
}

}  // namespace

absl::StatusOr<reducer::DdpOptions> DdpCapsFromFlags(
    std::optional<reducer::PyTorchVersion> recorded) {
  reducer::DdpOptions options;
  const std::string flag = absl::GetFlag(FLAGS_pytorch_version);
  if (!flag.empty()) {
    absl::StatusOr<reducer::PyTorchVersion> version = reducer::ParsePyTorchVersion(flag);
    if (!version.ok()) {
      return absl::InvalidArgumentError(StrCat("--pytorch-version: ", version.status().message()));
    }
    options.pytorch_version = *version;
  } else if (recorded) {
    options.pytorch_version = *recorded;
  }
  DDPKIT_ASSIGN_OR_RETURN(options.bucket_cap_mb,
                          OptionalMb("bucket-cap-mb", absl::GetFlag(FLAGS_bucket_cap_mb)));
  DDPKIT_ASSIGN_OR_RETURN(options.first_bucket_mb,
                          OptionalMb("first-bucket-mb", absl::GetFlag(FLAGS_first_bucket_mb)));
  DDPKIT_ASSIGN_OR_RETURN(options.bucket_cap_mb_list,
                          MbList(absl::GetFlag(FLAGS_bucket_cap_mb_list)));
  DDPKIT_RETURN_IF_ERROR(reducer::ValidateDdpOptions(options));
  return options;
}

absl::StatusOr<reducer::DdpOptions> DdpOptionsFromFlags(
    std::optional<reducer::PyTorchVersion> recorded) {
  DDPKIT_ASSIGN_OR_RETURN(reducer::DdpOptions options, DdpCapsFromFlags(recorded));
  options.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  options.static_graph = absl::GetFlag(FLAGS_static_graph);
  options.gradient_as_bucket_view = absl::GetFlag(FLAGS_gradient_as_bucket_view);
  options.broadcast_buffers = absl::GetFlag(FLAGS_broadcast_buffers);
  const std::string forward_sync = absl::GetFlag(FLAGS_forward_sync_buffers);
  if (forward_sync == "true" || forward_sync == "false") {
    options.forward_sync_buffers = forward_sync == "true";
  } else if (!forward_sync.empty()) {
    return absl::InvalidArgumentError(
        StrCat("--forward-sync-buffers: '", forward_sync, "' is neither true nor false"));
  }
  options.init_sync = absl::GetFlag(FLAGS_init_sync);
  options.skip_all_reduce_unused_params = absl::GetFlag(FLAGS_skip_all_reduce_unused_params);
  options.batched_grad_copy = absl::GetFlag(FLAGS_batched_grad_copy);
  if (const std::string reduce = absl::GetFlag(FLAGS_mixed_precision); !reduce.empty()) {
    absl::StatusOr<DType> dtype = ParseDType(reduce);
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(StrCat("--mixed-precision: ", dtype.status().message()));
    }
    options.mixed_precision = reducer::MixedPrecision{.reduce_dtype = *dtype};
  }
  DDPKIT_RETURN_IF_ERROR(reducer::ValidateDdpOptions(options));
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
