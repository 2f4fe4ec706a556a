// The model zoo: one spec string names any model ddpkit can build ("mlp:...", and the families
// added beside it), with what every job needs to know before it builds one — the input a row
// holds, the classes it predicts, and its size for the memory check.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "autograd/nn/models/gpt.h"
#include "autograd/nn/models/resnet.h"
#include "autograd/nn/nn.h"

namespace ddpkit::models {

// What a model takes and gives, so a job can make or check its data and pick its loss.
struct ModelIo {
  // One input row: {features}, {C, H, W} or {T}; -1 where any size fits (a ResNet's H and W:
  // its adaptive pool takes any image size).
  Shape row{};
  Shape synthetic_row{};                // `row` with every size set: the synthetic data's
  DType input_dtype = DType::kFloat32;  // int64 for token ids
  int64_t classes = 0;                  // output classes (a language model's vocabulary)
  // Labels per position: inputs [N, T] give logits [N, T, classes] and labels are [N, T]
  // (a language model); otherwise logits are [N, classes] and labels [N].
  bool per_position = false;
};

struct ModelSpec {
  std::string family;  // "mlp", "resnet", "gpt"
  std::variant<nn::MlpSpec, nn::ResNetSpec, GptSpec> config;
  ModelIo io;
  int64_t parameter_tensors = 0;           // trainable tensors, a tied one counted once
  double parameter_elements = 0;           // their elements (double: bounded before it is exact)
  double activation_elements_per_row = 0;  // a rough count, for the memory estimate
  std::string text;                        // the spec spelled back
};

// The families and their syntax, one line each (for --help and errors).
std::string ModelSpecHelp();

// Parses "FAMILY:..." (InvalidArgument naming the spec and what was expected).
absl::StatusOr<ModelSpec> ParseModel(std::string_view spec);

// The model, initialised from `seed` as PyTorch initialises the same architecture.
std::shared_ptr<nn::Module> MakeModel(const ModelSpec& spec, uint64_t seed,
                                      DType dtype = DType::kFloat32);

}  // namespace ddpkit::models
