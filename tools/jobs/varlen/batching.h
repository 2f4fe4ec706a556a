// Cutting a rank's samples (in training order) into batches, and what a layout of batches
// costs across ranks.
//
// A padded batch costs count × longest token slots: every sample is padded to the longest.
// Fixed-size batches take --batch-size samples at a time; token-budget batches take samples
// while count × longest stays within --max-tokens, so a step holds many short samples or a few
// long ones, and the batch size varies.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace ddpkit::jobs {

// Samples [begin, end) of a rank's training order.
struct Batch {
  int64_t begin = 0, end = 0;
  int64_t longest = 0;  // the longest sample's length
  int64_t tokens = 0;   // the samples' own tokens
  int64_t count() const { return end - begin; }
  int64_t padded() const { return count() * longest; }  // token slots the padded batch costs
};

std::vector<Batch> FixedSizeBatches(std::span<const int64_t> lengths, int64_t batch_size);

// Greedy: each batch takes the next sample while (count + 1) × max(longest, its length) <=
// max_tokens. InvalidArgument naming the sample (ids[i]) when one alone exceeds the budget.
absl::StatusOr<std::vector<Batch>> TokenBudgetBatches(std::span<const int64_t> lengths,
                                                      std::span<const int64_t> ids,
                                                      int64_t max_tokens);

// Every rank's batches, step by step (rank r's step t is its t-th batch; a rank that has run
// out idles, as it shadows under Join).
struct LayoutCost {
  int64_t steps = 0;  // the most batches any rank has
  std::vector<int64_t> batches_per_rank;
  // [step][rank]: the padded token slots of that rank's batch (0: it had none).
  std::vector<std::vector<int64_t>> padded;
  std::vector<double> imbalance;  // per step: max over ranks ÷ mean over ranks of padded slots
  double mean_imbalance = 0;      // over the steps
  double worst_imbalance = 0;
  // A synchronous step lasts as long as its busiest rank: sum over steps of the max, over the
  // slots spread evenly (total ÷ world). 1 is perfect balance.
  double sync_cost = 0;
  int64_t tokens = 0, padded_total = 0;
  double padding_waste = 0;  // 1 - tokens ÷ padded slots
};
LayoutCost CostOf(const std::vector<std::vector<Batch>>& batches_per_rank);

}  // namespace ddpkit::jobs
