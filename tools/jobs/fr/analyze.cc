#include "tools/jobs/fr/analyze.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "autograd/dtype.h"
#include "autograd/error.h"
#include "autograd/file_util.h"
#include "comm/flight_recorder_dump.h"
#include "comm/types.h"
#include "nlohmann/json.hpp"

namespace ddpkit::jobs {
namespace {

using nlohmann::json;

// One rank's dump, entries by sequence number.
struct Dump {
  int rank = 0;
  int world_size = 1;
  std::string reason;
  std::map<int64_t, FrEntry> entries;
  std::map<int64_t, comm::CollectiveFingerprint> calls;  // the same entries, for comparing
};

double NsToMs(int64_t ns) { return static_cast<double>(ns) / 1e6; }

FrEntry EntryOf(const json& e, int64_t dump_time_ns) {
  FrEntry entry;
  entry.set_seq(e.at("collective_seq_id").get<int64_t>());
  entry.set_op(e.at("op").get<std::string>());
  entry.set_dtype(e.at("dtype").get<std::string>());
  entry.set_count(e.at("input_sizes").at(0).at(0).get<int64_t>());
  entry.set_reduce_op(e.at("reduce_op").get<std::string>());
  entry.set_root(e.at("root").get<int>());
  entry.set_purpose(e.value("purpose", "untagged"));
  entry.set_bucket(e.value("bucket", -1));
  entry.set_shadow(e.value("shadow", false));
  entry.set_state(e.at("state").get<std::string>());
  if (e.contains("duration_ms") && e["duration_ms"].is_number()) {
    entry.set_duration_ms(e["duration_ms"].get<double>());
  }
  const json& started = e.at("time_discovered_started_ns");
  if (entry.state() != "completed" && started.is_number()) {
    const json& done = e.at("time_discovered_completed_ns");
    const int64_t until = done.is_number() ? done.get<int64_t>() : dump_time_ns;
    entry.set_waited_ms(NsToMs(until - started.get<int64_t>()));
  }
  return entry;
}

// The call an entry records, as the process group's own check compares calls. The dump holds no
// per-rank counts, so the variable-size collectives compare equal on them.
absl::StatusOr<comm::CollectiveFingerprint> CallOf(const FrEntry& e) {
  comm::CollectiveFingerprint call;
  call.sequence_number = static_cast<uint64_t>(e.seq());
  DDPKIT_ASSIGN_OR_RETURN(call.op, comm::ParseOpType(e.op()));
  DDPKIT_ASSIGN_OR_RETURN(call.reduce_op, comm::ParseReduceOp(e.reduce_op()));
  DDPKIT_ASSIGN_OR_RETURN(call.dtype, ParseDType(e.dtype()));
  call.root = e.root();
  call.input_numel = e.count();
  return call;
}

absl::StatusOr<Dump> ReadDump(const std::string& path) {
  DDPKIT_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("entries")) {
    return absl::InvalidArgumentError(StrCat(path, ": not a flight-recorder dump"));
  }
  Dump dump;
  try {
    dump.rank = j.at("rank").get<int>();
    dump.world_size = j.at("world_size").get<int>();
    dump.reason = j.value("reason", "");
    const int64_t dump_time = j.value("dump_time_ns", int64_t{0});
    for (const json& e : j.at("entries")) {
      FrEntry entry = EntryOf(e, dump_time);
      absl::StatusOr<comm::CollectiveFingerprint> call = CallOf(entry);
      if (!call.ok())
        return absl::InvalidArgumentError(StrCat(path, ": ", call.status().message()));
      dump.calls[entry.seq()] = *call;
      dump.entries[entry.seq()] = entry;
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat(path, ": malformed dump: ", e.what()));
  }
  return dump;
}

absl::StatusOr<std::map<int, Dump>> ReadDumps(const std::string& dir) {
  std::map<int, Dump> dumps;
  std::error_code ec;
  for (const auto& file : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = file.path().filename().string();
    if (name.rfind("ddpkit_fr.rank", 0) != 0 || file.path().extension() != ".json") continue;
    DDPKIT_ASSIGN_OR_RETURN(Dump dump, ReadDump(file.path().string()));
    dumps[dump.rank] = std::move(dump);
  }
  if (ec) return absl::NotFoundError(StrCat("cannot read '", dir, "': ", ec.message()));
  if (dumps.empty()) {
    return absl::NotFoundError(StrCat("no flight-recorder dump (ddpkit_fr.rank<r>.json) in '", dir,
                                      "'; ranks write them when a collective fails, into "
                                      "DDPKIT_FR_DUMP_DIR (default ./ddpkit_fr)"));
  }
  return dumps;
}

std::string Describe(const FrEntry& e) {
  std::string out = absl::StrFormat("%s %s[%d] seq %d", e.op(), e.dtype(), e.count(), e.seq());
  if (e.purpose() == "bucket") {
    absl::StrAppendFormat(&out, " (bucket %d)", e.bucket());
  } else if (e.purpose() != "untagged") {
    absl::StrAppendFormat(&out, " (%s)", e.purpose());
  }
  return out;
}

std::string RankList(const std::vector<int>& ranks) {
  return StrCat(ranks.size() > 1 ? "ranks " : "rank ", absl::StrJoin(ranks, ", "));
}

// Ranks whose entry for `seq` had not completed, and the longest wait.
std::pair<std::vector<int>, double> Waiting(const std::map<int, Dump>& dumps, int64_t seq) {
  std::vector<int> waiting;
  double waited_ms = 0;
  for (const auto& [rank, dump] : dumps) {
    auto it = dump.entries.find(seq);
    if (it == dump.entries.end() || it->second.state() == "completed") continue;
    waiting.push_back(rank);
    waited_ms = std::max(waited_ms, it->second.waited_ms());
  }
  return {waiting, waited_ms};
}

// The first sequence number some dumped rank recorded and another never reached, or where
// the ranks that recorded it issued different calls.
std::optional<FrFinding> FirstDisagreement(const std::map<int, Dump>& dumps) {
  std::map<int64_t, std::vector<int>> holders;
  for (const auto& [rank, dump] : dumps) {
    for (const auto& [seq, e] : dump.entries) holders[seq].push_back(rank);
  }
  for (const auto& [seq, ranks] : holders) {
    std::vector<int> missing;
    for (const auto& [rank, dump] : dumps) {
      const bool beyond = dump.entries.empty() || seq > dump.entries.rbegin()->first;
      if (beyond) missing.push_back(rank);
    }
    const FrEntry& first = dumps.at(ranks[0]).entries.at(seq);
    std::vector<int> differ;
    std::string_view how;
    for (int r : ranks) {
      const auto what =
          comm::CallDifference(dumps.at(ranks[0]).calls.at(seq), dumps.at(r).calls.at(seq));
      if (!what) continue;
      if (differ.empty()) how = *what;
      differ.push_back(r);
    }
    if (missing.empty() && differ.empty()) continue;
    FrFinding f;
    f.set_seq(seq);
    const auto [waiting, waited_ms] = Waiting(dumps, seq);
    for (int r : waiting) f.add_waiting_ranks(r);
    f.set_waited_s(waited_ms / 1000);
    if (!differ.empty()) {
      f.set_kind("mismatch");
      f.add_ranks(ranks[0]);
      for (int r : differ) f.add_ranks(r);
      f.set_text(absl::StrFormat(
          "ranks disagree at seq %d: rank %d issued %s but rank %d issued %s (%s)", seq, ranks[0],
          Describe(first), differ[0], Describe(dumps.at(differ[0]).entries.at(seq)), how));
      return f;
    }
    f.set_kind("missing");
    for (int r : missing) f.add_ranks(r);
    std::string text = absl::StrFormat("%s never issued %s", RankList(missing), Describe(first));
    if (!waiting.empty()) {
      absl::StrAppendFormat(&text, "; %s waited %.1f s", RankList(waiting), waited_ms / 1000);
    }
    const Dump& gone = dumps.at(missing[0]);
    if (!gone.entries.empty()) {
      absl::StrAppendFormat(&text, " (rank %d's last was %s", missing[0],
                            Describe(gone.entries.rbegin()->second));
      if (!gone.reason.empty()) absl::StrAppendFormat(&text, "; it reported: %s", gone.reason);
      text += ")";
    }
    f.set_text(text);
    return f;
  }
  return std::nullopt;
}

FrRank SummaryOf(const Dump& dump, int last_entries) {
  FrRank r;
  r.set_rank(dump.rank);
  r.set_dumped(true);
  r.set_reason(dump.reason);
  r.set_last_seq(dump.entries.empty() ? -1 : dump.entries.rbegin()->first);
  r.set_last_completed_seq(-1);
  for (const auto& [seq, e] : dump.entries) {
    if (e.state() == "completed") r.set_last_completed_seq(seq);
  }
  int skip = std::max(0, static_cast<int>(dump.entries.size()) - last_entries);
  for (const auto& [seq, e] : dump.entries) {
    if (skip-- > 0) continue;
    *r.add_last_entries() = e;
  }
  return r;
}

// A rank without a dump: where its peers were left waiting.
FrFinding NoDump(int rank, const std::map<int, Dump>& dumps) {
  FrFinding f;
  f.set_kind("no_dump");
  f.add_ranks(rank);
  int64_t stuck = -1;
  for (const auto& [r, dump] : dumps) {
    for (const auto& [seq, e] : dump.entries) {
      if (e.state() != "completed" && (stuck < 0 || seq < stuck)) stuck = seq;
    }
  }
  std::string text =
      absl::StrFormat("rank %d left no dump: it was killed or stopped, or was still running", rank);
  if (stuck >= 0) {
    const auto [waiting, waited_ms] = Waiting(dumps, stuck);
    for (int r : waiting) f.add_waiting_ranks(r);
    f.set_seq(stuck);
    f.set_waited_s(waited_ms / 1000);
    const FrEntry& e = dumps.at(waiting[0]).entries.at(stuck);
    absl::StrAppendFormat(&text, "; %s waited %.1f s in %s, which rank %d never completed",
                          RankList(waiting), waited_ms / 1000, Describe(e), rank);
  }
  f.set_text(text);
  return f;
}

}  // namespace

