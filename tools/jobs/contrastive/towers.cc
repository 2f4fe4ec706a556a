#include "tools/jobs/contrastive/towers.h"

#include <vector>

#include "autograd/ops.h"

namespace ddpkit::jobs {

absl::StatusOr<std::optional<RealTowers>> ParseTowers(std::string_view image,
                                                      std::string_view text) {
  if (image.empty() && text.empty()) return std::nullopt;
  if (image.empty() != text.empty()) {
    return absl::InvalidArgumentError(
        "--image-tower and --text-tower go together (both real towers, or neither: the MLPs)");
  }
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec image_spec, models::ParseModel(image));
  DDPKIT_ASSIGN_OR_RETURN(const models::ModelSpec text_spec, models::ParseModel(text));
  if (image_spec.family != "resnet") {
    return absl::InvalidArgumentError(StrCat("--image-tower takes resnet:..., got '", image, "'"));
  }
  if (text_spec.family != "gpt") {
    return absl::InvalidArgumentError(StrCat("--text-tower takes gpt:..., got '", text, "'"));
  }
  return RealTowers{.image = std::get<nn::ResNetSpec>(image_spec.config),
                    .text = std::get<models::GptSpec>(text_spec.config),
                    .image_row = image_spec.io.synthetic_row};
}

std::shared_ptr<nn::ResNet> MakeImageEncoder(const nn::ResNetSpec& spec, uint64_t seed,
                                             DType dtype) {
  nn::ResNetSpec trunk = spec;
  trunk.classes = 0;
  return nn::MakeResNet(trunk, seed, dtype);
}

GptTextEncoder::GptTextEncoder(const models::GptSpec& spec, uint64_t seed, DType dtype) {
  // Built as nanoGPT's GPT (its init, drawn in its order), then only its transformer is kept:
  // lm_head is not a module of the tower, so it is neither a parameter nor in the graph.
  transformer_ = RegisterModule("transformer", models::MakeGpt(spec, seed, dtype)->transformer());
}

Tensor GptTextEncoder::Forward(const Tensor& tokens) {
  const Tensor hidden = transformer_->Forward(tokens);  // [N, T, D]
  const int64_t n = hidden.size(0), t = hidden.size(1);
  // Row (i, T - 1) of the [N·T, D] view for each sequence i: a lookup, whose backward scatters
  // the gradient into those rows only.
  std::vector<int64_t> last(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) last[i] = i * t + t - 1;
  Tensor index = Tensor::FromVector<int64_t>(last, {n});
  if (hidden.is_cuda()) index = index.To(hidden.device());
  return EmbeddingLookup(Reshape(hidden, {n * t, hidden.size(2)}), index);
}

}  // namespace ddpkit::jobs
