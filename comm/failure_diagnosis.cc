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

// Set by every rank that fails, so that a live rank still waiting inside a collective learns of
// it (RecordWaitingIfAPeerFailed). The group is finished after any failure, so one key serves.
constexpr char kFailingKey[] = "ddpkit/failing";
// A rank's record: "failed" (it failed here) or kWaitingValue (alive, still inside it).
constexpr char kWaitingValue[] = "waiting";

enum class Record { kNone, kFailed, kWaiting };

// What `rank` recorded in this collective or one of the next few (nullopt: the store went away).
std::optional<Record> RecordOf(Store& store, uint64_t sequence_number, int rank,
                               absl::Duration reply_timeout) {
  for (uint64_t s = sequence_number; s <= sequence_number + kLaterCollectives; ++s) {
    absl::StatusOr<bool> there = store.Check({FailedKey(s, rank)}, reply_timeout);
    if (!there.ok()) return std::nullopt;
    if (!*there) continue;
    absl::StatusOr<std::string> value = store.Get(FailedKey(s, rank), reply_timeout);
    if (!value.ok()) return std::nullopt;
    return *value == kWaitingValue ? Record::kWaiting : Record::kFailed;
  }
  return Record::kNone;
}

struct Records {
  std::vector<int> silent;   // no record: dead, stuck, or elsewhere
  std::vector<int> waiting;  // alive, still inside the collective, waiting on a peer
};

// Every rank's record, polled until none is silent or `deadline` (nullopt: the store went away).
// The store has just answered this rank's own record, so each check gets the whole window.
std::optional<Records> ReadRecords(Store& store, uint64_t sequence_number, int size,
                                   absl::Time deadline, absl::Duration reply_timeout) {
  Records records;
  while (true) {
    records = {};
    for (int r = 0; r < size; ++r) {
      const std::optional<Record> record = RecordOf(store, sequence_number, r, reply_timeout);
      if (!record) return std::nullopt;
      if (*record == Record::kNone) records.silent.push_back(r);
      if (*record == Record::kWaiting) records.waiting.push_back(r);
    }
    if (records.silent.empty() || absl::Now() >= deadline) return records;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

std::string Ranks(const std::vector<int>& ranks) {
  return StrCat("rank", ranks.size() > 1 ? "s " : " ", absl::StrJoin(ranks, ", "));
}

}  // namespace

std::string RanksThatDidNotArrive(Store& store, int rank, int size, uint64_t sequence_number,
                                  const ProcessGroupOptions& options,
                                  const std::function<void()>& once_recorded) {
  const absl::Duration window = DiagnosisTime(options);
  const absl::Time deadline = absl::Now() + window;
  if (!store.Set(FailedKey(sequence_number, rank), "failed", window).ok() ||
      !store.Set(kFailingKey, "1", window).ok()) {
    return "; rank 0 did not answer through the store it hosts (dead or stuck)";
  }
  if (once_recorded) once_recorded();
  const std::optional<Records> records =
      ReadRecords(store, sequence_number, size, deadline, window);
  // It answered the record, then went quiet: alive a moment ago, so its link is losing or
  // holding up data (or it has just died).
  if (!records) {
    return StrCat("; rank 0, which hosts the store, did not answer within ",
                  absl::FormatDuration(window),
                  " mid-way through finding out which ranks arrived (its link is losing or "
                  "holding up data, or it has just died)");
  }
  if (records->silent.empty()) return kEveryRankArrived;
  std::string who =
      StrCat("; ", Ranks(records->silent),
             " did not reach this collective (dead, stuck, or issuing something else)");
  if (!records->waiting.empty()) {
    StrAppend(&who, "; ", Ranks(records->waiting),
              " reached it and, alive, still waited in it for a peer");
  }
  return who;
}

bool RecordWaitingIfAPeerFailed(Store& store, int rank, uint64_t sequence_number,
                                absl::Duration reply_timeout) {
  absl::StatusOr<bool> failing = store.Check({kFailingKey}, reply_timeout);
  if (!failing.ok() || !*failing) return false;
  return store.Set(FailedKey(sequence_number, rank), kWaitingValue, reply_timeout).ok();
}

}  // namespace ddpkit::comm
