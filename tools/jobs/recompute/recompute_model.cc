#include "tools/jobs/recompute/recompute_model.h"

#include "absl/strings/str_format.h"

namespace ddpkit::jobs {
namespace {

// The block MLP as a zoo spec would describe it: its input, classes and an MLP of its widths
// (stem, each block's W -> 4W -> W, head) for the memory estimate.
absl::StatusOr<models::ModelSpec> DescribeBlockMlp(const BlockMlpShape& shape) {
  std::string widths = StrCat("mlp:", shape.input_dim, ",", shape.width);
  for (int k = 0; k < shape.blocks; ++k) widths += StrCat(",", 4 * shape.width, ",", shape.width);
  widths += StrCat(",", shape.classes);
  return models::ParseModel(widths);
}

}  // namespace

absl::StatusOr<RecomputeModelInfo> DescribeRecomputeModel(const RecomputeModelSpec& spec) {
  RecomputeModelInfo info;
  if (spec.model.empty()) {
    absl::StatusOr<models::ModelSpec> mlp = DescribeBlockMlp(spec.shape);
    if (!mlp.ok()) {
      return absl::InvalidArgumentError(StrCat("--blocks ", spec.shape.blocks, " --width ",
                                               spec.shape.width, ": the block MLP is too large (",
                                               mlp.status().message(), ")"));
    }
    info.spec = *std::move(mlp);
    info.checkpointed = spec.shape.blocks;
    info.unit = absl::StrFormat("residual MLP blocks blocks.N (%d -> %d -> %d)", spec.shape.width,
                                4 * spec.shape.width, spec.shape.width);
    return info;
  }
  DDPKIT_ASSIGN_OR_RETURN(info.spec, models::ParseModel(spec.model));
  if (const auto* gpt = std::get_if<models::GptSpec>(&info.spec.config)) {
    info.checkpointed = static_cast<int>(gpt->layers);
    info.unit = "transformer blocks transformer.h.N";
  } else if (std::holds_alternative<nn::ResNetSpec>(info.spec.config)) {
    info.checkpointed = 4;
    info.unit = "ResNet stages layer1..layer4";
  } else {
    return absl::InvalidArgumentError(
        StrCat("--model ", spec.model,
               ": an MLP has no blocks to checkpoint; name resnet:... (each stage recomputed) or "
               "gpt:... (each transformer block), or leave --model out for the residual block "
               "MLP of --blocks and --width"));
  }
  return info;
}

CheckpointableModel MakeRecomputeModel(const RecomputeModelSpec& spec, uint64_t seed,
                                       bool checkpoint) {
  CheckpointableModel made;
  if (spec.model.empty()) {
    auto mlp = std::make_shared<BlockMlp>(spec.shape, seed);
    made = {mlp, [mlp](bool on) { mlp->checkpoint = on; }};
  } else {
    const absl::StatusOr<models::ModelSpec> parsed = models::ParseModel(spec.model);
    DDPKIT_CHECK(parsed.ok(), parsed.status().message());  // DescribeRecomputeModel checked it
    std::shared_ptr<nn::Module> module = models::MakeModel(*parsed, seed);
    if (auto gpt = std::dynamic_pointer_cast<models::Gpt>(module)) {
      made = {gpt, [gpt](bool on) { gpt->set_checkpoint_blocks(on); }};
    } else {
      auto resnet = std::dynamic_pointer_cast<nn::ResNet>(module);
      DDPKIT_CHECK(resnet != nullptr, "recompute: ", spec.model, " has no blocks to checkpoint");
      made = {resnet, [resnet](bool on) { resnet->set_checkpoint_stages(on); }};
    }
  }
  made.set_checkpoint(checkpoint);
  return made;
}

}  // namespace ddpkit::jobs
