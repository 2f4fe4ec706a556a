#include "autograd/nn/transformer.h"

#include "autograd/ops.h"

namespace ddpkit::nn {

// ---------------------------------------------------------------------------- LayerNorm
LayerNorm::LayerNorm(int64_t dim, bool bias, DType dtype) {
  DDPKIT_CHECK(dim > 0, "[LayerNorm] dim must be positive, got ", dim);
  weight_ = RegisterParameter("weight", Tensor::Full({dim}, 1.0, dtype));
  if (bias) bias_ = RegisterParameter("bias", Tensor::Zeros({dim}, dtype));
}

Tensor LayerNorm::Forward(const Tensor& input) {
  return ddpkit::LayerNorm(input, weight_, bias_, 1e-5);
}

std::string LayerNorm::Describe() const {
  return StrCat("LayerNorm(", weight_.size(0), ", bias=", bias_.defined() ? "true" : "false", ")");
}

Tensor GELU::Forward(const Tensor& input) { return Gelu(input); }

// ---------------------------------------------------------------------------- attention, MLP
CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, bool bias,
                                         Generator& generator, DType dtype)
    : heads_(heads) {
  DDPKIT_CHECK(heads > 0 && dim % heads == 0, "[CausalSelfAttention] ", heads,
               " heads do not divide dim ", dim);
  c_attn_ =
      RegisterModule("c_attn", std::make_shared<Linear>(dim, 3 * dim, bias, generator, dtype));
  c_proj_ = RegisterModule("c_proj", std::make_shared<Linear>(dim, dim, bias, generator, dtype));
}

Tensor CausalSelfAttention::Forward(const Tensor& input) {
  return c_proj_->Forward(ddpkit::CausalSelfAttention(c_attn_->Forward(input), heads_));
}

MLP::MLP(int64_t dim, bool bias, Generator& generator, DType dtype) {
  c_fc_ = RegisterModule("c_fc", std::make_shared<Linear>(dim, 4 * dim, bias, generator, dtype));
  gelu_ = RegisterModule("gelu", std::make_shared<GELU>());
  c_proj_ =
      RegisterModule("c_proj", std::make_shared<Linear>(4 * dim, dim, bias, generator, dtype));
}

Tensor MLP::Forward(const Tensor& input) {
  return c_proj_->Forward(gelu_->Forward(c_fc_->Forward(input)));
}

// ---------------------------------------------------------------------------- Block
Block::Block(int64_t dim, int64_t heads, bool bias, Generator& generator, DType dtype) {
  ln_1_ = RegisterModule("ln_1", std::make_shared<LayerNorm>(dim, bias, dtype));
  attn_ = RegisterModule("attn",
                         std::make_shared<CausalSelfAttention>(dim, heads, bias, generator, dtype));
  ln_2_ = RegisterModule("ln_2", std::make_shared<LayerNorm>(dim, bias, dtype));
  mlp_ = RegisterModule("mlp", std::make_shared<MLP>(dim, bias, generator, dtype));
}

Tensor Block::Forward(const Tensor& input) {
  Tensor x = input + attn_->Forward(ln_1_->Forward(input));
  return x + mlp_->Forward(ln_2_->Forward(x));
}

}  // namespace ddpkit::nn
