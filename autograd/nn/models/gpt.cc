#include "autograd/nn/models/gpt.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "autograd/checkpoint.h"
#include "autograd/ops.h"

namespace ddpkit::models {

// ---------------------------------------------------------------------------- spec
namespace {

constexpr std::string_view kGptUsage = "gpt:layers=L,heads=H,dim=D,ctx=T,vocab=V[,bias=0|1]";

absl::Status SpecError(absl::string_view spec, absl::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("model spec '", spec, "': ", what, "; expected ", kGptUsage));
}

// Sets the field `key` names from `value`; `seen` keeps each key to once.
absl::Status ParseGptOption(absl::string_view spec, absl::string_view part, GptSpec& out,
                            std::vector<std::string>& seen) {
  const size_t eq = part.find('=');
  if (eq == absl::string_view::npos)
    return SpecError(spec, StrCat("'", part, "' is not KEY=VALUE"));
  const absl::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
  int64_t* field = key == "layers"  ? &out.layers
                   : key == "heads" ? &out.heads
                   : key == "dim"   ? &out.dim
                   : key == "ctx"   ? &out.ctx
                   : key == "vocab" ? &out.vocab
                                    : nullptr;
  if (field == nullptr && key != "bias") {
    return SpecError(spec, StrCat("unknown key '", key, "'"));
  }
  if (absl::c_linear_search(seen, key)) return SpecError(spec, StrCat(key, " is given twice"));
  seen.emplace_back(key);
  if (field == nullptr) {
    if (value != "0" && value != "1") return SpecError(spec, "bias takes 0 or 1");
    out.bias = value == "1";
    return absl::OkStatus();
  }
  constexpr int64_t kMaxSide = int64_t{1} << 24;  // keeps every product below far inside int64
  if (!absl::SimpleAtoi(value, field) || *field <= 0 || *field > kMaxSide) {
    return SpecError(spec,
                     StrCat(key, " must be an integer in [1, ", kMaxSide, "], got '", value, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t NumParameters(const GptSpec& s) {
  const int64_t d = s.dim, biases = s.bias ? 1 : 0;
  // Per block: two LayerNorms, c_attn, attn.c_proj, c_fc, mlp.c_proj.
  const int64_t block = 2 * d * (1 + biases) + (3 * d * d + 3 * d * biases) + (d * d + d * biases) +
                        (4 * d * d + 4 * d * biases) + (4 * d * d + d * biases);
  return s.vocab * d + s.ctx * d + s.layers * block + d * (1 + biases);
}

absl::StatusOr<GptSpec> ParseGptSpec(std::string_view std_spec) {
  const absl::string_view spec(std_spec.data(), std_spec.size());
  if (!absl::StartsWith(spec, "gpt:")) return SpecError(spec, "it does not start with gpt:");
  GptSpec out;
  std::vector<std::string> seen;
  for (absl::string_view part : absl::StrSplit(spec.substr(4), ',')) {
    DDPKIT_RETURN_IF_ERROR(ParseGptOption(spec, part, out, seen));
  }
  for (const char* key : {"layers", "heads", "dim", "ctx", "vocab"}) {
    if (!absl::c_linear_search(seen, key)) return SpecError(spec, StrCat(key, "= is missing"));
  }
  if (out.dim % out.heads != 0) {
    return SpecError(spec, StrCat("heads=", out.heads, " does not divide dim=", out.dim));
  }
  if (NumParameters(out) > nn::kMaxMlpParameters) {
    return SpecError(spec, StrCat("it has ", NumParameters(out), " parameters, more than ",
                                  nn::kMaxMlpParameters));
  }
  return out;
}

std::string SpecString(const GptSpec& s) {
  return StrCat("gpt:layers=", s.layers, ",heads=", s.heads, ",dim=", s.dim, ",ctx=", s.ctx,
                ",vocab=", s.vocab, s.bias ? "" : ",bias=0");
}

// ---------------------------------------------------------------------------- modules
GptTransformer::GptTransformer(const GptSpec& spec, Generator& generator, DType dtype)
    : ctx_(spec.ctx) {
  wte_ = RegisterModule("wte",
                        std::make_shared<nn::Embedding>(spec.vocab, spec.dim, generator, dtype));
  wpe_ =
      RegisterModule("wpe", std::make_shared<nn::Embedding>(spec.ctx, spec.dim, generator, dtype));
  h_ = RegisterModule("h", std::make_shared<nn::Sequential>());
  for (int64_t i = 0; i < spec.layers; ++i) {
    blocks_.push_back(
        std::make_shared<nn::Block>(spec.dim, spec.heads, spec.bias, generator, dtype));
    h_->Append(blocks_.back());
  }
  ln_f_ = RegisterModule("ln_f", std::make_shared<nn::LayerNorm>(spec.dim, spec.bias, dtype));
}

Tensor GptTransformer::Forward(const Tensor& idx) {
  DDPKIT_CHECK(idx.defined() && idx.dtype() == DType::kInt64 && idx.dim() == 2,
               "[GPT] expects int64 token indices [B, T], got ",
               idx.defined() ? idx.DebugString() : "an undefined tensor");
  const int64_t batch = idx.size(0), time = idx.size(1);
  DDPKIT_CHECK(time <= ctx_, "[GPT] cannot forward a sequence of length ", time,
               ", the context is only ", ctx_);
  std::vector<int64_t> positions(time);
  for (int64_t t = 0; t < time; ++t) positions[t] = t;
  const Tensor pos = Tensor::FromVector<int64_t>(positions, {time}).To(idx.device());
  // tok_emb + pos_emb as nanoGPT: the token lookup first, so its node is the older one.
  Tensor tok =
      Reshape(wte_->Forward(idx.View({batch * time})), {batch, time, wte_->weight().size(1)});
  Tensor x = AddTrailing(tok, wpe_->Forward(pos));
  if (!checkpoint_blocks_) return ln_f_->Forward(h_->Forward(x));
  for (const std::shared_ptr<nn::Module>& block : blocks_) {
    x = Checkpoint([block](const Tensor& in) { return block->Forward(in); }, x);
  }
  return ln_f_->Forward(x);
}

Gpt::Gpt(const GptSpec& spec, Generator& generator, DType dtype) : spec_(spec) {
  transformer_ =
      RegisterModule("transformer", std::make_shared<GptTransformer>(spec, generator, dtype));
  lm_head_ = RegisterModule(
      "lm_head", std::make_shared<nn::Linear>(spec.dim, spec.vocab, false, generator, dtype));
  lm_head_->TieWeightTo(transformer_->token_table());
  InitWeights(generator);
}

void Gpt::InitWeights(Generator& generator) {
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(spec_.layers));
  for (const auto& [name, p] : NamedParameters()) {
    if (absl::EndsWith(name, ".bias")) {
      p.Zero();
    } else if (absl::StrContains(name, ".ln_")) {
      p.Fill(1.0);
    } else {
      generator.FillNormal(p, 0.0, absl::EndsWith(name, "c_proj.weight") ? proj_std : 0.02);
    }
  }
}

Tensor Gpt::Forward(const Tensor& idx) { return lm_head_->Forward(transformer_->Forward(idx)); }

std::shared_ptr<Gpt> MakeGpt(const GptSpec& spec, uint64_t seed, DType dtype) {
  Generator generator(seed);
  return std::make_shared<Gpt>(spec, generator, dtype);
}

Tensor GptLoss(const Tensor& logits, const Tensor& targets) {
  DDPKIT_CHECK(logits.defined() && logits.dim() == 3, "[GptLoss] logits must be [B, T, V]");
  const Shape expected = {logits.size(0), logits.size(1)};
  DDPKIT_CHECK(targets.defined() && targets.dtype() == DType::kInt64 && targets.shape() == expected,
               "[GptLoss] targets must be int64 [", logits.size(0), ", ", logits.size(1), "], got ",
               targets.defined() ? targets.DebugString() : "an undefined tensor");
  const int64_t rows = logits.size(0) * logits.size(1);
  return CrossEntropy(Reshape(logits, {rows, logits.size(2)}), targets.View({rows}));
}

}  // namespace ddpkit::models
