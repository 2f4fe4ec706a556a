// The training loop behind `ddpkit train`.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "tools/train_report.pb.h"

namespace ddpkit::tools {

struct TrainConfig {
  std::string model = "mlp:32,64,64,10";
  std::string weights_path;       // load initial weights (safetensors) when set
  std::string data_path;          // x / y tensors; synthetic data when empty
  std::string save_weights_path;  // write final weights (atomically) when set
  int batch_size = 32;
  int steps = 60;
  double lr = 0.1;
  double momentum = 0.0;
  uint64_t seed = 0;
  int64_t synthetic_rows = 4096;
};

struct StepProgress {
  int step;  // 1-based
  int steps;
  double loss;
  double step_ms;
};

// Optional callbacks: on_start once the model and data are ready (the report holds the setup,
// no losses yet), on_step after every step.
struct TrainObserver {
  std::function<void(const TrainReport& setup)> on_start;
  std::function<void(const StepProgress&)> on_step;
};

// Trains with plain SGD on mean cross-entropy. Step g uses rows [g*B, (g+1)*B) of the data,
// wrapping around (B = batch size). Returns the report, or the first error (bad model spec,
// unreadable weights or data, ...) before any step runs.
absl::StatusOr<TrainReport> Train(const TrainConfig& config, const TrainObserver& observer = {});

}  // namespace ddpkit::tools
