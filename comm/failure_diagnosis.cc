#include "comm/failure_diagnosis.h"

#include <optional>
#include <vector>

#include "absl/strings/str_join.h"
#include "autograd/error.h"

namespace ddpkit::comm {
namespace {

// Every rank failed in the same collective, so none is dead or stuck: each waited for data a
// peer had sent (a lossy, flapping or briefly cut link holds it up past the timeout), or the
// ranks issued different collectives under one sequence number.
constexpr char kEveryRankArrived[] =
    "; every rank reached this collective and failed in it (none is dead or stuck): the network "
    "between them lost or held up its data, or they issued different collectives "
    "(DDPKIT_DEBUG=DETAIL checks)";

// The ranks that have not recorded themselves under `prefix` by `deadline` (nullopt: the store
// went away). The store has just answered this rank's own record, so each check gets the whole
// window to be answered.
std::optional<std::vector<int>> SilentRanks(Store& store, const std::string& prefix, int size,
                                            absl::Time deadline, absl::Duration reply_timeout) {
  std::vector<int> silent;
  while (true) {
    silent.clear();
    for (int r = 0; r < size; ++r) {
      absl::StatusOr<bool> there = store.Check({prefix + std::to_string(r)}, reply_timeout);
      if (!there.ok()) return std::nullopt;  // the store went away: no verdict
      if (!*there) silent.push_back(r);
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
  const std::string prefix = StrCat("ddpkit/failed/", sequence_number, "/");
  if (!store.Set(prefix + std::to_string(rank), "1", window).ok()) {
    return "; rank 0 did not answer through the store it hosts (dead or stuck)";
  }
  const std::optional<std::vector<int>> silent = SilentRanks(store, prefix, size, deadline, window);
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
