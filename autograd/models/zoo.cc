#include "autograd/models/zoo.h"

#include "absl/strings/match.h"

namespace ddpkit::models {
namespace {

ModelSpec DescribeMlp(nn::MlpSpec mlp) {
  ModelSpec spec;
  spec.family = "mlp";
  spec.text = nn::SpecString(mlp);
  const std::vector<int64_t>& w = mlp.widths;
  const int64_t layers = static_cast<int64_t>(w.size()) - 1;
  spec.io = {.row = {w.front()}, .classes = w.back()};
  for (int64_t l = 0; l < layers; ++l) {
    spec.parameter_elements += static_cast<double>(w[l]) * static_cast<double>(w[l + 1]) +
                               (mlp.bias ? static_cast<double>(w[l + 1]) : 0);
    spec.activation_elements_per_row += 2.0 * static_cast<double>(w[l + 1]);  // Linear, ReLU
  }
  spec.activation_elements_per_row += static_cast<double>(w.front());
  spec.parameter_tensors = layers * (mlp.bias ? 2 : 1);
  if (mlp.tied) {  // the second-to-last Linear's weight is the one before it's
    spec.parameter_tensors -= 1;
    spec.parameter_elements -=
        static_cast<double>(w[layers - 2]) * static_cast<double>(w[layers - 1]);
  }
  if (mlp.unused) {  // Linear(OUT, OUT)
    spec.parameter_tensors += mlp.bias ? 2 : 1;
    spec.parameter_elements +=
        static_cast<double>(w.back()) * static_cast<double>(w.back() + (mlp.bias ? 1 : 0));
  }
  spec.config = std::move(mlp);
  return spec;
}

}  // namespace

std::string ModelSpecHelp() {
  return "mlp:IN,H1,...,OUT[,bias=0][,unused=1][,tied=1] (Linear/ReLU alternating)";
}

absl::StatusOr<ModelSpec> ParseModel(std::string_view spec) {
  const absl::string_view text(spec.data(), spec.size());
  if (absl::StartsWith(text, "mlp:")) {
    DDPKIT_ASSIGN_OR_RETURN(nn::MlpSpec mlp, nn::ParseModelSpec(spec));
    return DescribeMlp(std::move(mlp));
  }
  return absl::InvalidArgumentError(
      StrCat("model spec '", text, "' is not understood; expected one of: ", ModelSpecHelp()));
}

std::shared_ptr<nn::Module> MakeModel(const ModelSpec& spec, uint64_t seed, DType dtype) {
  return std::visit(
      [&](const auto& config) -> std::shared_ptr<nn::Module> {
        return nn::MakeMlp(config, seed, dtype);
      },
      spec.config);
}

}  // namespace ddpkit::models
