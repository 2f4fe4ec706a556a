// The contrastive job's model and data: two MLP towers with L2-normalised outputs and a
// learnable logit scale, trained on pairs of views of shared latent vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "autograd/nn.h"

namespace ddpkit::jobs {

// Two MLP encoders with L2-normalised outputs and a learnable logit scale t (logits are
// exp(t)·image·textᵀ, t starts at log(1/0.07) as in CLIP). Forward takes [2b, in]: rows [0, b)
// are the image views, rows [b, 2b) the text views; it returns their features in that order.
class TwoTowerModel : public nn::Module {
 public:
  TwoTowerModel(int64_t in, int64_t hidden, int64_t out, uint64_t seed,
                DType dtype = DType::kFloat64);
  Tensor Forward(const Tensor& views) override;
  const Tensor& logit_scale() const { return logit_scale_; }

 private:
  std::string Describe() const override { return "TwoTowerModel"; }
  std::shared_ptr<nn::Module> image_, text_;
  Tensor logit_scale_;
};

// Pairs (image view, text view) of shared latent vectors: each view is its own fixed random
// projection of the latent plus noise, so matching them needs both encoders to learn.
struct PairedData {
  Tensor image, text;  // [rows, in]
  // Rows [start, start + count) of both views, stacked as the model's input [2·count, in].
  Tensor Views(int64_t start, int64_t count) const;
  // Rows [begin, end) of both.
  PairedData Rows(int64_t begin, int64_t end) const;
};
PairedData MakePairedData(int64_t rows, int64_t in, int64_t latent, uint64_t seed,
                          DType dtype = DType::kFloat64);

// Top-1 image→text retrieval over every pair of `held_out` (the text with the highest
// similarity to image i must be text i). Runs on the model's device (`held_out` may be on the
// host); the similarities are read on the host.
double Top1Accuracy(TwoTowerModel& model, const PairedData& held_out);

}  // namespace ddpkit::jobs
