// The training loop behind `ddpkit train`: data-parallel SGD with DistributedDataParallel.
//
// Every rank holds the whole dataset (synthetic from the seed, or --data) and the same model;
// DDP copies rank 0's initial weights to all. Global micro-batch g is rows [g*B, (g+1)*B) of the
// data, wrapping around (B = world_size * batch_size), and rank r trains on its contiguous
// slice [g*B + r*b, g*B + (r+1)*b). Each optimizer step zeroes the gradients (to none), runs
// grad_accum micro-batches — all but the last under no_sync, so they only accumulate locally —
// and takes an SGD step with the averaged, accumulated gradient (zero-sgd: each rank steps its
// ZeRO-1 shard and broadcasts it; the numbers are the same). With world_size 1 this is
// ordinary single-process training on the same rows.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/jobs/train/train_report.pb.h"
#include "tools/jobs/training.h"

namespace ddpkit::jobs {

struct TrainConfig : DdpTrainingConfig {
  std::string data_path;        // x / y tensors; synthetic data when empty (and no text_path)
  std::string text_path;        // a text file read as characters (a language model's data)
  std::string eval_path;        // held-out x / y tensors: the final model's accuracy on them
  std::string save_grads_path;  // rank 0's gradients after the last backward, before its update
  int steps = 60;
  int grad_accum = 1;  // micro-batches per optimizer step
  int64_t synthetic_rows = 4096;
  checkpoint::CheckpointOptions
      checkpoint;  // --checkpoint-dir: resume from the latest, save every K steps
  // --check: compare the ranks' final models (one collective after the last step).
  bool check_models_identical = false;
  // --reference one-process: rank 0 also trains one process on every step's global batch
  // (tools/jobs/one_process_reference.h) from the same initial weights.
  bool reference_one_process = false;
};

struct StepProgress {
  int step;  // 1-based
  int steps;
  double loss;                         // this rank's mean loss over the step's micro-batches
  double step_ms;                      // this rank's wall time for the step
  const reducer::DdpLoggingData* ddp;  // rank 0's DDP state after the step
};

// Optional callbacks, called on rank 0 only: on_start once the model and data are ready (the
// report holds the setup and DDP's initial state, no losses yet), on_checkpoint after a resume,
// on_step after every step.
struct TrainObserver {
  std::function<void(const TrainReport& setup)> on_start;
  std::function<void(const StepProgress&)> on_step;
  // A line about checkpoints: the step resumed from, or (warning) one skipped or cleaned up.
  std::function<void(const std::string& line, bool warning)> on_checkpoint;
};

// Runs on every rank of the configured world and returns rank 0's report, with rank 0's DDP
// logging data in `ddp` (under gloo, this process's; the losses are the same on every rank).
// The first error (bad model spec, unreadable weights or data, a failed collective, ...) is
// returned instead.
absl::StatusOr<TrainReport> Train(const TrainConfig& config, const TrainObserver& observer = {});

}  // namespace ddpkit::jobs
