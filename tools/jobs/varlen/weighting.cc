#include "tools/jobs/varlen/weighting.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"

namespace ddpkit::jobs {
namespace {

// Every parameter's .grad, flattened in parameter order, on the host.
std::vector<double> FlatGradients(const nn::Module& model) {
  std::vector<double> flat;
  for (const Tensor& p : model.Parameters()) {
    const std::vector<double> g =
        p.grad().defined() ? p.grad().ToDoubles() : std::vector<double>(p.numel(), 0.0);
    flat.insert(flat.end(), g.begin(), g.end());
  }
  return flat;
}

void ClearGradients(const nn::Module& model) {
  for (const Tensor& p : model.Parameters()) p.set_grad(Tensor());
}

// max |g - ref| ÷ max |ref|.
double RelativeError(const std::vector<double>& g, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    diff = std::max(diff, std::abs(g[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// The s minimising |g - s·ref|.
double BestFitScale(const std::vector<double>& g, const std::vector<double>& ref) {
  double dot = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    dot += g[i] * ref[i];
    norm += ref[i] * ref[i];
  }
  return norm > 0 ? dot / norm : 0;
}

Device DeviceOf(const nn::Module& model) { return model.Parameters().front().device(); }

// One synced DDP backward of this rank's batch, its summed loss scaled; returns the averaged
// gradient and clears it.
std::vector<double> DdpGradient(reducer::DistributedDataParallel& ddp, const SequenceData& data,
                                const std::vector<int64_t>& mine, double scale) {
  const Device device = DeviceOf(ddp.module());
  Tensor logits = ddp.Forward(PackBatch(data, mine, device));
  Tensor loss =
      CrossEntropy(logits, BatchLabels(data, mine, device), {.reduction = Reduction::kSum});
  (loss * scale).Backward();
  std::vector<double> g = FlatGradients(ddp.module());
  ClearGradients(ddp.module());
  return g;
}

}  // namespace

absl::StatusOr<GradWeighting> ParseGradWeighting(std::string_view name) {
  if (name == "rank") return GradWeighting::kRank;
  if (name == "sample") return GradWeighting::kSample;
  return absl::InvalidArgumentError(
      StrCat("--grad-weighting must be rank or sample, got '", std::string(name), "'"));
}

std::string_view GradWeightingName(GradWeighting weighting) {
  return weighting == GradWeighting::kRank ? "rank" : "sample";
}

double LossScale(GradWeighting weighting, int64_t local, int64_t global, int world) {
  DDPKIT_CHECK(local >= 1 && global >= local, "[grad weighting] local batch ", local,
               ", global batch ", global);
  return weighting == GradWeighting::kRank
             ? 1.0 / static_cast<double>(local)
             : static_cast<double>(world) / static_cast<double>(global);
}

int MostUnevenSharedStep(const std::vector<std::vector<int64_t>>& batch_sizes_per_step) {
  int best = -1;
  double best_ratio = 0;
  for (size_t t = 0; t < batch_sizes_per_step.size(); ++t) {
    const auto [lo, hi] =
        std::minmax_element(batch_sizes_per_step[t].begin(), batch_sizes_per_step[t].end());
    if (*lo == 0) continue;
    const double ratio = static_cast<double>(*hi) / static_cast<double>(*lo);
    if (best < 0 || ratio > best_ratio) {
      best = static_cast<int>(t);
      best_ratio = ratio;
    }
  }
  return best;
}

absl::StatusOr<WeightingCheck> CheckWeighting(reducer::DistributedDataParallel& ddp,
                                              nn::Module& reference, const SequenceData& data,
                                              const std::vector<std::vector<int64_t>>& ids,
                                              int step) {
  const int world = ddp.process_group().size();
  const std::vector<int64_t>& mine = ids[ddp.process_group().rank()];
  std::vector<int64_t> all;
  WeightingCheck check;
  check.set_step(step);
  for (const std::vector<int64_t>& rank_ids : ids) {
    all.insert(all.end(), rank_ids.begin(), rank_ids.end());
    check.add_batch_sizes(static_cast<int64_t>(rank_ids.size()));
  }
  const auto local = static_cast<int64_t>(mine.size()), global = static_cast<int64_t>(all.size());
  const std::vector<double> by_rank =
      DdpGradient(ddp, data, mine, LossScale(GradWeighting::kRank, local, global, world));
  const std::vector<double> by_sample =
      DdpGradient(ddp, data, mine, LossScale(GradWeighting::kSample, local, global, world));

  const Device device = DeviceOf(reference);
  CrossEntropy(reference.Forward(PackBatch(data, all, device)), BatchLabels(data, all, device))
      .Backward();
  const std::vector<double> exact = FlatGradients(reference);
  ClearGradients(reference);
  check.set_rank_error(RelativeError(by_rank, exact));
  check.set_sample_error(RelativeError(by_sample, exact));
  check.set_rank_scale(BestFitScale(by_rank, exact));
  return check;
}

}  // namespace ddpkit::jobs
