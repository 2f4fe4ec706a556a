#include "autograd/nn/nn.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
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

void Module::ReplaceParameter(const std::string& name, const Tensor& value) {
  for (auto& [registered, tensor] : parameters_) {
    if (registered == name) tensor = value;
  }
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

NamedTensors Module::NamedParameterAliases() const {
  NamedTensors all, aliases;  // every parameter name, repeats too; then those not listed
  std::vector<std::pair<std::string, const Module*>> modules = {{"", this}};
  for (size_t i = 0; i < modules.size(); ++i) {
    const auto [prefix, module] = modules[i];  // a copy: the vector grows below
    for (const auto& [name, tensor] : module->parameters_) all.emplace_back(prefix + name, tensor);
    for (const auto& [name, child] : module->children_) {
      modules.emplace_back(prefix + name + ".", child.get());
    }
  }
  const NamedTensors first = NamedParameters();
  for (const NamedTensor& entry : all) {    // no structured binding: clang 14 cannot
    const std::string& name = entry.first;  // capture one in a lambda
    const bool listed = std::any_of(first.begin(), first.end(),
                                    [&](const NamedTensor& f) { return f.first == name; });
    if (!listed) aliases.push_back(entry);
  }
  return aliases;
}

NamedTensors Module::StateDict() const {
  NamedTensors out;
  AppendStateDict("", out);
  return out;
}

void Module::AppendStateDict(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, tensor] : parameters_) out.emplace_back(prefix + name, tensor);
  for (const auto& [name, tensor] : buffers_) out.emplace_back(prefix + name, tensor);
  for (const auto& [name, child] : children_) child->AppendStateDict(prefix + name + ".", out);
}

NamedTensors Module::NamedBuffers() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  CollectNamed("", /*parameters=*/false, out, seen);
  return out;
}

std::pair<Tensor, Tensor> Module::RegisterDefaultWeightAndBias(const Shape& weight_shape, bool bias,
                                                               Generator& generator, DType dtype) {
  const int64_t fan_in = NumElements(weight_shape) / weight_shape[0];
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  Tensor weight = Tensor::Empty(weight_shape, dtype);
  generator.FillUniform(weight, -bound, bound);
  RegisterParameter("weight", weight);
  if (!bias) return {weight, Tensor()};
  Tensor b = Tensor::Empty({weight_shape[0]}, dtype);
  generator.FillUniform(b, -bound, bound);
  return {weight, RegisterParameter("bias", b)};
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

void Module::Apply(const std::function<void(Module&)>& fn) {
  for (const auto& [name, child] : children_) child->Apply(fn);
  fn(*this);
}

void Module::Train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->Train(on);
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
  std::tie(weight_, bias_) =
      RegisterDefaultWeightAndBias({out_features, in_features}, bias, generator, dtype);
}

Tensor Linear::Forward(const Tensor& input) { return ddpkit::Linear(input, weight_, bias_); }

void Linear::TieWeightTo(const Tensor& weight) {
  DDPKIT_CHECK(weight.shape() == weight_.shape(), "[Linear] a tied weight needs one shape");
  weight_ = weight;
  ReplaceParameter("weight", weight_);
}

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

void Sequential::AddUnused(std::string name, std::shared_ptr<Module> module) {
  RegisterModule(std::move(name), std::move(module));
}

bool BranchTaken(BranchRule rule, const ForwardContext& context) {
  const bool odd_iteration = context.iteration % 2 == 1, rank1 = context.rank == 1;
  switch (rule) {
    case BranchRule::kNone: return false;
    case BranchRule::kOddIterations: return odd_iteration;
    case BranchRule::kRank1: return rank1;
    case BranchRule::kRank1OddIterations: return rank1 && odd_iteration;
  }
  return false;
}

void Sequential::SetBranch(std::string name, std::shared_ptr<Module> module, BranchRule rule) {
  DDPKIT_CHECK(branch_ == nullptr, "[Sequential::SetBranch] a Sequential has one branch");
  branch_ = RegisterModule(std::move(name), std::move(module));
  branch_rule_ = rule;
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
  if (branch_ != nullptr && BranchTaken(branch_rule_, context_)) x = branch_->Forward(Relu(x));
  return x;
}

