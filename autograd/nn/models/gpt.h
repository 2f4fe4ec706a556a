// nanoGPT's GPT (github.com/karpathy/nanoGPT, model.py): token and position embeddings, L
// transformer blocks, a final LayerNorm and lm_head, whose weight is the token embedding's.
//
// Parameter names and order are nanoGPT's named_parameters(): transformer.wte.weight,
// transformer.wpe.weight, transformer.h.0.ln_1.weight, ..., transformer.ln_f.weight (and .bias);
// lm_head.weight is tied to transformer.wte.weight and listed once, under that first name;
// StateDict() lists it under both, lm_head.weight last, as nanoGPT's state_dict().
// So are the autograd graph's shape and, with it, DDP's gradient-ready order (PyTorch 1.13's,
// checked by tests/autograd/nn/models/gpt_test.cc against tools/scripts/golden/make_gpt_golden.py).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn/nn.h"
#include "autograd/nn/transformer.h"

namespace ddpkit::models {

// "gpt:layers=L,heads=H,dim=D,ctx=T,vocab=V[,bias=0|1]" (nanoGPT's n_layer, n_head, n_embd,
// block_size, vocab_size, bias; bias defaults to 1 as nanoGPT's).
struct GptSpec {
  int64_t layers = 0, heads = 0, dim = 0, ctx = 0, vocab = 0;
  bool bias = true;
};

// Every key but bias is required, each once, positive; heads divides dim; at most
// nn::kMaxMlpParameters parameters. InvalidArgument saying which rule failed otherwise.
absl::StatusOr<GptSpec> ParseGptSpec(std::string_view spec);
std::string SpecString(const GptSpec& spec);  // bias only when 0
int64_t NumParameters(const GptSpec& spec);   // elements, the tied table counted once

// wte, wpe, the blocks "h" and ln_f: nanoGPT's `transformer` ModuleDict.
class GptTransformer : public nn::Module {
 public:
  GptTransformer(const GptSpec& spec, Generator& generator, DType dtype);
  // int64 [B, T] -> ln_f's output [B, T, C].
  Tensor Forward(const Tensor& idx) override;
  const Tensor& token_table() const { return wte_->weight(); }
  // Each block of h under reentrant activation checkpointing (autograd/checkpoint.h), as
  // torch.utils.checkpoint(block, x) per block: forward keeps only the blocks' inputs and
  // backward recomputes each block. Same gradients; a block's parameters' hooks fire inside
  // its nested backward.
  void set_checkpoint_blocks(bool on) { checkpoint_blocks_ = on; }

 private:
  std::string Describe() const override { return "ModuleDict"; }
  int64_t ctx_;
  bool checkpoint_blocks_ = false;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Sequential> h_;
  std::vector<std::shared_ptr<nn::Module>> blocks_;  // h's children, for checkpointing each
  std::shared_ptr<nn::LayerNorm> ln_f_;
};

class Gpt : public nn::Module {
 public:
  // nanoGPT's init: weights N(0, 0.02), each c_proj.weight N(0, 0.02 / sqrt(2 L)), biases 0,
  // LayerNorm weights 1; drawn from `generator`.
  Gpt(const GptSpec& spec, Generator& generator, DType dtype = DType::kFloat32);
  // int64 token indices [B, T], T <= ctx -> logits [B, T, vocab].
  Tensor Forward(const Tensor& idx) override;
  const GptSpec& spec() const { return spec_; }
  // Recompute each transformer block (transformer.h.N) in backward: GptTransformer's.
  void set_checkpoint_blocks(bool on) { transformer_->set_checkpoint_blocks(on); }
  // wte ... ln_f without lm_head: for a model that uses the hidden states (an encoder tower).
  const std::shared_ptr<GptTransformer>& transformer() const { return transformer_; }

 private:
  std::string Describe() const override { return "GPT"; }
  void InitWeights(Generator& generator);
  GptSpec spec_;
  std::shared_ptr<GptTransformer> transformer_;
  std::shared_ptr<nn::Linear> lm_head_;
};

std::shared_ptr<Gpt> MakeGpt(const GptSpec& spec, uint64_t seed, DType dtype = DType::kFloat32);

// nanoGPT's loss: the mean cross-entropy over every position of logits [B, T, V] against int64
// targets [B, T].
Tensor GptLoss(const Tensor& logits, const Tensor& targets);

}  // namespace ddpkit::models
