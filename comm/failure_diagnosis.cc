#include "comm/failure_diagnosis.h"

#include <optional>
#include <vector>

#include "absl/strings/str_join.h"
#include "autograd/base/error.h"

namespace ddpkit::comm {
namespace {

// Every rank failed in the same collective (or had passed it and failed in the next), so none
// is dead or stuck: each waited for data a peer had sent (a lossy, flapping or briefly cut link
// holds it up past the timeout), or the ranks issued different collectives under one sequence
// number.
constexpr char kEveryRankArrived[] =
    "; every rank reached this collective and failed in it or the next (none is dead or stuck): "
    "the network between them lost or held up its data, or they issued different collectives "
    "(DDPKIT_DEBUG=DETAIL checks)";

// How many later collectives count as "passed": a rank whose part of this one was done (its
// data sent and received) moves on and fails in the next, while its peers still wait in this.
// Two, not one: a collective that only needs a rank to send (a broadcast from it) ends for it
// once its data is in the socket buffers, so it can pass that one as well.
constexpr uint64_t kLaterCollectives = 2;

std::string FailedKey(uint64_t sequence_number, int rank) {
  return StrCat("ddpkit/failed/", sequence_number, "/", rank);
}

// Whether `rank` recorded a failure in this collective or one of the next few (nullopt: the
// store went away).
std::optional<bool> Arrived(Store& store, uint64_t sequence_number, int rank,
                            absl::Duration reply_timeout) {
  for (uint64_t s = sequence_number; s <= sequence_number + kLaterCollectives; ++s) {
    absl::StatusOr<bool> there = store.Check({FailedKey(s, rank)}, reply_timeout);
    if (!there.ok()) return std::nullopt;
    if (*there) return true;
  }
  return false;
}

// The ranks that have not recorded themselves by `deadline` (nullopt: the store went away). The
// store has just answered this rank's own record, so each check gets the whole window.
std::optional<std::vector<int>> SilentRanks(Store& store, uint64_t sequence_number, int size,
                                            absl::Time deadline, absl::Duration reply_timeout) {
  std::vector<int> silent;
  while (true) {
    silent.clear();
    for (int r = 0; r < size; ++r) {
      const std::optional<bool> arrived = Arrived(store, sequence_number, r, reply_timeout);
      if (!arrived) return std::nullopt;
      if (!*arrived) silent.push_back(r);
    }
    if (silent.empty() || absl::Now() >= deadline) return silent;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

}  // namespace

std::string RanksThatDidNotArrive(Store& store, int rank, int size, uint64_t sequence_number,
                                  const ProcessGroupOptions& options) {
  const absl::Duration window = DiagnosisTime(options);
  const absl::Time deadline = absl::Now() + window;
  if (!store.Set(FailedKey(sequence_number, rank), "1", window).ok()) {
    return "; rank 0 did not answer through the store it hosts (dead or stuck)";
  }
  const std::optional<std::vector<int>> silent =
      SilentRanks(store, sequence_number, size, deadline, window);
  // It answered the record, then went quiet: alive a moment ago, so its link is losing or
  // holding up data (or it has just died).
  if (!silent) {
    return StrCat("; rank 0, which hosts the store, did not answer within ",
                  absl::FormatDuration(window),
                  " mid-way through finding out which ranks arrived (its link is losing or "
                  "holding up data, or it has just died)");
  }
  if (silent->empty()) return kEveryRankArrived;
  return StrCat("; rank", silent->size() > 1 ? "s " : " ", absl::StrJoin(*silent, ", "),
                " did not reach this collective (dead, stuck, or issuing something else)");
}

}  // namespace ddpkit::comm