// ---------------------------------------------------------------------------- MLP
namespace {

// branch='s words, in BranchRule's order after kNone.
constexpr absl::string_view kBranchWords[] = {"iters", "rank1", "rank1+iters"};

// branch=WORD -> its rule in `spec`.
absl::Status ParseBranch(absl::string_view spec_text, absl::string_view value, MlpSpec& spec) {
  for (size_t i = 0; i < std::size(kBranchWords); ++i) {
    if (value == kBranchWords[i]) {
      spec.branch = static_cast<BranchRule>(i + 1);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      StrCat("model spec '", spec_text, "': option branch takes iters, rank1 or rank1+iters, not '",
             value, "'"));
}

// "KEY=0|1" (or branch=WORD) -> the option it sets in `spec`; `seen` keeps each key to once.
absl::Status ParseOption(absl::string_view spec_text, absl::string_view part, MlpSpec& spec,
                         std::vector<std::string>& seen) {
  const size_t eq = part.find('=');
  const absl::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
  bool* option = key == "bias"     ? &spec.bias
                 : key == "unused" ? &spec.unused
                 : key == "tied"   ? &spec.tied
                                   : nullptr;
  if (option == nullptr && key != "branch") {
    return absl::InvalidArgumentError(StrCat("model spec '", spec_text, "': unknown option '", key,
                                             "'; the options are bias=, unused=, tied= and "
                                             "branch="));
  }
  if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
    return absl::InvalidArgumentError(
        StrCat("model spec '", spec_text, "': option ", key, " is given twice"));
  }
  seen.emplace_back(key);
  if (option == nullptr) return ParseBranch(spec_text, value, spec);
  if (value != "0" && value != "1") {
    return absl::InvalidArgumentError(
        StrCat("model spec '", spec_text, "': option ", key, " takes 0 or 1, not '", value, "'"));
  }
  *option = value == "1";
  return absl::OkStatus();
}

// Bounded, so that every shape and element count stays far inside int64 (found by
// tests/fuzz/model_spec_fuzz.cc: mlp:9223372036854775807,2 overflowed them and crashed).
absl::Status CheckSize(absl::string_view spec_text, const MlpSpec& spec) {
  std::vector<std::pair<int64_t, int64_t>> layers;
  for (size_t i = 0; i + 1 < spec.widths.size(); ++i) {
    layers.emplace_back(spec.widths[i], spec.widths[i + 1]);
  }
  if (spec.unused) layers.emplace_back(spec.widths.back(), spec.widths.back());
  if (spec.branch != BranchRule::kNone) layers.emplace_back(spec.widths.back(), spec.widths.back());
  int64_t parameters = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto [in, out] = layers[i];
    if (in > kMaxMlpParameters / out || in * out + out > kMaxMlpParameters - parameters) {
      return absl::InvalidArgumentError(StrCat("model spec '", spec_text, "' has more than ",
                                               kMaxMlpParameters, " parameters (from layer ", i,
                                               ": ", in, " x ", out, "); use smaller widths"));
    }
    parameters += in * out + out;
  }
  return absl::OkStatus();
}

// tied=1 shares the weight of the last two hidden-to-hidden Linears: both must be HxH.
absl::Status CheckTied(absl::string_view spec_text, const MlpSpec& spec) {
  const std::vector<int64_t>& w = spec.widths;
  const size_t n = w.size();
  if (!spec.tied || (n >= 5 && w[n - 4] == w[n - 3] && w[n - 3] == w[n - 2])) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      StrCat("model spec '", spec_text,
             "': tied=1 needs two hidden-to-hidden layers of one shape, i.e. three equal widths "
             "before the output, e.g. mlp:8,16,16,16,4,tied=1"));
}

}  // namespace

