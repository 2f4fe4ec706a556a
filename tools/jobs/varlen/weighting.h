// The averaging pitfall. DDP averages gradients over *ranks*: with b_r samples on rank r and
// each rank's loss the mean over its own samples, the result is
//     (1 / world) Σ_r (1 / b_r) Σ_{i on r} ∇ℓ_i,
// which is the gradient of the global mean loss (1 / B) Σ_i ∇ℓ_i only when every b_r = B / world.
// With token-budget batches the b_r differ, and samples on small-batch (long-sample) ranks
// weigh more. Weighting by sample scales rank r's summed loss by world / B instead, so DDP's
// ÷ world leaves (1 / B) Σ_i ∇ℓ_i: exact, whatever the split (joined ranks count b_r = 0).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "reducer/distributed_data_parallel.h"
#include "tools/jobs/varlen/sequence_data.h"
#include "tools/jobs/varlen/sequence_model.h"
#include "tools/jobs/varlen/varlen_report.pb.h"

namespace ddpkit::jobs {

enum class GradWeighting { kRank, kSample };
absl::StatusOr<GradWeighting> ParseGradWeighting(std::string_view name);
std::string_view GradWeightingName(GradWeighting weighting);

// The factor on a rank's summed cross-entropy: 1 / local (rank) or world / global (sample).
double LossScale(GradWeighting weighting, int64_t local, int64_t global, int world);

// The step a check should use: the one where every rank has a batch and the batch sizes differ
// most (max ÷ min; the earliest on ties); -1 when no step has every rank.
int MostUnevenSharedStep(const std::vector<std::vector<int64_t>>& batch_sizes_per_step);

// Collective, before training: DDP's averaged gradient for one step's batches (`ids[r]`: rank
// r's samples), with each weighting, against one process computing the mean loss over all of
// them with `reference` (the same weights as the DDP model). Leaves every .grad cleared.
absl::StatusOr<WeightingCheck> CheckWeighting(reducer::DistributedDataParallel& ddp,
                                              nn::Module& reference, const SequenceData& data,
                                              const std::vector<std::vector<int64_t>>& ids,
                                              int step);

}  // namespace ddpkit::jobs
