// The job behind `ddpkit join`: DDP training where ranks hold different numbers of batches,
// run inside Join (or, with use_join off, without it, to show the failure it prevents).
//
// Rank r runs inputs[r] iterations — zero grads, forward, mean cross-entropy, backward,
// optimizer step — on its own rows: synthetic (one seeded task, split so no two ranks share a
// row) or PREFIX.rank{r}.safetensors (floor(rows / batch) iterations). Every iteration is
// recorded as the ranks saw it: who was active, who was shadowing, what the gradients were
// divided by, and the collectives an active rank and a shadowing rank issued, read from their
// flight recorders — the two lists are the join protocol made visible.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/process_group.h"
#include "reducer/distributed_data_parallel.h"
#include "tools/join_report.pb.h"

namespace ddpkit::tools {

struct JoinRunConfig {
  std::string model = "mlp:16,32,4";
  std::string weights_path;  // initial weights (safetensors) when set
  std::string data_prefix;   // per-rank files PREFIX.rank{r}.safetensors when set
  std::vector<int> inputs;   // otherwise: iterations per rank, on synthetic rows
  int batch_size = 8;
  double lr = 0.1;
  double momentum = 0.0;
  uint64_t seed = 0;
  std::string optimizer = "sgd";  // or "zero-sgd" (ZeRO-1: each rank steps a shard)

  bool use_join = true;
  bool divide_by_initial_world_size = true;
  bool throw_on_early_termination = false;
  std::string save_weights_path;  // rank 0's final weights, after Join's final sync

  std::string backend = "threads";
  int world_size = 0;  // threads: 0 takes inputs.size()
  comm::ProcessGroupOptions comm_options;
  reducer::DdpOptions ddp;
  std::string comm_hook;
};

// Validates the config, runs every rank, returns rank 0's report (under gloo, this process's).
// Without Join and with uneven inputs this returns the comm layer's diagnosis (which
// collective, which ranks are missing).
absl::StatusOr<JoinReport> RunJoin(const JoinRunConfig& config);

}  // namespace ddpkit::tools
