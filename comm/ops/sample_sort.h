// A distributed sample sort over any ProcessGroup: every rank holds some rows; afterwards rank r
// holds a sorted shard, every row on rank r comes before every row on rank r + 1, and the
// shards together are a permutation of all ranks' rows.
//
//   0. share every rank's row count and width (allgather): bad input fails every rank alike;
//   1. sort locally;
//   2. cut the local rows into s nearly equal blocks (s = min(samples_per_rank, local rows);
//      block k is rows [k·n/s, (k+1)·n/s)) and take each block's first row as a sample,
//      weighted by the block's size;
//   3. allgather the samples (allgather_v: the ranks' counts differ) and sort them;
//   4. pick world − 1 splitters at the weighted quantiles: splitter t is the first sample with
//      at least t · N / world weight before it;
//   5. partition the local rows by the splitters (rank t gets those from splitter t up to
//      splitter t + 1); exchange the counts (all_to_all), then the rows (all_to_all_v);
//   6. merge what arrived (the segments come in rank order, each already sorted), and share
//      the shard sizes (allgather).
//
// Rows are int64 [n, w] and carry their payload: the sort key is column 0, the other columns
// break ties in order, and rows equal in every column keep (source rank, source position)
// order. Samples carry that (rank, position) too, so every row and every splitter has its own
// place in one total order: duplicate and all-equal keys spread over the ranks like distinct
// ones, and the result is the same for any thread timing.
//
// The bound on the largest shard (SampleSortShardBound). The sample weights sum to N; let W(x)
// be the weight of the samples before x. Rank i's rows before a splitter x number between
// S_i − (b_i − 1) and S_i, S_i the weight of its samples before x: only its last block that
// starts before x can straddle x. Shard t holds the rows from splitter t to splitter t + 1
// (−∞ and +∞ at the ends: W = 0 and N), so at most W(upper) − W(lower) + sum_i (b_i − 1)
// rows. W(lower) >= t · N / world; the sample just before the upper splitter has less than
// (t + 1) · N / world before it, and one block's weight of its own, so
// W(upper) − W(lower) < N / world + max_i b_i. Hence
//   largest shard <= ceil(N / world) + max_i b_i + sum_i b_i,   b_i = ceil(n_i / s_i)
// (0 for a rank without rows). With equal inputs and s samples per rank that is about
// N / world + N / s: the oversampling (s / world) sets how close to even the shards are.
//
// Both calls issue their collectives under the caller's ScopedCollectiveTag: a sort is a step
// of whatever job runs it (kJob), not a purpose of its own.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/tensor.h"
#include "comm/process_group.h"

namespace ddpkit::comm {

struct SampleSortOptions {
  int64_t samples_per_rank = 64;  // s: more samples, more even shards, a larger allgather
};

struct SortedShard {
  Tensor rows;                       // int64 [m, w], sorted
  int64_t global_offset = 0;         // rows on the ranks before this one
  int64_t global_rows = 0;           // N: rows over all ranks
  std::vector<int64_t> shard_sizes;  // every rank's m, in rank order
  std::vector<int64_t> input_sizes;  // every rank's n before the sort
};

// Collective: every rank calls it with its rows (host int64 [n, w], w >= 1, n may be 0; the same
// w on every rank). InvalidArgument for bad rows or options, on every rank alike: the rank at
// fault gets the reason, its peers a message naming it; a width mismatch lists every rank's
// width. A comm failure comes back as the comm layer's diagnosis, prefixed with the step
// ("sample sort: exchanging the counts failed: ...").
absl::StatusOr<SortedShard> SampleSort(ProcessGroup& group, const Tensor& rows,
                                       const SampleSortOptions& options = {});

// The largest shard SampleSort can produce for these input sizes, one per rank (world =
// input_sizes.size()), when every rank passed this samples_per_rank (see the bound above).
int64_t SampleSortShardBound(const std::vector<int64_t>& input_sizes, int64_t samples_per_rank);

// Collective: sends row i (host int64 [n, w], the same w on every rank) to rank destination[i]
// (one entry per row, each in [0, world)); returns what this rank received, the rows from rank
// 0 first, each peer's in the order it sent them. Three collectives: the row counts and widths
// (allgather, so bad input fails every rank alike, as in SampleSort), the counts per peer
// (all_to_all), the rows (all_to_all_v).
absl::StatusOr<Tensor> ExchangeRows(ProcessGroup& group, const Tensor& rows,
                                    const std::vector<int>& destination);

}  // namespace ddpkit::comm
