#include "autograd/nn.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "autograd/cuda/runtime.h"
#include "autograd/ops.h"

namespace ddpkit::nn {

// ---------------------------------------------------------------------------- Module
Tensor Module::RegisterParameter(std::string name, Tensor value) {
  value.set_requires_grad(true);
  parameters_.emplace_back(std::move(name), value);
  return value;
}

Tensor Module::RegisterBuffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), value);
  return value;
}

void Module::CollectNamed(const std::string& prefix, bool parameters, NamedTensors& out,
                          std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, tensor] : parameters ? parameters_ : buffers_) {
    if (std::find(seen.begin(), seen.end(), tensor.impl()) != seen.end()) continue;
    seen.push_back(tensor.impl());
    out.emplace_back(prefix + name, tensor);
  }
  for (const auto& [name, child] : children_) {
    child->CollectNamed(prefix + name + ".", parameters, out, seen);
  }
}

NamedTensors Module::NamedParameters() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  CollectNamed("", /*parameters=*/true, out, seen);
  return out;
}

TensorList Module::Parameters() const {
  TensorList out;
  for (auto& [name, tensor] : NamedParameters()) out.push_back(tensor);
  return out;
}

NamedTensors Module::NamedBuffers() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  CollectNamed("", /*parameters=*/false, out, seen);
  return out;
}

namespace {

// Points `t` at a copy of its elements on `device`, keeping its TensorImpl (and with it the
// autograd metadata: leaf, requires_grad, the gradient accumulator and its hooks).
void MoveInPlace(const Tensor& t, Device device) {
  if (t.device() == device) return;  // a tensor registered twice moves once
  Tensor moved = t.To(device);
  TensorImpl& impl = *t.impl();
  impl.storage = moved.impl()->storage;
  impl.offset = 0;
  if (t.grad().defined()) t.set_grad(t.grad().To(device));
}

}  // namespace

void Module::To(Device device) {
  if (absl::Status usable = cuda::CheckUsable(device); !usable.ok()) ThrowStatus(usable);
  for (const auto& [name, tensor] : parameters_) MoveInPlace(tensor, device);
  for (const auto& [name, tensor] : buffers_) MoveInPlace(tensor, device);
  for (const auto& [name, child] : children_) child->To(device);
}

void Module::AppendDebugString(const std::string& indent, std::string& out) const {
  absl::StrAppend(&out, Describe());
  if (children_.empty()) return;
  absl::StrAppend(&out, "(\n");
  for (const auto& [name, child] : children_) {
    absl::StrAppend(&out, indent, "  (", name, "): ");
    child->AppendDebugString(indent + "  ", out);
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, indent, ")");
}

std::string Module::DebugString() const {
  std::string out;
  AppendDebugString("", out);
  return out;
}

// ---------------------------------------------------------------------------- Linear
Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Generator& generator,
               DType dtype) {
  DDPKIT_CHECK(in_features > 0 && out_features > 0,
               "[Linear] features must be positive, got in=", in_features, " out=", out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  Tensor weight = Tensor::Empty({out_features, in_features}, dtype);
  generator.FillUniform(weight, -bound, bound);
  weight_ = RegisterParameter("weight", weight);
  if (bias) {
    Tensor b = Tensor::Empty({out_features}, dtype);
    generator.FillUniform(b, -bound, bound);
    bias_ = RegisterParameter("bias", b);
  }
}

Tensor Linear::Forward(const Tensor& input) { return ddpkit::Linear(input, weight_, bias_); }

std::string Linear::Describe() const {
  return StrCat("Linear(in_features=", weight_.size(1), ", out_features=", weight_.size(0),
                ", bias=", bias_.defined() ? "true" : "false", ")");
}

// ---------------------------------------------------------------------------- Embedding
Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& generator,
                     DType dtype) {
  Tensor weight = Tensor::Empty({num_embeddings, embedding_dim}, dtype);
  generator.FillNormal(weight);
  weight_ = RegisterParameter("weight", weight);
}

Tensor Embedding::Forward(const Tensor& input) { return EmbeddingLookup(weight_, input); }

std::string Embedding::Describe() const {
  return StrCat("Embedding(", weight_.size(0), ", ", weight_.size(1), ")");
}

// ---------------------------------------------------------------------------- ReLU, Sequential
Tensor ReLU::Forward(const Tensor& input) { return Relu(input); }

void Sequential::Append(std::shared_ptr<Module> module) {
  RegisterModule(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
}

Tensor Sequential::Forward(const Tensor& input) {
  Tensor x = input;
  for (size_t i = 0; i < layers_.size(); ++i) {
    // A Linear followed by a ReLU runs as one op (LinearRelu): same numbers, one pass fewer.
    auto* linear = dynamic_cast<Linear*>(layers_[i].get());
    if (linear != nullptr && i + 1 < layers_.size() &&
        dynamic_cast<ReLU*>(layers_[i + 1].get()) != nullptr) {
      x = LinearRelu(x, linear->weight(), linear->bias());
      ++i;
      continue;
    }
    x = layers_[i]->Forward(x);
  }
  return x;
}

// ---------------------------------------------------------------------------- MLP
absl::StatusOr<std::vector<int64_t>> ParseMlpSpec(std::string_view std_spec) {
  const absl::string_view spec(std_spec.data(), std_spec.size());
  constexpr absl::string_view kPrefix = "mlp:";
  if (!absl::StartsWith(spec, kPrefix)) {
    return absl::InvalidArgumentError(
        StrCat("model spec '", spec,
               "' is not understood; expected mlp:IN,H1,...,OUT, e.g. mlp:32,64,10"));
  }
  std::vector<int64_t> widths;
  for (absl::string_view part : absl::StrSplit(spec.substr(kPrefix.size()), ',')) {
    int64_t width = 0;
    if (!absl::SimpleAtoi(part, &width) || width <= 0) {
      return absl::InvalidArgumentError(
          StrCat("model spec '", spec, "': width '", part, "' is not a positive integer"));
    }
    widths.push_back(width);
  }
  if (widths.size() < 2) {
    return absl::InvalidArgumentError(StrCat(
        "model spec '", spec, "' needs at least an input and an output width, e.g. mlp:32,10"));
  }
  // Bounded, so that every shape and element count below stays far inside int64 (found by
  // tests/fuzz/model_spec_fuzz.cc: mlp:9223372036854775807,2 overflowed them and crashed).
  int64_t parameters = 0;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    const int64_t in = widths[i], out = widths[i + 1];
    if (in > kMaxMlpParameters / out || in * out + out > kMaxMlpParameters - parameters) {
      return absl::InvalidArgumentError(StrCat("model spec '", spec, "' has more than ",
                                               kMaxMlpParameters, " parameters (from layer ", i,
                                               ": ", in, " x ", out, "); use smaller widths"));
    }
    parameters += in * out + out;
  }
  return widths;
}

std::shared_ptr<Sequential> MakeMlp(const std::vector<int64_t>& widths, uint64_t seed,
                                    DType dtype) {
  DDPKIT_CHECK(widths.size() >= 2, "[MakeMlp] needs at least two widths");
  Generator generator(seed);
  auto mlp = std::make_shared<Sequential>();
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) mlp->Append(std::make_shared<ReLU>());
    mlp->Append(
        std::make_shared<Linear>(widths[i], widths[i + 1], /*bias=*/true, generator, dtype));
  }
  return mlp;
}

}  // namespace ddpkit::nn
