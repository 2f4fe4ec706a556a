// Restarts that every node of a multi-node job takes together: a rendezvous round shared by the
// nodes' launchers, after torchrun's c10d rendezvous, simplified.
//
// Node 0's launcher serves an agent store (comm's TcpStore) on --master-addr:--master-port;
// every launcher, node 0's too, is its client. Round r: each launcher joins (a key per node) and
// waits until all have (bounded by --node-timeout, naming the missing nodes); node 0 publishes a
// free port for the round, where the round's rank 0 serves its ranks' store (MASTER_PORT), so a
// rank of round r can never reach round r-1's store and its Gloo addresses. While the round
// runs, a watch thread per launcher (tools/launch/round_watch.h) polls the round's failure
// every 100 ms, records this node's there (first writer wins: "node 1: rank 3 (pid ...) exited
// with code 3"), and beats a heartbeat counter every second; node 0 counts a node whose
// heartbeat stood still for twice --node-timeout as the round's failure. A round ends when every
// node has reported done (success) or a failure is recorded (every node stops its ranks; round r+1
// if restarts remain). Node 0's launcher dying closes the store: the others fail at their next
// request, within 100 ms; node 0's host silent: within twice --node-timeout (a request
// unanswered that long reconnects once, tools/launch/agent_client.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/store/tcp_store.h"
#include "tools/launch/agent_client.h"

namespace ddpkit::launch {

class RoundWatch;

struct RoundOptions {
  int nnodes = 2;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string token;  // the job's store token, shared by every node
  absl::Duration node_timeout = absl::Seconds(60);
  std::function<bool()> interrupted;  // a signal came: stop waiting
};

// A round's failure as this node sees it: "node K: ..." recorded by some node, or why no round
// can be held any more (fatal: the agent store is gone, or a signal came).
struct RoundFailure {
  std::string cause;
  bool fatal = false;
};

class RestartRounds {
 public:
  // Node 0 starts the agent store; every node connects to it (waiting up to the node timeout).
  static absl::StatusOr<std::unique_ptr<RestartRounds>> Start(RoundOptions options);
  ~RestartRounds();

  // Joins round `round` and waits for every node. Returns the port of the round's rank-0 store.
  absl::StatusOr<int> Join(int round);
  // This node's ranks failed (`cause` names the rank): recorded for every node, unless another
  // failure came first. Never blocks (the watch thread writes it).
  void RecordFailure(const std::string& cause);
  // This round's recorded failure (or the agent store lost); nullopt while there is none.
  std::optional<RoundFailure> Failure() const;
  // After this node's ranks all succeeded: reports done and waits until every node has (then
  // nullopt), or another node's ranks failed in this round. (A node gone silent, or node 0 lost,
  // meanwhile: nullopt, with a warning.)
  std::optional<RoundFailure> AwaitOutcome();
  // The job is over. Node 0 keeps its store up until every node has said so (bounded).
  void Leave();

 private:
  RestartRounds(RoundOptions options, std::unique_ptr<comm::TcpStoreServer> server,
                std::unique_ptr<AgentClient> store, std::shared_ptr<RoundWatch> watch);
  // Polls `done` every 100 ms until it says true (then OK), or the deadline (DeadlineExceeded),
  // a signal (Cancelled) or a failed request (Unavailable: Lost) ends the wait.
  absl::Status PollUntil(const std::function<absl::StatusOr<bool>()>& done, absl::Time deadline);
  std::string MissingNodes(int round);
  int JoinedNodes(int round);  // those whose join of `round` the store holds
  absl::Status GiveUp(int round, const std::string& gave_up_key);
  absl::Status Lost(const absl::Status& status) const;

  const RoundOptions options_;
  std::unique_ptr<comm::TcpStoreServer> server_;  // node 0 only
  std::unique_ptr<AgentClient> store_;            // Join, AwaitOutcome, Leave
  std::shared_ptr<RoundWatch> watch_;             // shared with its thread (round_watch.h)
  int round_ = -1;
  bool all_done_ = false;  // every node reported done in the last round awaited
};

}  // namespace ddpkit::launch