absl::StatusOr<FlightRecorderAnalysis> AnalyzeFlightRecorders(const std::string& dir,
                                                              int last_entries) {
  using Dumps = std::map<int, Dump>;
  DDPKIT_ASSIGN_OR_RETURN(const Dumps dumps, ReadDumps(dir));
  FlightRecorderAnalysis analysis;
  analysis.set_dir(dir);
  int world = 0;
  for (const auto& [rank, dump] : dumps) world = std::max({world, dump.world_size, rank + 1});
  analysis.set_world_size(world);
  if (std::optional<FrFinding> first = FirstDisagreement(dumps)) *analysis.add_findings() = *first;
  for (int r = 0; r < world; ++r) {
    if (dumps.count(r)) {
      *analysis.add_ranks() = SummaryOf(dumps.at(r), last_entries);
    } else {
      FrRank* missing = analysis.add_ranks();
      missing->set_rank(r);
      missing->set_last_seq(-1);
      missing->set_last_completed_seq(-1);
      *analysis.add_findings() = NoDump(r, dumps);
    }
  }
  analysis.set_diagnosis(analysis.findings().empty()
                             ? "every rank issued the same collectives, and each completed"
                             : analysis.findings(0).text());
  return analysis;
}

}  // namespace ddpkit::jobs
