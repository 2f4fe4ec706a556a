// The contrastive job's model and data: two towers with L2-normalised outputs and a learnable
// logit scale — MLPs trained on pairs of views of shared latent vectors (the default), or a
// ResNet and a GPT (towers.h) trained on paired images and token rows of shared classes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/nn/nn.h"
#include "tools/jobs/contrastive/towers.h"

namespace ddpkit::jobs {

// Two encoders with L2-normalised outputs and a learnable logit scale t (logits are
// exp(t)·image·textᵀ, t starts at log(1/0.07) as in CLIP); Forward returns [2b, out]: the b
// image features, then the b text features.
//   MLP towers (`image.*`, `text.*`): Forward takes [2b, in], the image views then the text views.
//   Real towers: `image.*` torchvision's ResNet without fc, `image_projection.weight`;
//   `text.transformer.*` nanoGPT's transformer, `text_projection.weight` (CLIP's layout). Forward
//   takes one float64 vector (DDP forwards one tensor): the b images [b, C, H, W], then the b
//   token rows [b, T] as exact float64 ids (PairedData::Views packs it).
class TwoTowerModel : public nn::Module {
 public:
  TwoTowerModel(int64_t in, int64_t hidden, int64_t out, uint64_t seed,
                DType dtype = DType::kFloat64);
  TwoTowerModel(const RealTowers& towers, int64_t out, uint64_t seed,
                DType dtype = DType::kFloat64);
  Tensor Forward(const Tensor& views) override;
  const Tensor& logit_scale() const { return logit_scale_; }
  // BatchNorm normalises over the images one forward sees. Set, the image tower forwards these
  // consecutive row counts one at a time: a single process then normalises each rank's rows as
  // that rank does under DDP (ddpkit has no SyncBatchNorm). Empty, or in eval mode: all rows
  // together.
  void SetImageGroups(std::vector<int64_t> rows) { image_groups_ = std::move(rows); }

 private:
  std::string Describe() const override { return "TwoTowerModel"; }
  Tensor EncodeImages(const Tensor& images);
  std::shared_ptr<nn::Module> image_, text_;
  std::shared_ptr<nn::Linear> image_projection_, text_projection_;  // real towers only
  Shape image_row_;                                                 // real towers: {C, H, W}
  int64_t text_length_ = 0;                                         // real towers: T
  std::vector<int64_t> image_groups_;
  Tensor logit_scale_;
};

// Pairs (image, text). For the MLPs: views of shared latent vectors, each view its own fixed
// random projection of the latent plus noise, so matching them needs both encoders to learn.
// For the real towers: images [rows, C, H, W] and int64 token rows [rows, T] of shared classes.
struct PairedData {
  Tensor image, text;  // MLP: [rows, in] each
  Tensor labels{};     // int64 [rows] (real towers: a pair's class); undefined: every pair unique
  // Rows [start, start + count) of both, as the model's input (see TwoTowerModel).
  Tensor Views(int64_t start, int64_t count) const;
  // Rows [begin, end) of each.
  PairedData Rows(int64_t begin, int64_t end) const;
};
PairedData MakePairedData(int64_t rows, int64_t in, int64_t latent, uint64_t seed,
                          DType dtype = DType::kFloat64);
// Class k's image is the shared dataset's Gaussian cluster k (jobs::MakeSyntheticData); its text
// is class k's fixed random token row with each token replaced, with probability 1/8, by a
// random one. Learnable: both towers must map their class to one shared direction.
PairedData MakeClassPairs(int64_t rows, const RealTowers& towers, int64_t classes, uint64_t seed,
                          DType dtype = DType::kFloat64);

// Top-1 image→text retrieval over every pair of `held_out` (the text with the highest
// similarity to image i must be text i, or one of its class when pairs have labels). Runs in
// eval mode (BatchNorm on its running statistics) on the model's device (`held_out` may be on
// the host); the similarities are read on the host.
double Top1Accuracy(TwoTowerModel& model, const PairedData& held_out);

}  // namespace ddpkit::jobs
