#include "reducer/pytorch_version.h"

#include <cctype>

#include "autograd/base/error.h"

namespace ddpkit::reducer {
namespace {

// Reads the digits at `pos`; false when there are none or too many to be a release number.
bool ReadNumber(std::string_view text, size_t& pos, int& value) {
  const size_t start = pos;
  value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])) &&
         pos - start < 4) {
    value = value * 10 + (text[pos++] - '0');
  }
  return pos > start &&
         (pos == text.size() || !std::isdigit(static_cast<unsigned char>(text[pos])));
}

// What may follow MAJOR.MINOR: nothing, ".PATCH...", "+local" or a pre-release ("rc1", "a0").
bool ValidTail(std::string_view tail) {
  if (tail.empty() || tail[0] == '+' || std::isalpha(static_cast<unsigned char>(tail[0]))) {
    return true;
  }
  return tail.size() > 1 && tail[0] == '.' && std::isdigit(static_cast<unsigned char>(tail[1]));
}

absl::StatusOr<PyTorchVersion> ParseAny(std::string_view text) {
  PyTorchVersion v;
  size_t pos = 0;
  if (!ReadNumber(text, pos, v.major) || pos >= text.size() || text[pos++] != '.' ||
      !ReadNumber(text, pos, v.minor) || !ValidTail(text.substr(pos))) {
    return absl::InvalidArgumentError(
        StrCat("'", text,
               "' is not a PyTorch version; give MAJOR.MINOR, as 2.15 or 1.13 (what "
               "torch.__version__ prints is accepted too)"));
  }
  return v;
}

std::string KnownRange() {
  return StrCat("ddpkit reproduces DDP as PyTorch ", kOldestPyTorch.ToString(), " to ",
                kNewestPyTorch.ToString(), " do it");
}

}  // namespace

std::string PyTorchVersion::ToString() const { return StrCat(major, ".", minor); }

std::string RulesFollowed(PyTorchVersion version) {
  return StrCat("PyTorch ", version.ToString(), "'s DDP");
}

absl::StatusOr<PyTorchVersion> ParsePyTorchVersion(std::string_view text) {
  DDPKIT_ASSIGN_OR_RETURN(const PyTorchVersion v, ParseAny(text));
  if (v < kOldestPyTorch || v > kNewestPyTorch) {
    return absl::InvalidArgumentError(
        StrCat("PyTorch ", v.ToString(), " is not one ddpkit knows: ", KnownRange(),
               "; choose one of those (", kNewestPyTorch.ToString(), " is today's)"));
  }
  return v;
}

absl::StatusOr<PyTorchVersion> NearestKnownPyTorch(std::string_view text, std::string* note) {
  DDPKIT_ASSIGN_OR_RETURN(PyTorchVersion v, ParseAny(text));
  note->clear();
  const PyTorchVersion nearest = v < kOldestPyTorch   ? kOldestPyTorch
                                 : v > kNewestPyTorch ? kNewestPyTorch
                                                      : v;
  if (nearest != v) {
    *note = StrCat("recorded with PyTorch ", v.ToString(), "; ", KnownRange(), ", so ",
                   nearest.ToString(), "'s rules are followed");
  }
  return nearest;
}

PyTorchVersion SinceVersion(DdpRule rule) {
  switch (rule) {
    case DdpRule::kStaticGraphCountsBackwards:
    case DdpRule::kBuffersFlagCoversInitAndJoin:
    case DdpRule::kMixedPrecision:
    case DdpRule::kDelayAllReduceNamedParams: return {2, 1};
    case DdpRule::kGivenCapCapsFirstBucket:
    case DdpRule::kNoSyncRecordsUse: return {2, 4};
    case DdpRule::kSkipAllReduceUnusedParams:
    case DdpRule::kInitSyncOption: return {2, 8};
    case DdpRule::kPerBucketCaps: return {2, 11};
    case DdpRule::kForwardSyncBuffers:
    case DdpRule::kBatchedGradCopy: return {2, 13};
  }
  DDPKIT_INTERNAL_CHECK(false, "unknown DdpRule");
  return kNewestPyTorch;
}

std::string_view RuleName(DdpRule rule) {
  switch (rule) {
    case DdpRule::kStaticGraphCountsBackwards:
      return "static graph's first iteration counted from the first backward";
    case DdpRule::kBuffersFlagCoversInitAndJoin:
      return "broadcast_buffers=False at construction and in Join's final sync";
    case DdpRule::kGivenCapCapsFirstBucket:
      return "a given bucket_cap_mb caps the first bucket too";
    case DdpRule::kNoSyncRecordsUse: return "a parameter used under no_sync counts as used";
    case DdpRule::kSkipAllReduceUnusedParams: return "skip_all_reduce_unused_params";
    case DdpRule::kInitSyncOption: return "init_sync";
    case DdpRule::kPerBucketCaps: return "bucket_cap_mb_list";
    case DdpRule::kForwardSyncBuffers: return "forward_sync_buffers";
    case DdpRule::kBatchedGradCopy: return "batched_grad_copy";
    case DdpRule::kMixedPrecision: return "mixed_precision";
    case DdpRule::kDelayAllReduceNamedParams: return "delay_all_reduce_named_params";
  }
  return "?";
}

}  // namespace ddpkit::reducer
