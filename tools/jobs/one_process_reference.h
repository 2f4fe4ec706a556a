// `--reference one-process`: the claim DDP rests on, checked on a run of the user's choosing.
// N ranks, each training on its own rows, must end where one process ends that trains on the
// union of those rows, iteration by iteration, with the loss scaled as DDP's average scales it.
// A run that differs has a bug: in the model (a collective-free forward that is not the same on
// every rank), in the data split, or in DDP.
//
// What makes one process on the union a faithful reference:
//   - SGD only (zero-sgd steps the same update in shards), so the update is linear in the
//     gradient and the average of the ranks' gradients is the union's gradient, scaled;
//   - no BatchNorm (per rank's batch statistics are not the union's) and no lossy comm hook
//     (fp16, bf16, PowerSGD) or mixed precision: these are refused with the reason.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn/nn.h"
#include "tools/jobs/dataset.h"
#include "tools/jobs/training.h"

namespace ddpkit::jobs {

// Rows [start, start + count) of one rank's data.
struct RowSlice {
  const ClassificationData* data = nullptr;
  int64_t start = 0;
  int64_t count = 0;
};

// The reference's iterations: micro-batch k of iteration t trains on the union of the slices
// the active ranks trained on, in rank order, with its loss multiplied by loss_scale(t)
// (DdpLossScale); the gradients of an iteration's micro-batches add up, then SGD steps.
struct ReferencePlan {
  int iterations = 0;
  int micro_batches = 1;
  std::function<std::vector<RowSlice>(int t, int k)> rows;
  std::function<double(int t)> loss_scale;
};

// How far DDP's final parameters are from the reference's: the largest element-wise
// difference, whose parameter it was (by name), and the bound it is held to: 1e-4 of the
// largest reference parameter (at least 1e-4), float32's summation-order noise over a few
// hundred steps with room to spare, yet far below any real divergence.
struct ReferenceComparison {
  double max_abs_diff = 0;
  double tolerance = 0;
  std::string worst_parameter;
  bool agrees() const { return max_abs_diff <= tolerance; }
};

// OK when the config's run has a one-process reference; otherwise InvalidArgument naming what
// breaks the equivalence and why.
absl::Status CheckReferenceApplies(const DdpTrainingConfig& config);

// The factor that makes one process's loss on the union of `active` ranks' rows give the
// gradient DDP steps with: a mean loss's gradient is active/world times the union's when DDP
// divides by the initial world size, the union's when it divides by the active ranks; a "sum"
// loss's is 1/world or 1/active of it.
double DdpLossScale(const std::string& loss, int active, int world,
                    bool divide_by_initial_world_size);

// `c` into a report's reference fields (JoinReport's and TrainReport's share their names).
template <typename Report>
void SetReferenceFields(const ReferenceComparison& c, Report& report) {
  report.set_reference("one-process");
  report.set_reference_max_abs_diff(c.max_abs_diff);
  report.set_reference_worst_parameter(c.worst_parameter);
  report.set_reference_tolerance(c.tolerance);
  report.set_reference_agrees(c.agrees());
}

// Trains the reference on this host (the config's model, seed and weights, plain SGD) and
// compares `trained` (DDP's model after the same iterations, any device) with it.
absl::StatusOr<ReferenceComparison> CompareWithOneProcess(const DdpTrainingConfig& config,
                                                          const nn::Module& trained,
                                                          const ReferencePlan& plan);

}  // namespace ddpkit::jobs
