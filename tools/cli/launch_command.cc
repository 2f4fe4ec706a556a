// `ddpkit launch`: start a multi-process job, as torchrun.
#include <iostream>

#include "absl/flags/flag.h"
#include "tools/cli/commands.h"
#include "tools/launch/launcher.h"

ABSL_FLAG(int32_t, nproc_per_node, 1, "processes (ranks) to start on this node");
ABSL_FLAG(int32_t, nnodes, 1, "nodes in the job");
ABSL_FLAG(int32_t, node_rank, 0, "this node's index, 0 .. nnodes-1");
ABSL_FLAG(std::string, master_addr, "127.0.0.1",
          "host of rank 0 (and of node 0's launcher), where the rendezvous store runs");
ABSL_FLAG(int32_t, master_port, 29500,
          "port of the rendezvous store (several nodes: of node 0's launcher, which gives each "
          "restart round's ranks a free port of their own)");
ABSL_FLAG(std::string, local_addr, "",
          "this node's address, where its ranks listen for their peers (default: 127.0.0.1 for "
          "a loopback --master-addr, else the host name); e.g. 127.0.0.2 for a second node on "
          "one machine");
ABSL_FLAG(bool, standalone, false,
          "single node on a free local port (ignores --master-addr/--master-port)");
ABSL_FLAG(double, teardown_grace, 2.0,
          "seconds the other ranks get to report their own errors after one fails, before they "
          "are stopped");

ABSL_FLAG(int32_t, max_restarts, 0,
          "times to start every rank again after one fails (as torchrun's --max-restarts); "
          "pair with `ddpkit train --checkpoint-dir` so a restart resumes where the job left off");

ABSL_FLAG(double, node_timeout, 60.0,
          "several nodes: seconds the launchers wait for a node to join a round (the job's start "
          "or a restart), and twice that for its heartbeat while the ranks run, before they fail "
          "naming "
          "it");

namespace ddpkit::cli {
namespace {

int RunLaunch(const std::vector<std::string>& positionals) {
  launch::LaunchOptions options;
  options.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  options.nnodes = absl::GetFlag(FLAGS_nnodes);
  options.node_rank = absl::GetFlag(FLAGS_node_rank);
  options.master_addr = absl::GetFlag(FLAGS_master_addr);
  options.local_addr = absl::GetFlag(FLAGS_local_addr);
  options.master_port = absl::GetFlag(FLAGS_master_port);
  options.standalone = absl::GetFlag(FLAGS_standalone);
  options.teardown_grace = absl::Seconds(absl::GetFlag(FLAGS_teardown_grace));
  options.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  options.node_timeout = absl::Seconds(absl::GetFlag(FLAGS_node_timeout));
  options.command = positionals;
  absl::StatusOr<launch::LaunchResult> result = launch::Launch(options);
  if (!result.ok()) return Fail("launch", result.status());
  if (!result->ok) {
    std::cerr << "ddpkit launch: job failed: " << result->failure;
    if (result->restarts > 0) std::cerr << " (after " << result->restarts << " restart(s))";
    std::cerr << "\n";
    // A --check verdict stays a verdict through the launcher: CI tells it from a crash.
    return result->rank_exit_code == kExitCheckFailed ? kExitCheckFailed : kExitFailure;
  }
  return kExitOk;
}

}  // namespace

Subcommand LaunchSubcommand() {
  return {
      .name = "launch",
      .summary = "start one process per rank with torchrun's environment (env:// rendezvous)",
      .usage =
          "ddpkit launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A "
          "--master-port P [--node-timeout S] | --standalone] [--max-restarts R] -- PROGRAM "
          "ARGS...",
      .flag_names = {"nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port",
                     "local_addr", "standalone", "teardown_grace", "max_restarts", "node_timeout"},
      .takes_positionals = true,
      .run = RunLaunch};
}

}  // namespace ddpkit::cli
