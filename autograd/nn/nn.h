// ddpkit::nn: modules with named parameters, as PyTorch's torch.nn.
//
// Parameter names are dot-separated paths, the same strings as the keys of a PyTorch
// state_dict: an nn.Sequential(Linear, ReLU, Linear) has "0.weight", "0.bias", "2.weight",
// "2.bias". Initialisation follows PyTorch's defaults (Linear: U(-1/sqrt(in), 1/sqrt(in)) for
// weight and bias; Embedding: N(0, 1)) drawn from a seeded Generator, so a seed fixes a model.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/random.h"
#include "autograd/tensor.h"

namespace ddpkit {

using NamedTensor = std::pair<std::string, Tensor>;
using NamedTensors = std::vector<NamedTensor>;

namespace nn {

// What a model's control flow may depend on besides its input: the rank it runs on and the
// iteration (PyTorch's control-flow tests branch on the rank and on an input that changes per
// iteration). A training loop sets it before each forward (Module::SetForwardContext).
struct ForwardContext {
  int rank = 0;
  int64_t iteration = 0;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor Forward(const Tensor& input) = 0;
  Tensor operator()(const Tensor& input) { return Forward(input); }
  // The rank and iteration the next forwards run in. Only a model with control flow (a
  // Sequential with a branch) reads it; the others ignore it.
  virtual void SetForwardContext(const ForwardContext& /*context*/) {}

  // Own parameters first, then each child's under "<child>.", in registration order. A tensor
  // registered twice (a shared parameter) appears once, under its first name.
  NamedTensors NamedParameters() const;
  TensorList Parameters() const;
  // Non-trainable state (BatchNorm2d's running statistics; DDP broadcasts them).
  NamedTensors NamedBuffers() const;
  // The other names of a parameter registered more than once (a tied weight: a GPT's
  // "lm_head.weight", whose first name is "transformer.wte.weight"), each with the tensor.
  NamedTensors NamedParameterAliases() const;
  // PyTorch's state_dict(): this module's own parameters, then its own buffers, then each
  // child's under "<child>.", recursively. A tied parameter is listed under every name it has
  // (nanoGPT's lists transformer.wte.weight and, last, lm_head.weight), unlike NamedParameters.
  NamedTensors StateDict() const;
  // Moves every parameter and buffer (this module's and its children's) to `device` in place,
  // as PyTorch's module.to(device): each keeps its Tensor identity, so handles held elsewhere
  // (an optimizer's, a DDP reducer's) see the new storage, and a parameter stays a leaf that
  // requires grad; an existing .grad moves too. Call it before an optimizer or DDP wraps the
  // model: their state is not moved.
  void To(Device device);
  // Training (the default) or evaluation mode for this module and its children, as PyTorch's
  // module.train(mode) and module.eval(); BatchNorm2d reads it.
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool is_training() const { return training_; }
  // Calls fn on every child module (recursively, each before its parent), then on this one:
  // PyTorch's module.apply(fn), e.g. to convert every BatchNorm2d to SyncBatchNorm.
  void Apply(const std::function<void(Module&)>& fn);
  // "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=true)\n ...)".
  std::string DebugString() const;

 protected:
  // Registers `value` as a parameter (it becomes a leaf that requires grad).
  Tensor RegisterParameter(std::string name, Tensor value);
  // Points the parameter registered as `name` at `value` (which keeps its own identity).
  void ReplaceParameter(const std::string& name, const Tensor& value);
  Tensor RegisterBuffer(std::string name, Tensor value);
  // Registers "weight" of `weight_shape` and, when `bias`, "bias" [weight_shape[0]], both drawn
  // (in that order) from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in the product of
  // weight_shape[1:]: PyTorch's default for Linear and Conv2d. Returns {weight, bias}.
  std::pair<Tensor, Tensor> RegisterDefaultWeightAndBias(const Shape& weight_shape, bool bias,
                                                         Generator& generator, DType dtype);
  template <typename M>
  std::shared_ptr<M> RegisterModule(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }
  // One line describing this module's own configuration, e.g. "Linear(in_features=4, ...)".
  virtual std::string Describe() const = 0;

 private:
  void CollectNamed(const std::string& prefix, bool parameters, NamedTensors& out,
                    std::vector<const TensorImpl*>& seen) const;
  void AppendDebugString(const std::string& indent, std::string& out) const;
  void AppendStateDict(const std::string& prefix, NamedTensors& out) const;

  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, Generator& generator,
         DType dtype = DType::kFloat32);
  Tensor Forward(const Tensor& input) override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  // Uses `other`'s weight from now on (a tied parameter, as PyTorch's
  // `b.weight = a.weight`): the model lists it once, under its first name.
  void TieWeightTo(const Linear& other) { TieWeightTo(other.weight()); }
  // The same with any parameter of the weight's shape (nanoGPT's lm_head tied to wte's table).
  void TieWeightTo(const Tensor& weight);

