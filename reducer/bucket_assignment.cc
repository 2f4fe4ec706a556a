#include "reducer/bucket_assignment.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"

namespace ddpkit::reducer {
namespace {

// The bucket being filled for one dtype, and where that dtype is in the limit list.
struct OpenBucket {
  DType dtype;
  std::vector<size_t> indices;
  size_t bytes = 0;
  size_t limit_index = 0;
};

absl::Status ValidateArguments(const std::vector<BucketTensorSpec>& tensors,
                               const std::vector<size_t>& limits,
                               const std::vector<bool>& expect_sparse,
                               const std::vector<size_t>& arrival_order) {
  if (tensors.empty()) {
    return absl::InvalidArgumentError("bucket assignment needs at least one parameter");
  }
  if (limits.empty()) {
    return absl::InvalidArgumentError("bucket assignment needs at least one size limit");
  }
  for (size_t limit : limits) {
    if (limit == 0) {
      return absl::InvalidArgumentError(
          "bucket size limits must be positive (0 would close a bucket before any parameter "
          "joined it)");
    }
  }
  if (!expect_sparse.empty() && expect_sparse.size() != tensors.size()) {
    return absl::InvalidArgumentError(StrCat("the sparse-gradient list has ", expect_sparse.size(),
                                             " entries for ", tensors.size(),
                                             " parameters; give one per parameter or none"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel < 0) {
      return absl::InvalidArgumentError(StrCat("parameter ", i, " has a negative size"));
    }
  }
  if (!arrival_order.empty()) {
    if (arrival_order.size() != tensors.size()) {
      return absl::InvalidArgumentError(StrCat("the arrival order lists ", arrival_order.size(),
                                               " parameters, but there are ", tensors.size(),
                                               "; it must name every parameter exactly once"));
    }
    std::vector<bool> seen(tensors.size(), false);
    for (size_t index : arrival_order) {
      if (index >= tensors.size()) {
        return absl::InvalidArgumentError(StrCat("the arrival order names parameter ", index,
                                                 ", but indices run from 0 to ",
                                                 tensors.size() - 1));
      }
      if (seen[index]) {
        return absl::InvalidArgumentError(
            StrCat("the arrival order names parameter ", index, " twice"));
      }
      seen[index] = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BucketAssignment> ComputeBucketAssignmentBySize(
    const std::vector<BucketTensorSpec>& tensors, const std::vector<size_t>& limits,
    const std::vector<bool>& expect_sparse, const std::vector<size_t>& arrival_order) {
  DDPKIT_RETURN_IF_ERROR(ValidateArguments(tensors, limits, expect_sparse, arrival_order));

  BucketAssignment result;
  auto emit = [&](std::vector<size_t> indices, size_t limit) {
    result.buckets.push_back(std::move(indices));
    result.limits.push_back(limit);
  };
  // One open bucket per dtype, kept in order of first appearance so that leftovers come out
  // deterministically (PyTorch leaves their order to a hash map).
  std::vector<OpenBucket> open;

  for (size_t position = 0; position < tensors.size(); ++position) {
    const size_t index = arrival_order.empty() ? position : arrival_order[position];
    const BucketTensorSpec& tensor = tensors[index];
    if (!expect_sparse.empty() && expect_sparse[index]) {
      emit({index}, 0);  // sparse gradients never share a bucket
      continue;
    }
    auto it = std::find_if(open.begin(), open.end(),
                           [&](const OpenBucket& b) { return b.dtype == tensor.dtype; });
    if (it == open.end())
      it = open.insert(open.end(), OpenBucket{.dtype = tensor.dtype, .indices = {}});
    OpenBucket& bucket = *it;
    bucket.indices.push_back(index);
    bucket.bytes += tensor.nbytes();
    const size_t limit = limits[bucket.limit_index];
    if (bucket.bytes >= limit) {
      emit(std::move(bucket.indices), limit);
      bucket.indices.clear();
      bucket.bytes = 0;
      if (bucket.limit_index + 1 < limits.size()) ++bucket.limit_index;  // the last one repeats
    }
  }
  for (OpenBucket& bucket : open) {
    if (!bucket.indices.empty()) emit(std::move(bucket.indices), limits[bucket.limit_index]);
  }

  if (arrival_order.empty()) {
    // Sort by smallest index; indices are unique, so the order is total.
    std::vector<size_t> order(result.buckets.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto smallest = [&](size_t b) {
      return *std::min_element(result.buckets[b].begin(), result.buckets[b].end());
    };
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return smallest(a) < smallest(b); });
    BucketAssignment sorted;
    for (size_t b : order) {
      sorted.buckets.push_back(std::move(result.buckets[b]));
      sorted.limits.push_back(result.limits[b]);
    }
    return sorted;
  }
  return result;
}

BucketAssignment RebuiltBucketAssignment(const std::vector<BucketTensorSpec>& tensors,
                                         const std::vector<size_t>& arrival_order,
                                         BucketLimits limits) {
  absl::StatusOr<BucketAssignment> rebuilt =
      ComputeBucketAssignmentBySize(tensors, limits.Walk(), {}, arrival_order);
  if (!rebuilt.ok()) ThrowStatus(rebuilt.status());
  return *std::move(rebuilt);
}

std::vector<size_t> LimitsAlongTheWalk(const std::vector<std::vector<size_t>>& buckets,
                                       const std::vector<BucketTensorSpec>& tensors,
                                       const std::vector<size_t>& walk) {
  std::vector<size_t> limits;
  std::vector<std::pair<DType, size_t>> seen;  // buckets per dtype so far
  for (const std::vector<size_t>& bucket : buckets) {
    const DType dtype = tensors.at(bucket.at(0)).dtype;
    auto it =
        std::find_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == dtype; });
    if (it == seen.end()) it = seen.insert(seen.end(), {dtype, 0});
    limits.push_back(walk[std::min(it->second++, walk.size() - 1)]);
  }
  return limits;
}

absl::Status CheckBucketAssignment(const std::vector<BucketTensorSpec>& tensors,
                                   const BucketAssignment& plan) {
  if (plan.buckets.empty() || plan.limits.size() != plan.buckets.size()) {
    return absl::InvalidArgumentError(StrCat("the plan has ", plan.buckets.size(), " buckets and ",
                                             plan.limits.size(), " limits"));
  }
  std::vector<bool> seen(tensors.size(), false);
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const std::vector<size_t>& bucket = plan.buckets[b];
    if (bucket.empty()) return absl::InvalidArgumentError(StrCat("bucket ", b, " is empty"));
    for (size_t index : bucket) {
      if (index >= tensors.size() || seen[index]) {
        return absl::InvalidArgumentError(
            StrCat("bucket ", b, " names parameter ", index,
                   index >= tensors.size() ? StrCat(", but the model has ", tensors.size())
                                           : std::string(", which an earlier bucket holds")));
      }
      seen[index] = true;
      if (tensors[index].dtype != tensors[bucket[0]].dtype) {
        return absl::InvalidArgumentError(StrCat("bucket ", b, " mixes dtypes"));
      }
    }
  }
  const size_t missing = std::find(seen.begin(), seen.end(), false) - seen.begin();
  if (missing < seen.size()) {
    return absl::InvalidArgumentError(StrCat("no bucket holds parameter ", missing));
  }
  return absl::OkStatus();
}

std::vector<BucketTensorSpec> SpecsOf(const NamedTensors& parameters) {
  std::vector<BucketTensorSpec> specs;
  for (const auto& [name, p] : parameters) specs.push_back({p.numel(), p.dtype()});
  return specs;
}

std::string BucketsToString(const std::vector<std::vector<size_t>>& buckets) {
  std::string out = "[";
  for (size_t b = 0; b < buckets.size(); ++b) {
    StrAppend(&out, b == 0 ? "" : ", ", "[", absl::StrJoin(buckets[b], ", "), "]");
  }
  return out + "]";
}

}  // namespace ddpkit::reducer
