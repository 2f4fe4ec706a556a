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
#include "comm/process_group.h"
#include "reducer/distributed_data_parallel.h"
#include "tools/train_report.pb.h"

namespace ddpkit::tools {

struct TrainConfig {
  std::string model = "mlp:32,64,64,10";
  std::string weights_path;       // load initial weights (safetensors) when set
  std::string data_path;          // x / y tensors; synthetic data when empty
  std::string save_weights_path;  // rank 0's final weights (atomically) when set
  std::string save_grads_path;    // rank 0's gradients after the last backward, before its update
  int batch_size = 32;            // rows per rank per micro-batch
  int steps = 60;
  int grad_accum = 1;  // micro-batches per optimizer step
  double lr = 0.1;
  double momentum = 0.0;
  std::string optimizer = "sgd";  // or "zero-sgd": ZeRO-1, each rank steps its shard
  uint64_t seed = 0;
  int64_t synthetic_rows = 4096;

  std::string backend = "threads";  // or "gloo" (one process per rank, under `ddpkit launch`)
  int world_size = 1;               // threads backend only
  comm::ProcessGroupOptions comm_options;
  reducer::DdpOptions ddp;
  std::string comm_hook;  // empty, allreduce, fp16 or bf16
};

struct StepProgress {
  int step;  // 1-based
  int steps;
  double loss;                         // this rank's mean loss over the step's micro-batches
  double step_ms;                      // this rank's wall time for the step
  const reducer::DdpLoggingData* ddp;  // rank 0's DDP state after the step
};

// Optional callbacks, called on rank 0 only: on_start once the model and data are ready (the
// report holds the setup, no losses yet), on_step after every step.
struct TrainObserver {
  std::function<void(const TrainReport& setup, const reducer::DdpLoggingData& ddp)> on_start;
  std::function<void(const StepProgress&)> on_step;
};

struct TrainResult {
  int rank = 0;                 // whose result this is
  TrainReport report;           // losses averaged over all ranks
  reducer::DdpLoggingData ddp;  // rank 0's
};

// Runs on every rank of the configured world and returns rank 0's result (under gloo, this
// process's rank; the report is the same on every rank). The first error (bad model spec,
// unreadable weights or data, a failed collective, ...) is returned instead.
absl::StatusOr<TrainResult> Train(const TrainConfig& config, const TrainObserver& observer = {});

}  // namespace ddpkit::tools
