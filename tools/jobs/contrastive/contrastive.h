// The job behind `ddpkit contrastive`: a two-tower model trained with a CLIP loss under DDP,
// once per (layout, gather backward), to reproduce what each all-gather variant does to the
// gradient and to training. docs/contrastive.md explains the numbers.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "autograd/device.h"
#include "reducer/pytorch_version.h"
#include "tools/jobs/contrastive/clip_loss.h"
#include "tools/jobs/contrastive/contrastive_report.pb.h"
#include "tools/jobs/contrastive/curves.h"
#include "tools/jobs/contrastive/two_tower.h"
#include "tools/jobs/job.h"

namespace ddpkit::jobs {

struct ContrastiveConfig {
  comm::WorldSpec world = {.world_size = 4};  // --backend, --world-size, --timeout, ...
  std::vector<ContrastiveLayout> layouts = {ContrastiveLayout::kLocalGlobal,
                                            ContrastiveLayout::kGlobalGlobal};
  std::vector<GatherBackward> gathers = {std::begin(comm::kAllGatherBackwards),
                                         std::end(comm::kAllGatherBackwards)};
  int steps = 200;
  int batch_size = 32;              // rows per rank
  std::vector<int64_t> check_rows;  // per-rank rows for the gradient check (default: batch_size)
  double lr = 0.5;
  std::string optimizer = "sgd";  // or adam
  uint64_t seed = 0;
  int64_t input_dim = 24, latent_dim = 8, hidden_dim = 64, feature_dim = 16;
  // Real towers instead of the MLPs (towers.h): both or neither, e.g. "resnet:1,1,1,1,width=8,
  // in=1,stem=small" and "gpt:layers=1,heads=2,dim=32,ctx=8,vocab=32"; their paired data has
  // pair_classes classes. feature_dim is the embedding either way.
  std::string image_tower, text_tower;
  int64_t pair_classes = 256;
  int64_t held_out = 512;
  int eval_every = 10;
  bool train = true;       // false: the gradient check only
  std::string trace_path;  // a Chrome trace of the training runs when set
  // Where every rank's model, batches and loss live (RankDevice: under nccl a GPU request means
  // the group's GPU). The model is built on the host from the seed and then moved, so a GPU run
  // starts from the same weights as a CPU run; the single-process reference runs here too.
  Device device = Device::Cpu();
  reducer::PyTorchVersion pytorch_version = reducer::kDefaultPyTorch;  // whose DDP (static graph)
};

// Runs the gradient check (and the training runs unless config.train is false) and returns the
// report (under gloo, this process's copy; the numbers are rank 0's).
absl::StatusOr<ContrastiveReport> RunContrastive(const ContrastiveConfig& config);

}  // namespace ddpkit::jobs
