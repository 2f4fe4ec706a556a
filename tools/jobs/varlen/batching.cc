#include "tools/jobs/varlen/batching.h"

#include <algorithm>

#include "autograd/base/error.h"

namespace ddpkit::jobs {
namespace {

// Appends sample i (of length `length`) to `batch`, which ends at i.
void Extend(Batch& batch, int64_t length) {
  ++batch.end;
  batch.longest = std::max(batch.longest, length);
  batch.tokens += length;
}

}  // namespace

std::vector<Batch> FixedSizeBatches(std::span<const int64_t> lengths, int64_t batch_size) {
  DDPKIT_CHECK(batch_size >= 1, "[batching] batch size must be >= 1, got ", batch_size);
  std::vector<Batch> batches;
  for (int64_t i = 0; i < static_cast<int64_t>(lengths.size()); ++i) {
    if (i % batch_size == 0) batches.push_back({.begin = i, .end = i});
    Extend(batches.back(), lengths[i]);
  }
  return batches;
}

absl::StatusOr<std::vector<Batch>> TokenBudgetBatches(std::span<const int64_t> lengths,
                                                      std::span<const int64_t> ids,
                                                      int64_t max_tokens) {
  DDPKIT_CHECK(lengths.size() == ids.size(), "[batching] ", lengths.size(), " lengths but ",
               ids.size(), " ids");
  std::vector<Batch> batches;
  for (int64_t i = 0; i < static_cast<int64_t>(lengths.size()); ++i) {
    if (lengths[i] > max_tokens) {
      return absl::InvalidArgumentError(StrCat(
          "--max-tokens ", max_tokens, " is less than sample ", ids[i], "'s length ", lengths[i],
          ": every sample must fit in a batch on its own; raise --max-tokens to at least the "
          "longest sample"));
    }
    const bool fits =
        !batches.empty() &&
        (batches.back().count() + 1) * std::max(batches.back().longest, lengths[i]) <= max_tokens;
    if (!fits) batches.push_back({.begin = i, .end = i});
    Extend(batches.back(), lengths[i]);
  }
  return batches;
}

LayoutCost CostOf(const std::vector<std::vector<Batch>>& batches_per_rank) {
  LayoutCost cost;
  const size_t world = batches_per_rank.size();
  for (const std::vector<Batch>& batches : batches_per_rank) {
    cost.batches_per_rank.push_back(static_cast<int64_t>(batches.size()));
    cost.steps = std::max<int64_t>(cost.steps, static_cast<int64_t>(batches.size()));
    for (const Batch& b : batches) {
      cost.tokens += b.tokens;
      cost.padded_total += b.padded();
    }
  }
  double busiest_total = 0;
  for (int64_t t = 0; t < cost.steps; ++t) {
    std::vector<int64_t>& row = cost.padded.emplace_back(world, 0);
    for (size_t r = 0; r < world; ++r) {
      if (t < static_cast<int64_t>(batches_per_rank[r].size()))
        row[r] = batches_per_rank[r][t].padded();
    }
    const double busiest = static_cast<double>(*std::max_element(row.begin(), row.end()));
    double sum = 0;
    for (int64_t p : row) sum += static_cast<double>(p);
    const double imbalance = sum > 0 ? busiest / (sum / static_cast<double>(world)) : 1;
    cost.imbalance.push_back(imbalance);
    cost.mean_imbalance += imbalance / static_cast<double>(cost.steps);
    cost.worst_imbalance = std::max(cost.worst_imbalance, imbalance);
    busiest_total += busiest;
  }
  if (cost.padded_total > 0) {
    cost.sync_cost =
        busiest_total / (static_cast<double>(cost.padded_total) / static_cast<double>(world));
    cost.padding_waste =
        1 - static_cast<double>(cost.tokens) / static_cast<double>(cost.padded_total);
  }
  return cost;
}

}  // namespace ddpkit::jobs
