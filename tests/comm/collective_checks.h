// Runs every collective of a process group on deterministic per-rank data and compares each
// result with a reference computed locally. Shared by the threads-world tests and the
// multi-process Gloo worker (tests/comm/gloo_worker.cc), so both backends face the same checks.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "comm/process_group.h"

namespace ddpkit::comm::testing_util {

// Rank r's value for element i: a small integer in [-3, 9], exact in every dtype (integers,
// float16 and bfloat16 included), as are its sums over up to 8 ranks.
double InputValue(int rank, int64_t i);

// Every collective (allreduce with each op, broadcast from each root, allgather, allgather_v,
// reduce_scatter, all_to_all_v, barrier) with `count` elements per rank. Returns the first
// mismatch, naming the collective, the element, the value and the expected value.
absl::Status CheckAllCollectives(ProcessGroup& group, DType dtype, int64_t count);

}  // namespace ddpkit::comm::testing_util
