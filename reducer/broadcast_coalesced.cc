#include "reducer/broadcast_coalesced.h"

#include <deque>

#include "reducer/bucket_assignment.h"
#include "reducer/reducer_errors.h"

namespace ddpkit::reducer {
namespace {

// One bucket's broadcast: the flat tensor it travels in and the tensors it came from.
struct BucketBroadcast {
  std::vector<size_t> members;
  Tensor flat;
  std::shared_ptr<comm::Work> work;
};

// The bucket's tensors end to end; only the root's values matter, so the others leave it unset
// (the broadcast overwrites all of it).
Tensor Flatten(const NamedTensors& tensors, const std::vector<size_t>& members, bool is_root) {
  int64_t total = 0;
  for (size_t i : members) total += tensors[i].second.numel();
  const Tensor& first = tensors[members.front()].second;
  Tensor flat = Tensor::Uninitialized({total}, first.dtype(), first.device());
  if (!is_root) return flat;
  int64_t offset = 0;
  for (size_t i : members) {
    const int64_t n = tensors[i].second.numel();
    flat.Rows(offset, offset + n).CopyFrom(tensors[i].second.Detach().Flatten());
    offset += n;
  }
  return flat;
}

// Waits for the bucket, then copies its values back into its tensors.
absl::Status Finish(const BucketBroadcast& b, const NamedTensors& tensors, int rank, int root,
                    std::string_view kind) {
  if (absl::Status s = b.work->Wait(); !s.ok()) {
    const std::string more =
        b.members.size() > 1 ? StrCat(" and ", b.members.size() - 1, " more in its bucket") : "";
    return CommFailure(rank,
                       StrCat("broadcasting ", kind, " '", tensors[b.members.front()].first, "'",
                              more, " from rank ", root),
                       s);
  }
  int64_t offset = 0;
  for (size_t i : b.members) {
    const int64_t n = tensors[i].second.numel();
    tensors[i].second.Detach().Flatten().CopyFrom(b.flat.Rows(offset, offset + n));
    offset += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status BroadcastCoalesced(const NamedTensors& tensors, comm::ProcessGroup& group, int root,
                                std::string_view kind, size_t bucket_bytes) {
  if (tensors.empty()) return absl::OkStatus();
  absl::StatusOr<BucketAssignment> buckets =
      ComputeBucketAssignmentBySize(SpecsOf(tensors), {bucket_bytes});
  if (!buckets.ok()) return buckets.status();
  // At most two buckets in flight, as PyTorch: each holds a copy of its tensors.
  constexpr size_t kMaxInFlight = 2;
  std::deque<BucketBroadcast> in_flight;
  for (std::vector<size_t>& members : buckets->buckets) {
    if (in_flight.size() == kMaxInFlight) {
      DDPKIT_RETURN_IF_ERROR(Finish(in_flight.front(), tensors, group.rank(), root, kind));
      in_flight.pop_front();
    }
    Tensor flat = Flatten(tensors, members, group.rank() == root);
    std::shared_ptr<comm::Work> work = group.Broadcast(flat, root);
    in_flight.push_back({std::move(members), std::move(flat), std::move(work)});
  }
  for (const BucketBroadcast& b : in_flight) {
    DDPKIT_RETURN_IF_ERROR(Finish(b, tensors, group.rank(), root, kind));
  }
  return absl::OkStatus();
}

}  // namespace ddpkit::reducer
