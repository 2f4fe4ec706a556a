#include "tools/jobs/varlen/layout.h"

#include <algorithm>
#include <numeric>

#include "tools/jobs/job.h"

namespace ddpkit::jobs {
namespace {

// An int64 [rows, width] host tensor from row-major values.
Tensor Int64Rows(std::vector<int64_t> values, int64_t width) {
  const int64_t rows = static_cast<int64_t>(values.size()) / width;
  if (rows == 0) return Tensor::Empty({0, width}, DType::kInt64);
  return Tensor::FromVector<int64_t>(std::move(values), {rows, width});
}

// Sends each sorted row (length, id) to the rank its training position deals it to, as
// (position, length, id); returns the rank's rows ordered by position.
absl::StatusOr<RankOrder> Deal(comm::ProcessGroup& group, const comm::SortedShard& shard,
                               const Curriculum& curriculum) {
  const int64_t m = shard.rows.size(0);
  const int64_t* sorted = shard.rows.data<int64_t>();
  std::vector<int64_t> rows;
  std::vector<int> destination;
  for (int64_t k = 0; k < m; ++k) {
    const int64_t q = curriculum.TrainingPosition(shard.global_offset + k);
    rows.insert(rows.end(), {q, sorted[2 * k], sorted[2 * k + 1]});
    destination.push_back(curriculum.RankOf(q));
  }
  DDPKIT_ASSIGN_OR_RETURN(Tensor received,
                          comm::ExchangeRows(group, Int64Rows(std::move(rows), 3), destination));
  const int64_t n = received.size(0);
  const int64_t* r = n > 0 ? received.data<int64_t>() : nullptr;
  std::vector<int64_t> by_position(static_cast<size_t>(n));
  std::iota(by_position.begin(), by_position.end(), 0);
  std::sort(by_position.begin(), by_position.end(),
            [&](int64_t a, int64_t b) { return r[3 * a] < r[3 * b]; });
  RankOrder order;
  for (int64_t i : by_position) {
    order.lengths.push_back(r[3 * i + 1]);
    order.ids.push_back(r[3 * i + 2]);
  }
  return order;
}

}  // namespace

RankOrder SortedPerRank(const SequenceData& data, std::vector<int64_t> share,
                        CurriculumOrder order) {
  std::sort(share.begin(), share.end(), [&](int64_t a, int64_t b) {
    return std::pair(data.length(a), a) < std::pair(data.length(b), b);
  });
  if (order == CurriculumOrder::kDescending) std::reverse(share.begin(), share.end());
  RankOrder sorted{.ids = std::move(share)};
  for (int64_t id : sorted.ids) sorted.lengths.push_back(data.length(id));
  return sorted;
}

absl::StatusOr<RankOrder> SortedGlobally(comm::ProcessGroup& group, const SequenceData& data,
                                         const std::vector<int64_t>& share,
                                         const CurriculumOptions& curriculum,
                                         const comm::SampleSortOptions& sort_options,
                                         SortStats& sort) {
  std::vector<int64_t> rows;
  for (int64_t id : share) rows.insert(rows.end(), {data.length(id), id});
  DDPKIT_ASSIGN_OR_RETURN(comm::SortedShard shard,
                          comm::SampleSort(group, Int64Rows(std::move(rows), 2), sort_options));
  sort.input_sizes = shard.input_sizes;
  sort.shard_sizes = shard.shard_sizes;
  sort.shard_bound = comm::SampleSortShardBound(shard.input_sizes, sort_options.samples_per_rank);
  return Deal(group, shard, Curriculum(shard.global_rows, group.size(), curriculum));
}

absl::StatusOr<std::vector<std::vector<Batch>>> ShareBatches(comm::ProcessGroup& group,
                                                             const std::vector<Batch>& mine) {
  const int world = group.size();
  Tensor counts = Tensor::Empty({world}, DType::kInt64);
  Tensor count = Tensor::FromVector<int64_t>({static_cast<int64_t>(mine.size())}, {1});
  DDPKIT_RETURN_IF_ERROR(WaitFor(group.Allgather(count, counts), "sharing the batch counts"));
  std::vector<int64_t> elements(static_cast<size_t>(world));
  int64_t total = 0;
  for (int r = 0; r < world; ++r) total += elements[r] = 3 * counts.data<int64_t>()[r];
  // Each batch as (count, longest, tokens); begin and end follow from the counts.
  std::vector<int64_t> flat;
  for (const Batch& b : mine) flat.insert(flat.end(), {b.count(), b.longest, b.tokens});
  if (flat.empty()) flat.push_back(0);  // a tensor needs an element; the count says none
  Tensor input = Tensor::FromVector<int64_t>(flat, {static_cast<int64_t>(flat.size())});
  Tensor all = Tensor::Empty({std::max<int64_t>(total, 1)}, DType::kInt64);
  DDPKIT_RETURN_IF_ERROR(
      WaitFor(group.AllgatherV(input.Rows(0, elements[group.rank()]), all.Rows(0, total), elements),
              "sharing the batches"));
  std::vector<std::vector<Batch>> batches(static_cast<size_t>(world));
  const int64_t* v = all.data<int64_t>();
  for (int r = 0; r < world; ++r) {
    int64_t begin = 0;
    for (int64_t i = 0; i < elements[r]; i += 3, v += 3) {
      batches[r].push_back({.begin = begin, .end = begin + v[0], .longest = v[1], .tokens = v[2]});
      begin += v[0];
    }
  }
  return batches;
}

}  // namespace ddpkit::jobs
