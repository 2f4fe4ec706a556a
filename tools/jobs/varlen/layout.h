// Building each rank's training order, the two ways `ddpkit varlen` compares (curriculum.h),
// and sharing every rank's batches so each rank can cost the layout and schedule the LR.
// Every function here is collective: all ranks of the group call it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/ops/sample_sort.h"
#include "comm/process_group.h"
#include "tools/jobs/varlen/batching.h"
#include "tools/jobs/varlen/curriculum.h"
#include "tools/jobs/varlen/sequence_data.h"

namespace ddpkit::jobs {

// A rank's samples in the order it trains on them.
struct RankOrder {
  std::vector<int64_t> ids = {};
  std::vector<int64_t> lengths = {};
};

// Before: the rank's sampler share sorted by (length, id) on its own, longest first for a
// descending curriculum. (Not collective.)
RankOrder SortedPerRank(const SequenceData& data, std::vector<int64_t> share,
                        CurriculumOrder order);

// After, the recipe: the ranks sort all (length, id) pairs together with a distributed sample
// sort, then deal the sorted order out with the curriculum (round-robin). Each rank contributes
// only its sampler share: it needs to have measured only its own samples. `sort` gets the sort's
// shard sizes and bound.
struct SortStats {
  std::vector<int64_t> input_sizes, shard_sizes;
  int64_t shard_bound = 0;
};
absl::StatusOr<RankOrder> SortedGlobally(comm::ProcessGroup& group, const SequenceData& data,
                                         const std::vector<int64_t>& share,
                                         const CurriculumOptions& curriculum,
                                         const comm::SampleSortOptions& sort_options,
                                         SortStats& sort);

// Every rank's batches, in rank order (each rank sends its count, then its batches).
absl::StatusOr<std::vector<std::vector<Batch>>> ShareBatches(comm::ProcessGroup& group,
                                                             const std::vector<Batch>& mine);

}  // namespace ddpkit::jobs
