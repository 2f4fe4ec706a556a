// The parts of a checkpoint beside the manifest that save and resume share: state.json (the
// position and the settings) and the names of the optimizer files.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tools/checkpoint/checkpoint.h"

namespace ddpkit::checkpoint {

struct CheckpointState {
  TrainingPosition position;
  int world_size = 1;
  bool sharded_optimizer = false;
  CheckpointSettings settings;
  std::optional<BucketPlan> bucket_plan;          // "ddp_buckets"; absent in older checkpoints
  std::optional<StaticGraphRecord> static_graph;  // "ddp_static_graph"; absent likewise
};

std::string SerializeCheckpointState(const CheckpointState& state);
// DataLoss naming what is missing or malformed.
absl::StatusOr<CheckpointState> ParseCheckpointState(std::string_view bytes);

// "optimizer.safetensors" (every rank's, written by rank 0), or "optimizer.rank-00003.safetensors"
// (sharded: rank 3's own).
std::string OptimizerFileName(bool sharded, int rank);

// Every file a complete checkpoint of `state` holds, besides the manifest.
std::vector<std::string> RequiredCheckpointFiles(const CheckpointState& state);

// FailedPrecondition naming the first setting of `ours` that `theirs` (the checkpoint's at
// `path`) lacks or holds differently.
absl::Status CheckSameSettings(const CheckpointSettings& theirs, const CheckpointSettings& ours,
                               const std::string& path);

}  // namespace ddpkit::checkpoint
