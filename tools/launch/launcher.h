// The process launcher behind `ddpkit launch`, after torchrun: starts one process per local
// rank with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
// GROUP_RANK set, prefixes every line they print with "[rank R] ", forwards SIGINT and SIGTERM,
// and when one fails, gives the others `teardown_grace` to report their own errors (less when
// every rank left is stopped), then stops them (SIGTERM, SIGKILL 2 s later) and names the
// failed rank. With max_restarts, a failed job is started again, every rank, up to that many
// times (torchrun's --max-restarts); the ranks see DDPKIT_RESTART_COUNT. With several nodes,
// the nodes' launchers restart together, in rounds node 0's launcher holds
// (tools/launch/restart_round.h): a failure on any node stops every node's ranks, and each round
// starts only once every node has joined it.
//
// No orphans: each rank runs in a process group of its own, which the launcher signals whole,
// and dies with SIGKILL when the launcher dies (PR_SET_PDEATHSIG), so a killed launcher never
// leaves ranks holding the job's ports.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpkit::launch {

// More local ranks than this is a typing error, not a job: refused before anything starts.
inline constexpr int kMaxLocalRanks = 1024;

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::string local_addr;  // this node's address for the ranks' sockets (DDPKIT_LOCAL_ADDR)
  int master_port = 29500;
  bool standalone = false;  // single node, a free local port
  absl::Duration teardown_grace = absl::Seconds(2);
  int max_restarts = 0;
  // Several nodes: how long the launchers wait for a node missing from a round (and twice that
  // for one silent, no heartbeat, while the ranks run).
  absl::Duration node_timeout = absl::Seconds(60);
  std::vector<std::string> command;  // program and arguments
};

struct LaunchResult {
  bool ok = true;
  std::string failure;       // "rank 1 (pid 123) exited with code 3", when !ok (the last run's)
  int rank_exit_code = 0;    // that rank's exit code, when it exited (not killed by a signal)
  bool interrupted = false;  // the launcher was sent SIGINT/SIGTERM
  int restarts = 0;          // runs after the first
};

// Runs the job to completion. An error Status means the job could not be started at all.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

// A TCP port that was free a moment ago on 127.0.0.1, or on every address of this host (for a
// port other hosts connect to).
absl::StatusOr<int> PickFreePort(bool every_address = false);

}  // namespace ddpkit::launch
