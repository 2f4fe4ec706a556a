// The process launcher behind `ddpkit launch`, after torchrun: starts one process per local
// rank with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
// GROUP_RANK set, prefixes every line they print with "[rank R] ", forwards SIGINT and SIGTERM,
// and when one fails, gives the others `teardown_grace` to report their own errors, then
// stops them (SIGTERM, then SIGKILL) and names the failed rank.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpkit::jobs {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;  // single node, a free local port
  absl::Duration teardown_grace = absl::Seconds(3);
  std::vector<std::string> command;  // program and arguments
};

struct LaunchResult {
  bool ok = true;
  std::string failure;  // "rank 1 (pid 123) exited with code 3", when !ok
};

// Runs the job to completion. An error Status means the job could not be started at all.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> PickFreePort();

}  // namespace ddpkit::jobs
