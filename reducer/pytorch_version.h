// Which PyTorch release's DDP ddpkit reproduces. DDP's observable behaviour — bucket plans,
// collectives at construction and in Join, the options it accepts — changed between 1.13 (2022)
// and 2.15 (today's); each change is a DdpRule below, tied to the release that made it, and
// docs/reducer.md's version table lists them with their pull requests. ddpkit follows 2.15 unless
// told otherwise (--pytorch-version, a plan file's torch_version, DdpOptions::pytorch_version).
#pragma once

#include <compare>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ddpkit::reducer {

struct PyTorchVersion {
  int major = 2;
  int minor = 15;

  friend constexpr auto operator<=>(const PyTorchVersion&, const PyTorchVersion&) = default;
  std::string ToString() const;  // "2.15"
};

// "PyTorch 2.15's DDP" — what every report says it followed.
std::string RulesFollowed(PyTorchVersion version);

inline constexpr PyTorchVersion kOldestPyTorch{1, 13};
inline constexpr PyTorchVersion kNewestPyTorch{2, 15};
inline constexpr PyTorchVersion kDefaultPyTorch = kNewestPyTorch;

// "2.15", "2.15.0", "1.13.1+cpu", "2.4.0a0+git1234": the release's major.minor, anything after
// ignored. InvalidArgument for text that is not a version, or one outside [1.13, 2.15], saying
// which releases ddpkit knows.
absl::StatusOr<PyTorchVersion> ParsePyTorchVersion(std::string_view text);

// A version recorded by someone else's PyTorch (a plan file's torch_version): releases outside
// [1.13, 2.15] are clamped to the nearest one ddpkit knows, and `note` says so ("" otherwise).
// InvalidArgument only for text that is not a version at all.
absl::StatusOr<PyTorchVersion> NearestKnownPyTorch(std::string_view text, std::string* note);

// Each observable change to DDP since 1.13, named for what it does.
enum class DdpRule {
  // 2.1 (PR 103487): static graph's first iteration is the first backward, not the first forward.
  kStaticGraphCountsBackwards,
  // 2.1: broadcast_buffers=False also skips buffers at construction and in Join's final sync.
  kBuffersFlagCoversInitAndJoin,
  // 2.4 (PR 121640): a bucket_cap_mb the user passes caps the first bucket too.
  kGivenCapCapsFirstBucket,
  // 2.4 (PR 124193, issue 69031): a parameter used under no_sync counts as used at the synced
  // step (find_unused_parameters); 1.13 reduced only what the synced backward used.
  kNoSyncRecordsUse,
  // 2.8 (PR 151503): skip_all_reduce_unused_params; num_buckets_reduced in the logging data.
  kSkipAllReduceUnusedParams,
  // 2.8 (PR 142824): init_sync=False skips the construction-time check and broadcast.
  kInitSyncOption,
  // 2.11: bucket_cap_mb_list, a cap per bucket.
  kPerBucketCaps,
  // 2.13: forward_sync_buffers (broadcast_buffers deprecated), batched_grad_copy.
  kForwardSyncBuffers,
  kBatchedGradCopy,
  // 2.1: native mixed precision (mixed_precision=) and delay_all_reduce_named_params.
  kMixedPrecision,
  kDelayAllReduceNamedParams,
};

// The first release that has `rule`, and a few words on it for errors and reports.
PyTorchVersion SinceVersion(DdpRule rule);
std::string_view RuleName(DdpRule rule);

inline bool Follows(PyTorchVersion version, DdpRule rule) { return version >= SinceVersion(rule); }

}  // namespace ddpkit::reducer
