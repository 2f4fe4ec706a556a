// The models `ddpkit recompute` can checkpoint: its own residual block MLP (block_mlp.h), or a
// zoo model named by --model — a GPT per transformer block (transformer.h.N), a ResNet per
// stage (layer1..layer4). An MLP of the zoo has no blocks to checkpoint and is refused.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "autograd/nn/models/zoo.h"
#include "tools/jobs/recompute/block_mlp.h"

namespace ddpkit::jobs {

struct RecomputeModelSpec {
  std::string model;    // a zoo spec (resnet:..., gpt:...); empty: the block MLP of `shape`
  BlockMlpShape shape;  // the block MLP's (--blocks, --width)
};

// What the job needs to know before building one: its input, size, and what is checkpointed.
struct RecomputeModelInfo {
  models::ModelSpec spec;  // for the zoo's input description and the memory estimate
  int checkpointed = 0;    // blocks or stages run under checkpointing
  std::string unit;        // "residual MLP blocks blocks.N", "transformer blocks ...", ...
};

// InvalidArgument for a spec that does not parse or names a family without blocks (mlp:).
absl::StatusOr<RecomputeModelInfo> DescribeRecomputeModel(const RecomputeModelSpec& spec);

// The model, from `seed`, with a switch that puts every block under checkpointing or none.
struct CheckpointableModel {
  std::shared_ptr<nn::Module> module;
  std::function<void(bool)> set_checkpoint;
};
CheckpointableModel MakeRecomputeModel(const RecomputeModelSpec& spec, uint64_t seed,
                                       bool checkpoint = true);

}  // namespace ddpkit::jobs
