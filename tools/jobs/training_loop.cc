#include "tools/jobs/training_loop.h"

#include <chrono>
#include <optional>

namespace ddpkit::jobs {
namespace {

// Micro-batch k's forward and backward, in its no_sync window when it has one.
void RunMicroBatch(const TrainingStep& s, int index, int k) {
  if (s.load) s.load(index, k);
  std::optional<reducer::DistributedDataParallel::NoSyncGuard> no_sync;
  if (s.ddp != nullptr &&
      (!s.sync_last || k + 1 < s.micro_batches || (s.synced && !s.synced(index)))) {
    no_sync.emplace(*s.ddp);
  }
  const int label = s.micro_batches > 1 ? k : -1;  // spans name micro-batches only when several
  Tensor loss;
  {
    trace::ScopedSpan forward(s.trace, trace::ComputeKind::kForward, label);
    loss = s.forward(index, k);
  }
  {
    trace::ScopedSpan backward(s.trace, trace::ComputeKind::kBackward, label);
    loss.Backward();
  }
  if (s.after_backward) s.after_backward(index, k, loss);
}

}  // namespace

absl::Status RunTrainingStep(const TrainingStep& s, int index, int iteration) {
  if (s.trace != nullptr) s.trace->SetIteration(iteration);
  s.optimizer->ZeroGrad();
  for (int k = 0; k < s.micro_batches; ++k) RunMicroBatch(s, index, k);
  if (s.before_optimizer) DDPKIT_RETURN_IF_ERROR(s.before_optimizer(index));
  trace::ScopedSpan optimizer(s.trace, trace::ComputeKind::kOptimizer);
  s.optimizer->Step();
  return absl::OkStatus();
}

absl::Status RunTrainingLoop(const TrainingStep& step, const TrainingLoop& loop) {
  for (int s = loop.first_step; s < loop.steps; ++s) {
    if (loop.before_step) loop.before_step(s);
    const auto start = std::chrono::steady_clock::now();
    DDPKIT_RETURN_IF_ERROR(RunTrainingStep(step, s, loop.first_iteration + s));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (loop.after_step) DDPKIT_RETURN_IF_ERROR(loop.after_step(s, ms));
  }
  return absl::OkStatus();
}

std::vector<join::Joinable*> JoinablesOf(reducer::DistributedDataParallel& ddp,
                                         reducer::ZeroRedundancyOptimizer* zero) {
  std::vector<join::Joinable*> joinables = {&ddp};
  if (zero != nullptr) joinables.push_back(zero);
  return joinables;
}

}  // namespace ddpkit::jobs
