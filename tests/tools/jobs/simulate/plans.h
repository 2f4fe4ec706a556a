// Bucket plans written out by hand for the simulator's tests.
#pragma once

#include <utility>
#include <vector>

#include "reducer/bucket_assignment.h"

namespace ddpkit::jobs::sim::test_plans {

// Buckets in launch order, each its parameters' indices (the limits do not matter here).
inline reducer::BucketAssignment Plan(std::vector<std::vector<size_t>> buckets) {
  reducer::BucketAssignment plan;
  plan.limits.assign(buckets.size(), 1);
  plan.buckets = std::move(buckets);
  return plan;
}

}  // namespace ddpkit::jobs::sim::test_plans
