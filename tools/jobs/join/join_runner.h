// The job behind `ddpkit join`: DDP training where ranks hold different numbers of batches,
// run inside Join (or, with use_join off, without it, to show the failure it prevents).
//
// Rank r runs inputs[r] iterations — zero grads, forward, mean cross-entropy, backward,
// optimizer step — on its own rows: synthetic (one seeded task, split so no two ranks share a
// row) or PREFIX.rank{r}.safetensors (floor(rows / batch) iterations). Every iteration is
// recorded as the ranks saw it: who was active, who was shadowing, what the gradients were
// divided by, and the collectives an active rank and a shadowing rank issued, read from their
// flight recorders — the two lists are the join protocol made visible (collective_log.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/jobs/join/join_report.pb.h"
#include "tools/jobs/training.h"

namespace ddpkit::jobs {

struct JoinRunConfig : DdpTrainingConfig {
  JoinRunConfig() {
    model = "mlp:16,32,4";
    batch_size = 8;
    world.world_size = 0;  // threads: 0 takes inputs.size()
  }
  std::string data_prefix;  // per-rank files PREFIX.rank{r}.safetensors when set
  std::vector<int> inputs;  // otherwise: iterations per rank, on synthetic rows
  bool use_join = true;
  bool divide_by_initial_world_size = true;
  bool throw_on_early_termination = false;
  // Iteration t reduces only when t % grad_accum == 0, the others run under no_sync (and step
  // with their local gradients), as PyTorch's test_ddp_uneven_inputs does.
  int grad_accum = 1;
  // --reference one-process: rank 0 also trains one process on the union of every rank's rows
  // (tools/jobs/one_process_reference.h) and reports how far its model is from DDP's.
  bool reference_one_process = false;
};

// Validates the config, runs every rank, returns rank 0's report (under gloo, this process's).
// save_weights_path gets rank 0's weights after Join's final sync. Without Join and with uneven
// inputs this returns the comm layer's diagnosis (which collective, which ranks are missing).
absl::StatusOr<JoinReport> RunJoin(const JoinRunConfig& config);

}  // namespace ddpkit::jobs
