#include "autograd/nn/models/zoo.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace ddpkit::models {
namespace {

ModelSpec DescribeMlp(nn::MlpSpec mlp) {
  ModelSpec spec;
  spec.family = "mlp";
  spec.text = nn::SpecString(mlp);
  const std::vector<int64_t>& w = mlp.widths;
  const int64_t layers = static_cast<int64_t>(w.size()) - 1;
  spec.io = {.row = {w.front()}, .synthetic_row = {w.front()}, .classes = w.back()};
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
  const int extra = (mlp.unused ? 1 : 0) + (mlp.branch != nn::BranchRule::kNone ? 1 : 0);
  for (int i = 0; i < extra; ++i) {  // Linear(OUT, OUT): "unused", "branch"
    spec.parameter_tensors += mlp.bias ? 2 : 1;
    spec.parameter_elements +=
        static_cast<double>(w.back()) * static_cast<double>(w.back() + (mlp.bias ? 1 : 0));
  }
  spec.config = std::move(mlp);
  return spec;
}

// Synthetic images: 8x8 for the small (CIFAR) stem, as the digits; 32x32 for ImageNet's, whose
// stem divides by 4 and the stages by 8 more.
ModelSpec DescribeResNet(const nn::ResNetSpec& resnet) {
  ModelSpec spec;
  spec.family = "resnet";
  spec.text = nn::SpecString(resnet);
  const int64_t side = resnet.small_stem ? 8 : 32;
  spec.io = {.row = {resnet.in_channels, -1, -1},
             .synthetic_row = {resnet.in_channels, side, side},
             .classes = resnet.classes};
  spec.parameter_tensors = nn::NumParameterTensors(resnet);
  spec.parameter_elements = static_cast<double>(nn::NumParameters(resnet));
  // Per image: every stage's activations (each block keeps about 8 maps of its width), at
  // the synthetic size; a larger image scales with its area.
  double area = static_cast<double>(side * side), activations = 0;
  for (int s = 0; s < 4; ++s) {
    if (s > 0) area /= 4;
    activations += 8.0 * static_cast<double>(resnet.blocks[s]) *
                   static_cast<double>(resnet.width << s) * std::max(area, 1.0);
  }
  spec.activation_elements_per_row = activations;
  spec.config = resnet;
  return spec;
}

ModelSpec DescribeGpt(GptSpec gpt) {
  ModelSpec spec;
  spec.family = "gpt";
  spec.text = SpecString(gpt);
  spec.io = {.row = {gpt.ctx},
             .synthetic_row = {gpt.ctx},
             .input_dtype = DType::kInt64,
             .classes = gpt.vocab,
             .per_position = true};
  const int64_t per_layer = gpt.bias ? 12 : 6;  // ln_1, c_attn, c_proj, ln_2, c_fc, c_proj
  spec.parameter_tensors = 2 + gpt.layers * per_layer + (gpt.bias ? 2 : 1);  // wte wpe .. ln_f
  spec.parameter_elements = static_cast<double>(NumParameters(gpt));
  // Per position: each block's saved tensors (about 16·D, the attention's T scores per head
  // twice), then the logits and their softmax.
  const auto t = static_cast<double>(gpt.ctx), d = static_cast<double>(gpt.dim);
  const double block = 16 * d + 2 * static_cast<double>(gpt.heads) * t;
  spec.activation_elements_per_row =
      t * (static_cast<double>(gpt.layers) * block + 2 * static_cast<double>(gpt.vocab) + 2 * d);
  spec.config = gpt;
  return spec;
}

}  // namespace

std::string ModelSpecHelp() {
  return "mlp:IN,H1,...,OUT[,bias=0][,unused=1][,tied=1][,branch=RULE] (Linear/ReLU "
         "alternating); "
         "resnet:B1,B2,B3,B4[,width=W][,in=C][,classes=K][,stem=imagenet|small] (torchvision's "
         "ResNet with BasicBlock; resnet:2,2,2,2 is ResNet-18); "
         "gpt:layers=L,heads=H,dim=D,ctx=T,vocab=V[,bias=0] (nanoGPT's GPT)";
}

absl::StatusOr<ModelSpec> ParseModel(std::string_view spec) {
  const absl::string_view text(spec.data(), spec.size());
  if (absl::StartsWith(text, "mlp:")) {
    DDPKIT_ASSIGN_OR_RETURN(nn::MlpSpec mlp, nn::ParseModelSpec(spec));
    return DescribeMlp(std::move(mlp));
  }
  if (absl::StartsWith(text, "resnet:")) {
    DDPKIT_ASSIGN_OR_RETURN(const nn::ResNetSpec resnet, nn::ParseResNetSpec(spec));
    return DescribeResNet(resnet);
  }
  if (absl::StartsWith(text, "gpt:")) {
    DDPKIT_ASSIGN_OR_RETURN(GptSpec gpt, ParseGptSpec(spec));
    return DescribeGpt(gpt);
  }
  return absl::InvalidArgumentError(
      StrCat("model spec '", text, "' is not understood; expected one of: ", ModelSpecHelp()));
}

std::shared_ptr<nn::Module> MakeModel(const ModelSpec& spec, uint64_t seed, DType dtype) {
  return std::visit(
      [&](const auto& config) -> std::shared_ptr<nn::Module> {
        using Config = std::decay_t<decltype(config)>;
        if constexpr (std::is_same_v<Config, GptSpec>) {
          return MakeGpt(config, seed, dtype);
        } else if constexpr (std::is_same_v<Config, nn::ResNetSpec>) {
          return nn::MakeResNet(config, seed, dtype);
        } else {
          return nn::MakeMlp(config, seed, dtype);
        }
      },
      spec.config);
}

}  // namespace ddpkit::models
