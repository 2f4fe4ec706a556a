// The job behind `ddpkit contrastive`: a two-tower model trained with a CLIP loss under DDP,
// once per (layout, gather backward), to reproduce what each all-gather variant does to the
// gradient and to training. docs/contrastive.md explains the numbers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/nn.h"
#include "comm/clip_loss.h"
#include "comm/process_group.h"
#include "tools/contrastive_report.pb.h"

namespace ddpkit::tools {

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
};
PairedData MakePairedData(int64_t rows, int64_t in, int64_t latent, uint64_t seed,
                          DType dtype = DType::kFloat64);

struct ContrastiveConfig {
  std::string backend = "threads";
  int world_size = 4;
  comm::ProcessGroupOptions comm_options;
  std::vector<comm::ContrastiveLayout> layouts = {comm::ContrastiveLayout::kLocalGlobal,
                                                  comm::ContrastiveLayout::kGlobalGlobal};
  std::vector<comm::GatherBackward> gathers = {std::begin(comm::kAllGatherBackwards),
                                               std::end(comm::kAllGatherBackwards)};
  int steps = 200;
  int batch_size = 32;  // rows per rank
  std::vector<int64_t>
      check_rows;  // per-rank rows for the gradient check (default: batch_size each)
  double lr = 0.5;
  std::string optimizer = "sgd";  // or adam
  uint64_t seed = 0;
  int64_t input_dim = 24, latent_dim = 8, hidden_dim = 64, feature_dim = 16;
  int64_t held_out = 512;
  int eval_every = 10;
  bool train = true;  // false: the gradient check only
};

// Runs the gradient check (and the training runs unless config.train is false) and returns the
// report (under gloo, this process's copy; the numbers are rank 0's).
absl::StatusOr<ContrastiveReport> RunContrastive(const ContrastiveConfig& config);

// Writes the training curves as CSV (step,layout,gather,loss,accuracy) and an SVG with a loss
// panel and an accuracy panel, atomically, into `dir` (created if missing).
absl::Status WriteCurves(const ContrastiveReport& report, const std::string& dir);

}  // namespace ddpkit::tools
