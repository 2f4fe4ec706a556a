#include "tools/launch/restart_round.h"

#include <algorithm>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "autograd/base/error.h"
#include "comm/store/token.h"
#include "tools/launch/launcher.h"
#include "tools/launch/round_watch.h"

namespace ddpkit::launch {
namespace {

constexpr char kLeftKey[] = "ddpkit/launch/left";
constexpr absl::Duration kPollEvery = absl::Milliseconds(100);
// How long a launcher whose job is over waits for node 0 to take its last word: short, since
// node 0's host may be unreachable, and the job's end should not wait for it.
constexpr absl::Duration kLeaveWait = absl::Milliseconds(200);
// The longest node 0 keeps its store up, after giving up on a round, for the nodes that joined
// it to read why (each says when it has).
constexpr absl::Duration kGiveUpWait = absl::Seconds(3);

std::string Seconds(absl::Duration d) { return StrCat(absl::ToDoubleSeconds(d), " s"); }

std::string AgentStore(const RoundOptions& options) {
  return StrCat("the agent store at ", options.master_addr, ":", options.master_port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RestartRounds>> RestartRounds::Start(RoundOptions options) {
  std::unique_ptr<comm::TcpStoreServer> server;
  if (options.node_rank == 0) {
    absl::StatusOr<std::unique_ptr<comm::TcpStoreServer>> started =
        comm::TcpStoreServer::Start(options.master_addr, options.master_port, options.token);
    if (!started.ok()) {
      return absl::Status(started.status().code(),
                          StrCat("node 0's launcher could not serve ", AgentStore(options), ": ",
                                 started.status().message()));
    }
    server = *std::move(started);
  }
  auto connect = [&]() -> absl::StatusOr<std::unique_ptr<AgentClient>> {
    absl::StatusOr<std::unique_ptr<AgentClient>> store = AgentClient::Connect(
        {options.master_addr, options.master_port, options.token, options.node_timeout});
    if (store.ok()) return store;
    return absl::Status(store.status().code(),
                        StrCat("node ", options.node_rank, " could not reach node 0's launcher (",
                               AgentStore(options), "): ", store.status().message(),
                               "; every node needs the same --master-addr, --master-port and ",
                               comm::kStoreTokenEnv));
  };
  DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<AgentClient> store, connect());
  DDPKIT_ASSIGN_OR_RETURN(std::unique_ptr<AgentClient> watch_store, connect());
  std::shared_ptr<RoundWatch> watch = RoundWatch::Start(
      {.nnodes = options.nnodes,
       .node_rank = options.node_rank,
       .node_timeout = options.node_timeout,
       .lost_prefix = StrCat("lost node 0's launcher (", AgentStore(options), ")")},
      std::move(watch_store));
  return std::unique_ptr<RestartRounds>(
      new RestartRounds(std::move(options), std::move(server), std::move(store), std::move(watch)));
}

RestartRounds::RestartRounds(RoundOptions options, std::unique_ptr<comm::TcpStoreServer> server,
                             std::unique_ptr<AgentClient> store, std::shared_ptr<RoundWatch> watch)
    : options_(std::move(options)),
      server_(std::move(server)),
      store_(std::move(store)),
      watch_(std::move(watch)) {}

RestartRounds::~RestartRounds() { watch_->Stop(); }

absl::StatusOr<int> RestartRounds::Join(int round) {
  watch_->Flush(options_.node_timeout);
  watch_->EndRound();
  round_ = round;
  const absl::Time deadline = absl::Now() + options_.node_timeout;
  const std::string port_key = RoundKey(round, "port");
  if (options_.node_rank == 0) {  // a port no earlier round's ranks used
    DDPKIT_ASSIGN_OR_RETURN(int port, PickFreePort(/*every_address=*/true));
    DDPKIT_RETURN_IF_ERROR(Lost(store_->Set(port_key, std::to_string(port))));
  }
  DDPKIT_RETURN_IF_ERROR(
      Lost(store_->Set(RoundKey(round, StrCat("joined/", options_.node_rank)), "1")));
  std::vector<std::string> keys = {port_key};
  for (int node = 0; node < options_.nnodes; ++node) {
    keys.push_back(RoundKey(round, StrCat("joined/", node)));
  }
  // Node 0 gives up at its deadline and says why under `gave_up`; the others stop waiting then,
  // with its reason, rather than read its store's closing as node 0 lost.
  const std::string gave_up_key = RoundKey(round, "gave_up");
  bool gave_up = false;
  const absl::Status joined = PollUntil(
      [&]() -> absl::StatusOr<bool> {
        DDPKIT_ASSIGN_OR_RETURN(const bool all, store_->Check(keys));
        if (all || options_.node_rank == 0) return all;
        DDPKIT_ASSIGN_OR_RETURN(gave_up, store_->Check({gave_up_key}));
        return gave_up;
      },
      deadline);
  if (absl::IsDeadlineExceeded(joined)) return GiveUp(round, gave_up_key);
  DDPKIT_RETURN_IF_ERROR(joined);
  if (gave_up) {
    absl::StatusOr<std::string> why = store_->Get(gave_up_key);
    DDPKIT_RETURN_IF_ERROR(Lost(why.status()));
    (void)store_->Add(gave_up_key + "/read", 1);  // node 0 may close its store now
    return absl::DeadlineExceededError(*why);
  }
  absl::StatusOr<std::string> text = store_->Get(port_key);
  DDPKIT_RETURN_IF_ERROR(Lost(text.status()));
  int port = 0;
  if (!absl::SimpleAtoi(*text, &port)) {
    return absl::InternalError(StrCat("round ", round, "'s port is not a number: '", *text, "'"));
  }
  watch_->BeginRound(round);
  return port;
}

// Not every node joined `round` in time: the missing ones named. Node 0 writes it for the nodes
// still waiting with it and keeps its store up until each has said it read it — not a fixed
// time, which a loaded host's launcher can miss and then read the store's closing as node 0
// lost — bounded by kGiveUpWait, for a waiting node that died meanwhile.
absl::Status RestartRounds::GiveUp(int round, const std::string& gave_up_key) {
  const std::string missing = MissingNodes(round);
  if (options_.node_rank == 0 && store_->Set(gave_up_key, missing).ok()) {
    const int waiting = JoinedNodes(round) - 1;  // besides node 0
    (void)PollUntil(
        [&]() -> absl::StatusOr<bool> {
          DDPKIT_ASSIGN_OR_RETURN(const int64_t read, store_->Add(gave_up_key + "/read", 0));
          return read >= waiting;
        },
        absl::Now() + std::min(options_.node_timeout, kGiveUpWait));
  }
  return absl::DeadlineExceededError(missing);
}

void RestartRounds::RecordFailure(const std::string& cause) { watch_->RecordFailure(cause); }

std::optional<RoundFailure> RestartRounds::Failure() const {
  if (std::optional<std::string> lost = watch_->lost()) return RoundFailure{*lost, true};
  if (std::optional<std::string> failed = watch_->failure()) return RoundFailure{*failed, false};
  return std::nullopt;
}

std::optional<RoundFailure> RestartRounds::AwaitOutcome() {
  const std::string done_key = RoundKey(round_, "done");
  std::optional<RoundFailure> failure;
  absl::Status waited = Lost(store_->Add(done_key, 1).status());
  if (waited.ok()) {
    waited = PollUntil(
        [&]() -> absl::StatusOr<bool> {
          DDPKIT_ASSIGN_OR_RETURN(int64_t done, store_->Add(done_key, 0));
          all_done_ = done >= options_.nnodes;
          if (all_done_) return true;
          failure = Failure();
          return failure.has_value();
        },
        absl::InfiniteFuture());
  }
  if (absl::IsCancelled(waited)) return RoundFailure{std::string(waited.message()), true};
  if (!waited.ok()) failure = RoundFailure{std::string(waited.message()), true};
  // This node's ranks succeeded: only another node's failing ranks change that (as torchrun's
  // agents, each node reports its own ranks). A node gone silent, or node 0's launcher lost,
  // after the ranks' last collective leaves the outcome unknown, not failed.
  if (failure && (failure->fatal || failure->cause.find(kSilentNode) != std::string::npos)) {
    std::cerr << "ddpkit launch: this node's ranks succeeded, but not every node reported done: "
              << failure->cause << std::endl;
    return std::nullopt;
  }
  return failure;
}

void RestartRounds::Leave() {
  watch_->Flush(kLeaveWait);  // bounded: the job is over either way
  watch_->EndRound();
  if (options_.node_rank != 0) {
    if (!watch_->lost()) (void)store_->store().Add(kLeftKey, 1, kLeaveWait);
    return;
  }
  // After a success every node reads the outcome within a poll (100 ms) and says it leaves; a
  // failed job's nodes saw the failure already, and a node missing may never answer.
  const absl::Time deadline = absl::Now() + (all_done_ ? absl::Seconds(2) : kLeaveWait);
  (void)PollUntil(
      [&]() -> absl::StatusOr<bool> {
        DDPKIT_ASSIGN_OR_RETURN(int64_t left, store_->store().Add(kLeftKey, 0, absl::Seconds(1)));
        return left >= options_.nnodes - 1;
      },
      deadline);
}

absl::Status RestartRounds::PollUntil(const std::function<absl::StatusOr<bool>()>& done,
                                      absl::Time deadline) {
  while (true) {
    absl::StatusOr<bool> there = done();
    DDPKIT_RETURN_IF_ERROR(Lost(there.status()));
    if (*there) return absl::OkStatus();
    if (options_.interrupted && options_.interrupted()) {
      return absl::CancelledError("interrupted by a signal");
    }
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("");
    absl::SleepFor(kPollEvery);
  }
}

int RestartRounds::JoinedNodes(int round) {
  int joined = 0;
  for (int node = 0; node < options_.nnodes; ++node) {
    absl::StatusOr<bool> there =
        store_->store().Check({RoundKey(round, StrCat("joined/", node))}, absl::Seconds(1));
    joined += there.ok() && *there;
  }
  return joined;
}

// "node 2 of 3 did not join restart round 1 within 60 s", naming every node missing.
std::string RestartRounds::MissingNodes(int round) {
  std::vector<int> missing;
  for (int node = 0; node < options_.nnodes; ++node) {
    absl::StatusOr<bool> there =
        store_->store().Check({RoundKey(round, StrCat("joined/", node))}, absl::Seconds(1));
    if (there.ok() && !*there) missing.push_back(node);
  }
  const std::string which = missing.empty()       ? "some node"
                            : missing.size() == 1 ? StrCat("node ", missing[0])
                                                  : StrCat("nodes ", absl::StrJoin(missing, ", "));
  const std::string what =
      round == 0 ? "the job's start (round 0)" : StrCat("restart round ", round);
  return StrCat(which, " of ", options_.nnodes, " did not join ", what, " within ",
                Seconds(options_.node_timeout),
                round == 0
                    ? "; is its launcher running, with the same --master-addr and "
                      "--master-port?"
                    : " (its launcher ended, ran out of restarts, or cannot reach node 0's)");
}

// A failed request to the agent store: node 0's launcher is gone (or its host unreachable).
absl::Status RestartRounds::Lost(const absl::Status& status) const {
  if (status.ok()) return status;
  return absl::UnavailableError(
      StrCat("lost node 0's launcher (", AgentStore(options_), "): ", status.message()));
}

}  // namespace ddpkit::launch
