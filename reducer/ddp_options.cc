#include "reducer/ddp_options.h"

#include <algorithm>
#include <cmath>

#include "autograd/base/error.h"

namespace ddpkit::reducer {
namespace {

// A cap in MiB that converts to at least one byte and fits in 63 bits.
absl::Status CheckCap(std::string_view option, std::string_view flag, double mb) {
  if (!(mb > 0) || !std::isfinite(mb) || mb >= 0x1p43 || MegabytesToBytes(mb) == 0) {
    return absl::InvalidArgumentError(StrCat("[ddp] ", option, " (", flag,
                                             ") must be a positive size of at least one byte "
                                             "and below 2^43 MiB, got ",
                                             mb));
  }
  return absl::OkStatus();
}

// InvalidArgument when `used` but the chosen PyTorch predates `rule`.
absl::Status CheckAvailable(const DdpOptions& options, DdpRule rule, bool used) {
  if (!used || Follows(options.pytorch_version, rule)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("[ddp] ", RuleName(rule), " is PyTorch ", SinceVersion(rule).ToString(),
             "'s, but these options follow PyTorch ", options.pytorch_version.ToString(),
             " (--pytorch-version): choose ", SinceVersion(rule).ToString(),
             " or later, or leave it out"));
}

absl::Status CheckMixedPrecision(const DdpOptions& options) {
  if (!options.mixed_precision) return absl::OkStatus();
  const MixedPrecision& mp = *options.mixed_precision;
  if (mp.param_dtype != DType::kFloat32 && mp.param_dtype != DType::kFloat64) {
    return absl::InvalidArgumentError(
        StrCat("[ddp] mixed_precision: param_dtype ", DTypeName(mp.param_dtype),
               " needs half-precision forward and backward, which ddpkit's ops do not have; "
               "keep param_dtype float32 (ddpkit reproduces the reduction in reduce_dtype)"));
  }
  if (!IsFloatingPoint(mp.Reduce())) {
    return absl::InvalidArgumentError(
        StrCat("[ddp] mixed_precision: reduce_dtype must be a "
               "floating-point dtype, got ",
               DTypeName(mp.Reduce())));
  }
  if (mp.buffer_dtype) {
    return absl::InvalidArgumentError(
        "[ddp] mixed_precision: buffer_dtype is not supported: PyTorch casts every buffer to it, "
        "integer counters too, and ddpkit's ops keep buffers in their own dtype; leave it unset");
  }
  return absl::OkStatus();
}

absl::Status CheckCaps(const DdpOptions& options) {
  if (options.bucket_cap_mb) {
    DDPKIT_RETURN_IF_ERROR(CheckCap("bucket_cap_mb", "--bucket-cap-mb", *options.bucket_cap_mb));
  }
  if (options.first_bucket_mb) {
    DDPKIT_RETURN_IF_ERROR(
        CheckCap("first_bucket_mb", "--first-bucket-mb", *options.first_bucket_mb));
  }
  for (double mb : options.bucket_cap_mb_list) {
    DDPKIT_RETURN_IF_ERROR(CheckCap("each of bucket_cap_mb_list", "--bucket-cap-mb-list", mb));
  }
  const bool list = !options.bucket_cap_mb_list.empty();
  if (list && (options.bucket_cap_mb || options.first_bucket_mb)) {
    return absl::InvalidArgumentError(
        "[ddp] bucket_cap_mb_list (--bucket-cap-mb-list) sets every bucket's cap, the first one's "
        "included: give it alone, without bucket_cap_mb or first_bucket_mb (PyTorch would ignore "
        "them silently)");
  }
  if (options.bucket_cap_mb && options.first_bucket_mb &&
      Follows(options.pytorch_version, DdpRule::kGivenCapCapsFirstBucket)) {
    return absl::InvalidArgumentError(StrCat(
        "[ddp] first_bucket_mb (--first-bucket-mb) has no effect once bucket_cap_mb is given: "
        "since PyTorch 2.4 a given cap caps the first bucket too, and these options follow ",
        options.pytorch_version.ToString(),
        ". Leave bucket_cap_mb unset to keep a small first bucket, or choose "
        "--pytorch-version 1.13"));
  }
  return absl::OkStatus();
}

}  // namespace

size_t MegabytesToBytes(double mb) { return static_cast<size_t>(mb * 1024 * 1024); }

absl::Status ValidateDdpOptions(const DdpOptions& options) {
  if (options.pytorch_version < kOldestPyTorch || options.pytorch_version > kNewestPyTorch) {
    return ParsePyTorchVersion(options.pytorch_version.ToString()).status();
  }
  DDPKIT_RETURN_IF_ERROR(
      CheckAvailable(options, DdpRule::kPerBucketCaps, !options.bucket_cap_mb_list.empty()));
  DDPKIT_RETURN_IF_ERROR(CheckAvailable(options, DdpRule::kForwardSyncBuffers,
                                        options.forward_sync_buffers.has_value()));
  DDPKIT_RETURN_IF_ERROR(CheckAvailable(options, DdpRule::kInitSyncOption, !options.init_sync));
  DDPKIT_RETURN_IF_ERROR(CheckAvailable(options, DdpRule::kSkipAllReduceUnusedParams,
                                        options.skip_all_reduce_unused_params));
  DDPKIT_RETURN_IF_ERROR(
      CheckAvailable(options, DdpRule::kBatchedGradCopy, options.batched_grad_copy));
  DDPKIT_RETURN_IF_ERROR(
      CheckAvailable(options, DdpRule::kMixedPrecision, options.mixed_precision.has_value()));
  DDPKIT_RETURN_IF_ERROR(CheckMixedPrecision(options));
  return CheckCaps(options);
}

BucketCaps BucketCapsOf(const DdpOptions& options) {
  BucketCaps caps;
  BucketLimits& rebuild = caps.rebuild;
  const bool dynamic_find_unused = options.find_unused_parameters && !options.static_graph;
  if (!options.bucket_cap_mb_list.empty()) {  // 2.11: the list for both plans
    for (double mb : options.bucket_cap_mb_list) rebuild.per_bucket.push_back(MegabytesToBytes(mb));
    rebuild.bucket_cap_bytes =
        *std::max_element(rebuild.per_bucket.begin(), rebuild.per_bucket.end());
    rebuild.first_bucket_bytes = rebuild.bucket_cap_bytes;
    caps.initial = rebuild.per_bucket;
    return caps;
  }
  const size_t cap = MegabytesToBytes(options.bucket_cap_mb.value_or(kDefaultBucketCapMb));
  const size_t first = MegabytesToBytes(options.first_bucket_mb.value_or(kDefaultFirstBucketMb));
  rebuild.bucket_cap_bytes = cap;
  rebuild.first_bucket_bytes = first;
  caps.initial = {kNoBucketSizeLimit};
  if (!Follows(options.pytorch_version, DdpRule::kGivenCapCapsFirstBucket)) {
    if (dynamic_find_unused) caps.initial = {first, cap};
    return caps;
  }
  // 2.4: a given cap is every bucket's, the first one's included.
  if (options.bucket_cap_mb) rebuild.first_bucket_bytes = cap;
  if (dynamic_find_unused) {
    caps.initial = rebuild.first_bucket_bytes < cap
                       ? std::vector<size_t>{rebuild.first_bucket_bytes, cap}
                       : std::vector<size_t>{cap};
  }
  return caps;
}

bool SyncsBuffersEachForward(const DdpOptions& options) {
  return options.forward_sync_buffers.value_or(options.broadcast_buffers);
}

bool SyncsBuffersAtConstruction(const DdpOptions& options) {
  if (!Follows(options.pytorch_version, DdpRule::kBuffersFlagCoversInitAndJoin)) return true;
  return options.forward_sync_buffers.has_value() || options.broadcast_buffers;
}

bool SyncsBuffersAtJoinEnd(const DdpOptions& options) {
  if (!Follows(options.pytorch_version, DdpRule::kBuffersFlagCoversInitAndJoin)) return true;
  return SyncsBuffersEachForward(options);
}

}  // namespace ddpkit::reducer
