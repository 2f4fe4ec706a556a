// The training loop the DDP jobs share (train, join, contrastive, recompute, varlen): per step
// zero the gradients, run each micro-batch's forward and backward (all but the last under
// no_sync), then the optimizer. A job fills in its batches and loss and hooks in what it does
// around that: checkpoints, its log, a fused allreduce, per-step timings. Tracing: with a
// recorder, each step is an iteration of the rank's trace and each phase a span. Join: a job
// runs the loop inside join::Join::Run (JoinablesOf lists what it joins).
//
// The benchmarks keep their own loops (bench/ddp.cc, bench/paper.cc): they time each phase or
// a step against a local reference, and do not train.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "autograd/nn/optim.h"
#include "autograd/tensor.h"
#include "join/join.h"
#include "reducer/distributed_data_parallel.h"
#include "reducer/extras/zero_redundancy_optimizer.h"
#include "tools/trace/recorder.h"

namespace ddpkit::jobs {

// One optimizer step: what it runs on and the job's parts of it. Every hook but `forward` may
// be left empty.
struct TrainingStep {
  Optimizer* optimizer = nullptr;                   // zeroed first, stepped last
  reducer::DistributedDataParallel* ddp = nullptr;  // for no_sync; null: one process, no DDP
  trace::TraceRecorder* trace = nullptr;            // null: no tracing
  int micro_batches = 1;                            // gradient accumulation
  // true: the last micro-batch's backward reduces (DDP's buckets); false: every backward runs
  // under no_sync and `before_optimizer` reduces (a fused allreduce).
  bool sync_last = true;
  // Whether `step` reduces at all (null: every step does): false runs all of it under no_sync,
  // as PyTorch's uneven-inputs test syncs only every k-th iteration.
  std::function<bool(int step)> synced = nullptr;
  // Micro-batch k of `step`: fetch its rows (outside the forward span and no_sync).
  std::function<void(int step, int k)> load = nullptr;
  // Its forward and loss, inside the forward span: returns the tensor backward starts from.
  std::function<Tensor(int step, int k)> forward = nullptr;
  // After its backward, still under its no_sync window: the loss it returned.
  std::function<void(int step, int k, const Tensor& loss)> after_backward = nullptr;
  // After the last backward, before the optimizer: a fused allreduce, checks, the LR.
  std::function<absl::Status(int step)> before_optimizer = nullptr;
};

// The loop: steps [first_step, steps), step s being iteration first_iteration + s of the trace.
struct TrainingLoop {
  int first_step = 0;
  int steps = 0;
  int first_iteration = 0;
  std::function<void(int step)> before_step = nullptr;  // before the step's clock starts
  // After the step, with its wall time: the job's log, an observer, a checkpoint.
  std::function<absl::Status(int step, double step_ms)> after_step = nullptr;
};

// Runs one step of `step` as trace iteration `iteration`.
absl::Status RunTrainingStep(const TrainingStep& step, int index, int iteration);

// Runs every step of `loop`; stops at the first error a hook returns.
absl::Status RunTrainingLoop(const TrainingStep& step, const TrainingLoop& loop);

// What a DDP training loop joins: DDP, and the ZeRO optimizer when there is one.
std::vector<join::Joinable*> JoinablesOf(reducer::DistributedDataParallel& ddp,
                                         reducer::ZeroRedundancyOptimizer* zero);

}  // namespace ddpkit::jobs
