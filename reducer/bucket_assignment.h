// Bucket assignment: which parameters share a gradient bucket, as PyTorch's
// compute_bucket_assignment_by_size.
//
// Parameters are walked in order and appended to the open bucket of their dtype (one open
// bucket per dtype — per (dtype, device) in PyTorch; a model here lives on one device, CPU or
// one GPU, which the reducer checks when it lays the buckets out). A bucket
// closes as soon as its bytes reach its limit (>=, checked after adding), so tensors are never
// split and a bucket may exceed its limit by up to one tensor; a tensor larger than the limit
// is a bucket of its own. Each dtype walks the limit list on its own, one step per closed
// bucket, and the last limit repeats forever. Parameters expecting a sparse gradient are
// singleton buckets with limit 0 ("no limit").
//
// Without an arrival order (DDP's constructor) buckets come out sorted by their smallest
// index; with one (the rebuild) they keep the order they were emitted in: buckets that filled
// up, in the order they filled, then the leftovers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/dtype.h"
#include "autograd/nn/nn.h"

namespace ddpkit::reducer {

// What the assignment needs to know of a parameter: its element count and dtype.
struct BucketTensorSpec {
  int64_t numel = 0;
  DType dtype = DType::kFloat32;
  size_t nbytes() const { return static_cast<size_t>(numel) * ElementSize(dtype); }
};

struct BucketAssignment {
  std::vector<std::vector<size_t>> buckets;  // parameter indices per bucket
  std::vector<size_t> limits;                // the byte limit each bucket was closed under
};

inline constexpr size_t kDefaultFirstBucketBytes = 1024 * 1024;     // 1 MiB
inline constexpr size_t kDefaultBucketBytesCap = 25 * 1024 * 1024;  // 25 MiB
// DDP's first-iteration limit when buckets are not size-bounded (PyTorch's sys.maxsize).
inline constexpr size_t kNoBucketSizeLimit = static_cast<size_t>(INT64_MAX);

// `tensors[i]` describes parameter i. `expect_sparse` is empty or one flag per parameter.
// `arrival_order`, when given, is a permutation of the parameter indices: the order gradients
// arrived in; the walk follows it and the result is not sorted. InvalidArgument for an empty
// parameter list, an empty limit list, a zero limit, or a malformed sparse list / order.
absl::StatusOr<BucketAssignment> ComputeBucketAssignmentBySize(
    const std::vector<BucketTensorSpec>& tensors, const std::vector<size_t>& limits,
    const std::vector<bool>& expect_sparse = {}, const std::vector<size_t>& arrival_order = {});

// The limits DDP's rebuilt plan walks: a small first bucket, so the first allreduce starts early
// in backward, then the cap for every later one (PyTorch's first_bucket_bytes, bucket_bytes_cap)
// — or, given PyTorch 2.11's bucket_cap_mb_list, one cap per bucket, the last repeating.
struct BucketLimits {
  size_t first_bucket_bytes = kDefaultFirstBucketBytes;
  size_t bucket_cap_bytes = kDefaultBucketBytesCap;  // the list's largest when there is one
  std::vector<size_t> per_bucket;                    // empty: [first bucket, cap]
  std::vector<size_t> Walk() const {
    return per_bucket.empty() ? std::vector<size_t>{first_bucket_bytes, bucket_cap_bytes}
                              : per_bucket;
  }
};

// DDP's plan after its rebuild: `arrival_order` (the gradient arrival order of the first synced
// backward) walked under `limits`, buckets in the order they filled. The reducer's rebuild calls
// this; so do the tests. Throws ddpkit::Error for an order that is not a permutation.
BucketAssignment RebuiltBucketAssignment(const std::vector<BucketTensorSpec>& tensors,
                                         const std::vector<size_t>& arrival_order,
                                         BucketLimits limits = {});

// Each bucket's limit in a plan made by walking `walk` in arrival order (buckets in the order
// they filled, then the leftovers): the j-th bucket of a dtype closed under walk[j], the last
// limit repeating. What a rank that adopts rank 0's rebuilt plan logs, as rank 0 does.
std::vector<size_t> LimitsAlongTheWalk(const std::vector<std::vector<size_t>>& buckets,
                                       const std::vector<BucketTensorSpec>& tensors,
                                       const std::vector<size_t>& walk);

// InvalidArgument unless `plan` can lay out `tensors`' gradients: as many limits as buckets,
// every bucket non-empty and of one dtype, and every parameter index in exactly one bucket.
// For a plan from outside bytes (a checkpoint's, docs/reliability.md); says what is wrong.
absl::Status CheckBucketAssignment(const std::vector<BucketTensorSpec>& tensors,
                                   const BucketAssignment& plan);

// Each parameter's element count and dtype, in order.
std::vector<BucketTensorSpec> SpecsOf(const NamedTensors& parameters);

// "[[0, 2], [1]]" — the compact form used in logs and errors.
std::string BucketsToString(const std::vector<std::vector<size_t>>& buckets);

}  // namespace ddpkit::reducer
