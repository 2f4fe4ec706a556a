// The watch a launcher keeps on its restart round (tools/launch/restart_round.h) while its ranks
// run: a thread with a connection of its own to the agent store that, every 100 ms, writes this
// node's failure to the round's key (first writer wins), reads the round's failure, beats this
// node's heartbeat (every second) and, on node 0, counts a node whose heartbeat stood still for
// the node timeout + 3 s as the round's failure. The launcher's own loop only reads what it found.
//
// The thread shares this object (a shared_ptr) and may outlive the launcher's use of it: a
// request to a store host gone silent blocks for up to the node timeout, and a launcher ending
// its job must not wait for that, so Stop() leaves such a thread to end on its own.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tools/launch/agent_client.h"

namespace ddpkit::launch {

// How the failure node 0 records for a node whose heartbeat stopped reads (and is recognised).
inline constexpr char kSilentNode[] = "its launcher sent no heartbeat";

// The agent store's keys.
std::string RoundKey(int round, const std::string& name);
std::string AliveKey(int node);

struct WatchOptions {
  int nnodes = 2;
  int node_rank = 0;
  absl::Duration node_timeout;
  std::string lost_prefix;  // "lost node 0's launcher (the agent store at A:P)"
};

class RoundWatch {
 public:
  // Starts the thread (shared_from_this needs the object in a shared_ptr first).
  static std::shared_ptr<RoundWatch> Start(WatchOptions options,
                                           std::unique_ptr<AgentClient> store);
  // Ends the thread: joins it if it ends within a moment, else leaves it to end alone.
  void Stop();

  void BeginRound(int round);  // the round's ranks start: watch it
  void EndRound();             // between rounds: heartbeats only
  void RecordFailure(const std::string& cause);
  // Waits (up to `timeout`) until the failure recorded here is in the store, before the round
  // ends: a node whose ranks all failed at once must not move on before the others can see why.
  void Flush(absl::Duration timeout);
  // The round's recorded failure, or why the store was lost (then `fatal`).
  std::optional<std::string> failure() const;
  std::optional<std::string> lost() const;

 private:
  RoundWatch(WatchOptions options, std::unique_ptr<AgentClient> store)
      : options_(std::move(options)), store_(std::move(store)) {}
  void Loop();
  absl::Status Poll();
  absl::Status WritePendingFailure(int round);
  absl::Status ReadFailure(int round);
  absl::Status CheckHeartbeats(int round);

  const WatchOptions options_;
  const std::unique_ptr<AgentClient> store_;
  absl::Time next_beat_ = absl::InfinitePast();

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false, finished_ = false;
  bool poke_ = false;                   // a failure to record: poll now, not at the next 100 ms
  int round_ = -1;                      // the round being watched, -1 between rounds
  std::optional<std::string> pending_;  // this node's failure, to record
  std::optional<std::string> failed_;   // the round's failure, as recorded
  std::optional<std::string> lost_;     // the agent store is gone: why
  std::vector<int64_t> beats_;          // node 0: each node's heartbeat count, last seen,
  std::vector<absl::Time> beat_at_;     // and when it last changed
  std::thread thread_;
};

}  // namespace ddpkit::launch
