// Runs every collective of a process group on deterministic per-rank data and compares each
// result with a reference computed locally. Shared by the threads-world tests and the
// multi-process Gloo worker (tests/comm/gloo_worker.cc), so both backends face the same checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "comm/ops/sample_sort.h"
#include "comm/process_group.h"

namespace ddpkit::comm::testing_util {

// Rank r's value for element i: a small integer in [-3, 9], exact in every dtype (integers,
// float16 and bfloat16 included), as are its sums over up to 8 ranks.
double InputValue(int rank, int64_t i);

// Every collective (allreduce with each op, broadcast from each root, allgather, allgather_v,
// reduce_scatter, all_to_all_v — also with a rank that sends and receives nothing — barrier)
// with `count` elements per rank. Returns the first
// mismatch, naming the collective, the element, the value and the expected value.
absl::Status CheckAllCollectives(ProcessGroup& group, DType dtype, int64_t count);

// One input of the sample sort property checks: every rank's rows, drawn deterministically so
// that each rank can rebuild every other rank's input and so the whole sorted order.
struct SampleSortCase {
  std::string name;
  std::vector<int64_t> rows_per_rank;  // one entry per rank of the world
  int64_t width = 3;
  int64_t key_range = 1000;  // column 0 in [0, key_range): 1 makes every key equal
  // The other columns: 0 makes them (source rank, source position, 0, ...), so every row is
  // distinct and the checks see each one arrive intact; otherwise values in [0, payload_range),
  // which makes rows equal in every column.
  int64_t payload_range = 0;
  int64_t samples_per_rank = 64;
};

// Rank `rank`'s rows for `c`: int64 [rows_per_rank[rank], width].
Tensor SampleSortInput(const SampleSortCase& c, int rank);

// The cases for a world of `world` ranks: no rows anywhere, one row, small, large (20000 rows),
// skewed (one rank holds almost everything), a rank without rows, duplicate rows, all-equal
// rows and keys, and 1 or 4 samples per rank.
std::vector<SampleSortCase> SampleSortCases(int world);

// Runs SampleSort twice on this rank's input for `c` and checks that the shard is sorted and is
// exactly its slice of the global order (every rank's input, rebuilt here and stably sorted:
// this covers the order across shards and that no row is lost, duplicated or altered); that
// the sizes, offsets and input sizes are right; that the largest shard is within
// SampleSortShardBound; and that the second run gives the identical shard. Returns the shard.
absl::StatusOr<SortedShard> CheckSampleSort(ProcessGroup& group, const SampleSortCase& c);

// ExchangeRows with a rank that sends nothing and peers that receive nothing from some ranks:
// each rank receives exactly the rows addressed to it, rank 0's first, each peer's in send
// order.
absl::Status CheckExchangeRows(ProcessGroup& group);

// Rank 1 sorts rows of another width: every rank gets the same InvalidArgument (listing each
// rank's width), and the group still sorts afterwards. Needs a world of 2 or more.
absl::Status CheckSampleSortRejectsMismatchedWidths(ProcessGroup& group);

// The contract every backend keeps (comm/process_group.h), on tensors on `device`: float16 AVG
// is reduced in float32 and divided once; a reduce op the backend does not handle fails with
// Unimplemented naming the backend, the op, the reduce op and the dtype, and leaves the group
// unusable, as every failure does. Run it last: it breaks the group.
absl::Status CheckBackendContract(ProcessGroup& group, Device device);

// The fault modes every multi-process worker runs (gloo_worker, mpi_worker), each returning the
// worker's exit status.
// "stop": rank 2 stops itself (SIGSTOP: alive, silent) after a first allreduce; the others time
// out in the second: 4 (a failed job, so the launcher ends the stuck rank), 1 if it succeeded.
int StoppedRankMode(ProcessGroup& group);
// "mismatch": rank 0 allreduces 4 elements, the others 5 (run at DETAIL): 0 when every rank got
// the calls' FailedPrecondition, else 1.
int MismatchMode(ProcessGroup& group);

}  // namespace ddpkit::comm::testing_util
