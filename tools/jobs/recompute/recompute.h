// The job behind `ddpkit recompute`: reentrant activation checkpointing under DDP, end to end.
// A model of K checkpointed blocks (block_mlp.h; or a zoo GPT per transformer block, a ResNet
// per stage: recompute_model.h) is trained on the same data three ways:
//
//   plain          DDP with find_unused_parameters: the graph search cannot see into a
//                  checkpoint, so the blocks' parameters are marked ready at the first hook,
//                  then their hooks fire again in the nested backward: "marked ready twice".
//                  The run stops at its first backward; the report keeps the error as met.
//   static_graph   DDP learns in the first iteration how often each hook fires: correct, and
//                  the buckets still overlap backward.
//   no_sync_fused  every backward under no_sync, then one FusedGradientAllreduce of all the
//                  gradients: correct, with all of the communication exposed.
//
// Each training run is checked against one process on the global batch, timed, and its
// communication split into total and exposed. Separately, on one process, the activation
// memory with and without checkpointing. docs/recompute.md tells the story with the figures.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "reducer/ddp_options.h"
#include "tools/jobs/job.h"
#include "tools/jobs/recompute/recompute_model.h"
#include "tools/jobs/recompute/recompute_report.pb.h"

namespace ddpkit::jobs {

struct RecomputeConfig {
  comm::WorldSpec world = {.world_size = 2};  // --backend, --world-size, --timeout, ...
  // --model: a zoo spec (resnet:... or gpt:...); empty: the block MLP of `shape`.
  std::string model;
  BlockMlpShape shape;  // --blocks, --width
  int batch_size = 64;  // rows per rank
  int steps = 20;
  double lr = 0.05;
  uint64_t seed = 0;
  // Whose DDP and its caps (--pytorch-version, --bucket-cap-mb, ...); each run sets the mode.
  reducer::DdpOptions ddp;
  // With a path, each training run writes its trace (PATH minus ".json", then ".<run>.json") and
  // PATH minus ".json" plus ".svg" shows the two runs' timelines one above the other.
  std::string trace_path;
};

// InvalidArgument naming the flag for a bad config; otherwise the report (under gloo, this
// process's: the runs' numbers are this rank's, the losses the mean over ranks).
absl::StatusOr<RecomputeReport> RunRecompute(const RecomputeConfig& config);

}  // namespace ddpkit::jobs
