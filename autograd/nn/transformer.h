// The transformer modules of nanoGPT's model.py (github.com/karpathy/nanoGPT), with its names,
// so that state dicts move between ddpkit and PyTorch unchanged. Inputs are [B, T, C]; dropout
// is left out (nanoGPT's p = 0 makes it the identity, with no autograd node in PyTorch either).
#pragma once

#include <memory>

#include "autograd/nn/nn.h"

namespace ddpkit::nn {

// nanoGPT's LayerNorm: PyTorch's with eps 1e-5 and an optional bias. weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, bool bias, DType dtype = DType::kFloat32);
  Tensor Forward(const Tensor& input) override;

 private:
  std::string Describe() const override;
  Tensor weight_, bias_;
};

// GELU, exact (erf) form: PyTorch's default.
class GELU : public Module {
 public:
  Tensor Forward(const Tensor& input) override;

 private:
  std::string Describe() const override { return "GELU(approximate='none')"; }
};

// c_attn (C -> 3C), causal self-attention over `heads` heads, c_proj (C -> C).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t dim, int64_t heads, bool bias, Generator& generator,
                      DType dtype = DType::kFloat32);
  Tensor Forward(const Tensor& input) override;

 private:
  std::string Describe() const override { return "CausalSelfAttention"; }
  int64_t heads_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
};

// c_fc (C -> 4C), GELU, c_proj (4C -> C).
class MLP : public Module {
 public:
  MLP(int64_t dim, bool bias, Generator& generator, DType dtype = DType::kFloat32);
  Tensor Forward(const Tensor& input) override;

 private:
  std::string Describe() const override { return "MLP"; }
  std::shared_ptr<Linear> c_fc_, c_proj_;
  std::shared_ptr<GELU> gelu_;
};

// x + attn(ln_1(x)), then that + mlp(ln_2(that)).
class Block : public Module {
 public:
  Block(int64_t dim, int64_t heads, bool bias, Generator& generator, DType dtype = DType::kFloat32);
  Tensor Forward(const Tensor& input) override;

 private:
  std::string Describe() const override { return "Block"; }
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<MLP> mlp_;
};

}  // namespace ddpkit::nn
