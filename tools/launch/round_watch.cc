#include "tools/launch/round_watch.h"

#include <chrono>

#include "autograd/base/error.h"

namespace ddpkit::launch {

std::string RoundKey(int round, const std::string& name) {
  return StrCat("ddpkit/launch/round/", round, "/", name);
}

std::string AliveKey(int node) { return StrCat("ddpkit/launch/alive/", node); }

std::shared_ptr<RoundWatch> RoundWatch::Start(WatchOptions options,
                                              std::unique_ptr<AgentClient> store) {
  std::shared_ptr<RoundWatch> watch(new RoundWatch(std::move(options), std::move(store)));
  watch->thread_ = std::thread([watch] { watch->Loop(); });
  return watch;
}

void RoundWatch::Stop() {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  wake_.notify_all();
  // A request to a store host gone silent may block for the node timeout: the job's end does
  // not wait for it (the thread holds its own reference to this object).
  wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return finished_; });
  const bool finished = finished_;
  lock.unlock();
  if (finished) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

void RoundWatch::BeginRound(int round) {
  std::lock_guard<std::mutex> lock(mu_);
  round_ = round;
  pending_.reset();
  failed_.reset();
  beats_.assign(options_.nnodes, -1);
  beat_at_.assign(options_.nnodes, absl::Now());
}

void RoundWatch::EndRound() {
  std::lock_guard<std::mutex> lock(mu_);
  round_ = -1;
  pending_.reset();
  failed_.reset();
}

void RoundWatch::RecordFailure(const std::string& cause) {
  std::lock_guard<std::mutex> lock(mu_);
  if (round_ >= 0 && !pending_) pending_ = cause;
  poke_ = true;
  wake_.notify_all();
}

void RoundWatch::Flush(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                 [this] { return !pending_ || lost_ || finished_; });
}

std::optional<std::string> RoundWatch::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

std::optional<std::string> RoundWatch::lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

void RoundWatch::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!lost_) {
      lock.unlock();
      const absl::Status status = Poll();
      lock.lock();
      if (!status.ok()) {
        lost_ = StrCat(options_.lost_prefix, ": ", status.message());
        wake_.notify_all();
      }
    }
    wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_ || poke_; });
    poke_ = false;
  }
  finished_ = true;
  wake_.notify_all();
}

absl::Status RoundWatch::Poll() {
  if (absl::Now() >= next_beat_) {
    DDPKIT_RETURN_IF_ERROR(store_->Add(AliveKey(options_.node_rank), 1).status());
    next_beat_ = absl::Now() + absl::Seconds(1);
  }
  int round;
  {
    std::lock_guard<std::mutex> lock(mu_);
    round = round_;
  }
  if (round < 0) return absl::OkStatus();
  DDPKIT_RETURN_IF_ERROR(WritePendingFailure(round));
  DDPKIT_RETURN_IF_ERROR(ReadFailure(round));
  return options_.node_rank == 0 ? CheckHeartbeats(round) : absl::OkStatus();
}

// First writer wins: each writer takes a number from the failure counter and records its cause
// under that number; the lowest number recorded is the round's failure. (A number may be left
// unrecorded: a counter request that timed out and was sent again after a reconnect.)
absl::Status RoundWatch::WritePendingFailure(int round) {
  std::string cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (round_ != round || !pending_) return absl::OkStatus();
    cause = *pending_;
  }
  DDPKIT_ASSIGN_OR_RETURN(int64_t number, store_->Add(RoundKey(round, "failures"), 1));
  DDPKIT_RETURN_IF_ERROR(store_->Set(RoundKey(round, StrCat("failed/", number)), cause));
  std::lock_guard<std::mutex> lock(mu_);
  if (round_ == round) pending_.reset();
  wake_.notify_all();
  return absl::OkStatus();
}

absl::Status RoundWatch::ReadFailure(int round) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return absl::OkStatus();
  }
  DDPKIT_ASSIGN_OR_RETURN(int64_t numbers, store_->Add(RoundKey(round, "failures"), 0));
  for (int64_t number = 1; number <= numbers; ++number) {
    const std::string key = RoundKey(round, StrCat("failed/", number));
    DDPKIT_ASSIGN_OR_RETURN(bool recorded, store_->Check({key}));
    if (!recorded) continue;
    DDPKIT_ASSIGN_OR_RETURN(std::string cause, store_->Get(key));
    std::lock_guard<std::mutex> lock(mu_);
    if (round_ == round) failed_ = cause;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

// Node 0: a node whose heartbeat count stood still for the node timeout and 3 s more failed the
// round. A node's request to node 0 gets one node timeout in all, retry included
// (agent_client.h), and it beats every second: a live node's count moves within that, and one
// whose request ran out has counted node 0 lost itself. (Twice the node timeout, as before
// requests had one deadline, kept a cut-off node 0's launcher up past the job's timeout + 5 s.)
absl::Status RoundWatch::CheckHeartbeats(int round) {
  const absl::Time now = absl::Now();
  const absl::Duration silence = options_.node_timeout + absl::Seconds(3);
  for (int node = 1; node < options_.nnodes; ++node) {
    DDPKIT_ASSIGN_OR_RETURN(int64_t beats, store_->Add(AliveKey(node), 0));
    std::lock_guard<std::mutex> lock(mu_);
    if (round_ != round || pending_ || failed_) return absl::OkStatus();
    if (beats != beats_[node]) {
      beats_[node] = beats;
      beat_at_[node] = now;
    } else if (now - beat_at_[node] >= silence) {
      pending_ = StrCat("node ", node, ": ", kSilentNode, " for ", absl::ToDoubleSeconds(silence),
                        " s (it died, or its host is unreachable)");
    }
  }
  return absl::OkStatus();
}

}  // namespace ddpkit::launch