 private:
  std::string Describe() const override;
  Tensor weight_, bias_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Generator& generator,
            DType dtype = DType::kFloat32);
  // `input` holds int64 indices [n].
  Tensor Forward(const Tensor& input) override;
  const Tensor& weight() const { return weight_; }

 private:
  std::string Describe() const override;
  Tensor weight_;
};

class ReLU : public Module {
 public:
  Tensor Forward(const Tensor& input) override;

 private:
  std::string Describe() const override { return "ReLU()"; }
};

// Where a branch layer runs (the model spec's branch=): on every rank in odd iterations, on
// rank 1 in every iteration, or on rank 1 in odd iterations only.
enum class BranchRule { kNone, kOddIterations, kRank1, kRank1OddIterations };
// Whether a branch under `rule` runs in `context`.
bool BranchTaken(BranchRule rule, const ForwardContext& context);

// Children named "0", "1", ...; Forward applies them in order (a Linear and the ReLU after it as
// one LinearRelu op), then the branch where its rule says so.
class Sequential : public Module {
 public:
  Sequential() = default;
  void Append(std::shared_ptr<Module> module);
  // A child registered under `name` after the others that Forward never calls: its parameters
  // get no gradient (what DDP's find_unused_parameters is for).
  void AddUnused(std::string name, std::shared_ptr<Module> module);
  // A child registered under `name` that Forward applies last, to the ReLU of the output, only
  // where `rule` says so in the context SetForwardContext set: control flow, the same on every
  // rank or different across ranks.
  void SetBranch(std::string name, std::shared_ptr<Module> module, BranchRule rule);
  void SetForwardContext(const ForwardContext& context) override { context_ = context; }
  Tensor Forward(const Tensor& input) override;
  size_t size() const { return layers_.size(); }

 private:
  std::string Describe() const override { return "Sequential"; }
  std::vector<std::shared_ptr<Module>> layers_;
  std::shared_ptr<Module> branch_;
  BranchRule branch_rule_ = BranchRule::kNone;
  ForwardContext context_;
};

// The most parameters (elements) a model spec may describe: 2^36, 256 GiB as float32.
inline constexpr int64_t kMaxMlpParameters = int64_t{1} << 36;

// A model spec: "mlp:IN,H1,...,OUT" and then options, each KEY=0|1 (the scenarios PyTorch's
// own DDP tests use):
//   bias=0    every Linear without a bias (PyTorch's Linear(..., bias=False));
//   unused=1  one more Linear(OUT, OUT), registered last as "unused", that forward never calls;
//   tied=1    the last two hidden-to-hidden Linears share one weight (the first one's), which
//             needs three equal widths before OUT, e.g. mlp:8,16,16,16,4,tied=1;
// and one that takes a word (control flow, as PyTorch's test_ddp_control_flow_* tests):
//   branch=iters|rank1|rank1+iters  one more Linear(OUT, OUT), registered as "branch" (before
//             "unused"), that forward applies to ReLU(output) only in odd iterations on every
//             rank (iters: the same across ranks), only on rank 1 (rank1), or only on rank 1 in
//             odd iterations (rank1+iters: different across ranks and iterations). The training
//             loop tells the model its rank and iteration (Module::SetForwardContext); DDP needs
//             --find-unused-parameters for it.
struct MlpSpec {
  std::vector<int64_t> widths;
  bool bias = true;
  bool unused = false;
  bool tied = false;
  BranchRule branch = BranchRule::kNone;
};

// The spec's widths and options: at least two positive widths, at most kMaxMlpParameters
// parameters in all, and only the options above (each at most once).
absl::StatusOr<MlpSpec> ParseModelSpec(std::string_view spec);
// The spec spelled back, options only where they differ from the defaults.
std::string SpecString(const MlpSpec& spec);
// A spec's widths, for the tools that build a plain MLP only: InvalidArgument for options too.
absl::StatusOr<std::vector<int64_t>> ParseMlpSpec(std::string_view spec);
// Linear(IN,H1), ReLU, Linear(H1,H2), ReLU, ..., Linear(Hk,OUT): parameters "0.weight",
// "0.bias", "2.weight", ... as PyTorch's nn.Sequential of the same layers; then the spec's
// options (see MlpSpec).
std::shared_ptr<Sequential> MakeMlp(const MlpSpec& spec, uint64_t seed,
                                    DType dtype = DType::kFloat32);
std::shared_ptr<Sequential> MakeMlp(const std::vector<int64_t>& widths, uint64_t seed,
                                    DType dtype = DType::kFloat32);

}  // namespace nn
}  // namespace ddpkit
