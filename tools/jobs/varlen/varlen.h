// The job behind `ddpkit varlen`: data-parallel training on samples of different lengths, the
// recipe way (docs/varlen.md):
//
//   1. each rank measures its DistributedSampler share; the ranks sort all (length, id) pairs
//      with a distributed sample sort (comm/ops/sample_sort.h);
//   2. the sorted order is dealt out round-robin (curriculum.h): at every step every rank holds
//      similar lengths;
//   3. each rank packs its samples into batches of at most --max-tokens padded tokens
//      (batching.h), so batch sizes vary from step to step;
//   4. each step's LR is scaled from the reference LR by that step's global batch (lr_scaling.h);
//   5. ranks end with different numbers of batches, so the loop runs under Join;
//   6. each rank's loss is weighted by rank (DDP's average) or by sample (weighting.h), and a
//      check against one process on a global batch shows which one is the true gradient.
//
// The report compares the layouts before (sampler shares sorted per rank) and after the sort,
// with fixed-size and token-budget batches.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "comm/ops/sample_sort.h"
#include "tools/jobs/training.h"
#include "tools/jobs/varlen/curriculum.h"
#include "tools/jobs/varlen/lr_scaling.h"
#include "tools/jobs/varlen/sequence_data.h"
#include "tools/jobs/varlen/varlen_report.pb.h"
#include "tools/jobs/varlen/weighting.h"

namespace ddpkit::jobs {

struct VarlenConfig : DdpTrainingConfig {
  VarlenConfig() {
    model = "seq:64,32,64,8";
    batch_size = 16;  // fixed-size batches (when max_tokens is 0, and for the comparison)
    lr = 1.0;
    world.world_size = 4;
  }
  std::string data_path;               // --data FILE.safetensors; synthetic when empty
  SyntheticSequenceOptions synthetic;  // samples, lengths (vocab and classes: the model's)
  CurriculumOptions curriculum;        // order, buckets (seed: the run's seed)
  int64_t max_tokens = 2048;           // token budget per batch; 0: fixed batches
  LrScaling lr_scaling = LrScaling::kLinear;
  int64_t ref_batch_size = 0;  // the global batch lr is for; 0: the run's mean global batch
  GradWeighting grad_weighting = GradWeighting::kSample;
  comm::SampleSortOptions sort;
  int epochs = 20;  // passes over the same layout, each under its own Join
  bool use_join = true;
  std::string dump_shards_prefix;  // PREFIX.rank<r>.safetensors (ids, lengths) when set
};

// Validates the config, runs every rank, returns rank 0's report (under gloo, this process's).
absl::StatusOr<VarlenReport> RunVarlen(const VarlenConfig& config);

}  // namespace ddpkit::jobs