absl::StatusOr<MlpSpec> ParseModelSpec(std::string_view std_spec) {
  const absl::string_view spec(std_spec.data(), std_spec.size());
  constexpr absl::string_view kPrefix = "mlp:";
  if (!absl::StartsWith(spec, kPrefix)) {
    return absl::InvalidArgumentError(
        StrCat("model spec '", spec,
               "' is not understood; expected mlp:IN,H1,...,OUT, e.g. mlp:32,64,10"));
  }
  MlpSpec parsed;
  std::vector<std::string> options;
  for (absl::string_view part : absl::StrSplit(spec.substr(kPrefix.size()), ',')) {
    if (absl::StrContains(part, '=')) {
      DDPKIT_RETURN_IF_ERROR(ParseOption(spec, part, parsed, options));
      continue;
    }
    int64_t width = 0;
    if (!absl::SimpleAtoi(part, &width) || width <= 0) {
      return absl::InvalidArgumentError(
          StrCat("model spec '", spec, "': width '", part, "' is not a positive integer"));
    }
    if (!options.empty()) {
      return absl::InvalidArgumentError(
          StrCat("model spec '", spec, "': width '", part, "' comes after an option"));
    }
    parsed.widths.push_back(width);
  }
  if (parsed.widths.size() < 2) {
    return absl::InvalidArgumentError(StrCat(
        "model spec '", spec, "' needs at least an input and an output width, e.g. mlp:32,10"));
  }
  DDPKIT_RETURN_IF_ERROR(CheckSize(spec, parsed));
  DDPKIT_RETURN_IF_ERROR(CheckTied(spec, parsed));
  return parsed;
}

std::string SpecString(const MlpSpec& spec) {
  std::string out = StrCat("mlp:", absl::StrJoin(spec.widths, ","));
  if (!spec.bias) absl::StrAppend(&out, ",bias=0");
  if (spec.unused) absl::StrAppend(&out, ",unused=1");
  if (spec.tied) absl::StrAppend(&out, ",tied=1");
  if (spec.branch != BranchRule::kNone) {
    absl::StrAppend(&out, ",branch=", kBranchWords[static_cast<int>(spec.branch) - 1]);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ParseMlpSpec(std::string_view spec) {
  DDPKIT_ASSIGN_OR_RETURN(MlpSpec parsed, ParseModelSpec(spec));
  if (!parsed.bias || parsed.unused || parsed.tied || parsed.branch != BranchRule::kNone) {
    return absl::InvalidArgumentError(StrCat("model spec '", std::string(spec),
                                             "': this tool builds a plain MLP and takes no "
                                             "options (bias=, unused=, tied=, branch=)"));
  }
  return std::move(parsed.widths);
}

std::shared_ptr<Sequential> MakeMlp(const MlpSpec& spec, uint64_t seed, DType dtype) {
  const std::vector<int64_t>& widths = spec.widths;
  DDPKIT_CHECK(widths.size() >= 2, "[MakeMlp] needs at least two widths");
  Generator generator(seed);
  auto mlp = std::make_shared<Sequential>();
  std::vector<std::shared_ptr<Linear>> linears;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) mlp->Append(std::make_shared<ReLU>());
    linears.push_back(
        std::make_shared<Linear>(widths[i], widths[i + 1], spec.bias, generator, dtype));
    mlp->Append(linears.back());
  }
  if (spec.tied) {
    DDPKIT_CHECK(linears.size() >= 4, "[MakeMlp] tied=1 needs four Linears");
    linears[linears.size() - 2]->TieWeightTo(*linears[linears.size() - 3]);
  }
  if (spec.branch != BranchRule::kNone) {
    mlp->SetBranch(
        "branch",
        std::make_shared<Linear>(widths.back(), widths.back(), spec.bias, generator, dtype),
        spec.branch);
  }
  if (spec.unused) {
    mlp->AddUnused("unused", std::make_shared<Linear>(widths.back(), widths.back(), spec.bias,
                                                      generator, dtype));
  }
  return mlp;
}

std::shared_ptr<Sequential> MakeMlp(const std::vector<int64_t>& widths, uint64_t seed,
                                    DType dtype) {
  return MakeMlp(MlpSpec{.widths = widths}, seed, dtype);
}

}  // namespace ddpkit::nn
