#include "tools/jobs/fr/analyze.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "autograd/dtype.h"
#include "comm/flight_recorder_dump.h"
#include "comm/types.h"
#include "nlohmann/json.hpp"
#include "tools/jobs/fr/ddp_labels.h"
#include "tools/jobs/fr/torch_match.h"
#include "tools/torch_formats/fr_dump.h"
#include "tools/torch_formats/plan_file.h"
#include "tools/torch_formats/torch_dump.h"

namespace ddpkit::jobs {

using torch_formats::Dump;
using torch_formats::FrEntry;
using torch_formats::ParseTorchDump;
using torch_formats::PlanFile;
using torch_formats::RankFromFileName;
using torch_formats::ReadPlanFile;
using torch_formats::TorchDump;
using torch_formats::TorchReleasesOf;
namespace {

using nlohmann::json;

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

// Every dump in a folder: ddpkit's, or PyTorch's (either form, one file per rank, the rank
// ending its name), never both.
struct AllDumps {
  std::string source;  // "ddpkit", "PyTorch dump version 2.10"
  int world_size = 0;
  std::set<int> ranks;                                // the ranks that left a dump
  std::map<std::string, std::map<int, Dump>> groups;  // process group -> rank -> its dump
  // PyTorch's dumps: each rank's dump version, and the groups' members pg_config names.
  std::map<int, std::string> versions;
  std::map<std::string, std::set<int>> group_ranks;
};

absl::Status AddTorchDump(const std::string& path, int rank, AllDumps& all) {
  DDPKIT_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  DDPKIT_ASSIGN_OR_RETURN(TorchDump dump, ParseTorchDump(text, rank, path));
  if (!all.ranks.insert(rank).second) {
    return absl::InvalidArgumentError(StrCat(path, ": a second dump of rank ", rank));
  }
  all.versions[rank] = dump.version;
  all.world_size = std::max(all.world_size, dump.world_size);
  for (auto& [group, d] : dump.groups) all.groups[group][rank] = std::move(d);
  for (auto& [group, ranks] : dump.group_ranks)
    all.group_ranks[group].insert(ranks.begin(), ranks.end());
  return absl::OkStatus();
}

// "PyTorch dump version 2.10 (PyTorch 2.9-2.15)", or the versions when ranks disagree.
std::string TorchSource(const std::map<int, std::string>& versions) {
  std::set<std::string> distinct;
  for (const auto& [rank, v] : versions) distinct.insert(v);
  if (distinct.size() > 1) return StrCat("PyTorch dump versions ", absl::StrJoin(distinct, ", "));
  const std::string& v = *distinct.begin();
  const std::string_view releases = TorchReleasesOf(v);
  return StrCat("PyTorch dump version ", v,
                releases.empty() ? "" : StrCat(" (PyTorch ", releases, ")"));
}

absl::StatusOr<AllDumps> ReadDumps(const std::string& dir) {
  AllDumps all;
  bool ddpkit = false, torch = false;
  std::error_code ec;
  for (const auto& file : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = file.path().filename().string();
    if (name.rfind("ddpkit_fr.rank", 0) == 0 && file.path().extension() == ".json") {
      DDPKIT_ASSIGN_OR_RETURN(Dump dump, ReadDump(file.path().string()));
      ddpkit = true;
      all.ranks.insert(dump.rank);
      all.world_size = std::max(all.world_size, dump.world_size);
      all.groups[""][dump.rank] = std::move(dump);
    } else if (std::optional<int> rank = RankFromFileName(name); rank && file.is_regular_file()) {
      DDPKIT_RETURN_IF_ERROR(AddTorchDump(file.path().string(), *rank, all));
      torch = true;
    }
  }
  if (ec) return absl::NotFoundError(StrCat("cannot read '", dir, "': ", ec.message()));
  if (ddpkit && torch) {
    return absl::InvalidArgumentError(
        StrCat("'", dir, "' holds both ddpkit's and PyTorch's dumps: give one job's folder"));
  }
  if (all.ranks.empty()) {
    return absl::NotFoundError(StrCat(
        "no flight-recorder dump in '", dir,
        "': ddpkit's ranks write ddpkit_fr.rank<r>.json when a collective fails, into "
        "DDPKIT_FR_DUMP_DIR (default ./ddpkit_fr); PyTorch's dumps, JSON or pickle, are read as "
        "files whose names end with the rank (fr_rank_<r>.json, nccl_trace_rank_<r>)"));
  }
  all.source = ddpkit ? "ddpkit" : TorchSource(all.versions);
  return all;
}

std::string Describe(const FrEntry& e) {
  const std::string size = e.shape().empty() ? std::to_string(e.count()) : e.shape();
  std::string out = absl::StrFormat("%s %s[%s] seq %d", e.op(), e.dtype(), size, e.seq());
  if (e.purpose() == "bucket" && !e.ddp_params().empty()) {  // a PyTorch dump read with --plan
    absl::StrAppendFormat(&out, " (DDP bucket %d of iteration %d: %s)", e.bucket(), e.iteration(),
                          e.ddp_params());
  } else if (e.purpose() == "bucket") {
    absl::StrAppendFormat(&out, " (bucket %d)", e.bucket());
  } else if (e.purpose() != "untagged") {
    absl::StrAppendFormat(&out, " (%s)", PurposeWords(e.purpose()));
  }
  if (!e.process_group().empty())
    absl::StrAppendFormat(&out, " in process group %s", e.process_group());
  return out;
}

std::string RankList(const std::vector<int>& ranks) {
  return StrCat(ranks.size() > 1 ? "ranks " : "rank ", absl::StrJoin(ranks, ", "));
}

// How two ranks' calls as `seq` differ (ddpkit's dumps), or nullopt when they agree.
std::optional<std::string> Difference(const Dump& a, const Dump& b, int64_t seq) {
  const std::optional<std::string_view> what =
      comm::CallDifference(a.calls.at(seq), b.calls.at(seq));
  if (!what) return std::nullopt;
  return std::string(*what);
}

// Whether a rank was still in `seq` when it dumped. Gloo's PyTorch dumps record no start or
// completion (every entry stays "scheduled"), so there only a rank's last call can be unfinished.
bool Unfinished(const Dump& dump, int64_t seq) {
  auto it = dump.entries.find(seq);
  if (it == dump.entries.end() || it->second.state() == "completed") return false;
  if (dump.torch_calls.empty() || it->second.state() != "scheduled") return true;
  return seq == dump.entries.rbegin()->first;
}

struct Wait {
  std::vector<int> ranks;  // the ranks left in the collective
  double waited_ms = 0;    // the longest wait the dumps record
  double timeout_ms = 0;   // their longest timeout
};

Wait Waiting(const std::map<int, Dump>& dumps, int64_t seq) {
  Wait w;
  for (const auto& [rank, dump] : dumps) {
    if (!Unfinished(dump, seq)) continue;
    w.ranks.push_back(rank);
    w.waited_ms = std::max(w.waited_ms, dump.entries.at(seq).waited_ms());
    w.timeout_ms = std::max(w.timeout_ms, dump.entries.at(seq).timeout_ms());
  }
  return w;
}

// "ranks 0, 1 waited 2.0 s", or, when the dumps hold no wait times, their timeout.
std::string WaitText(const Wait& w) {
  if (w.waited_ms == 0 && w.timeout_ms > 0) {
    return absl::StrFormat("%s %s left waiting (timeout %.1f s)", RankList(w.ranks),
                           w.ranks.size() > 1 ? "were" : "was", w.timeout_ms / 1000);
  }
  return absl::StrFormat("%s waited %.1f s", RankList(w.ranks), w.waited_ms / 1000);
}

void SetWait(const Wait& w, FrFinding& f) {
  for (int r : w.ranks) f.add_waiting_ranks(r);
  f.set_waited_s(w.waited_ms / 1000);
  f.set_timeout_s(w.timeout_ms / 1000);
}

// The uneven-inputs reading of a missing call (--plan): the first missing rank's last call
// ended an iteration and the missed one begins the next.
std::optional<std::string> UnevenHint(const std::map<int, Dump>& dumps,
                                      const std::vector<int>& missing, const FrEntry& first) {
  auto it = dumps.find(missing[0]);
  if (it == dumps.end() || it->second.entries.empty()) return std::nullopt;
  return UnevenInputsHint(it->second.entries.rbegin()->second, first, missing[0]);
}

std::string MissingText(const std::map<int, Dump>& dumps, const std::vector<int>& missing,
                        const FrEntry& first, const Wait& wait) {
  std::string text = absl::StrFormat("%s never issued %s", RankList(missing), Describe(first));
  if (!wait.ranks.empty()) text += "; " + WaitText(wait);
  auto it = dumps.find(missing[0]);
  if (it == dumps.end()) {
    absl::StrAppendFormat(&text, " (rank %d recorded no call in this process group)", missing[0]);
    return text;
  }
  const Dump& gone = it->second;
  if (!gone.entries.empty()) {
    absl::StrAppendFormat(&text, " (rank %d's last was %s", missing[0],
                          Describe(gone.entries.rbegin()->second));
    if (!gone.reason.empty()) absl::StrAppendFormat(&text, "; it reported: %s", gone.reason);
    text += ")";
  }
  return text;
}

// The first sequence number some dumped rank recorded and another never reached, or where
// the ranks that recorded it issued different calls (within one process group).
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
    std::string how;
    for (int r : ranks) {
      const std::optional<std::string> what = Difference(dumps.at(ranks[0]), dumps.at(r), seq);
      if (!what) continue;
      if (differ.empty()) how = *what;
      differ.push_back(r);
    }
    if (missing.empty() && differ.empty()) continue;
    FrFinding f;
    f.set_seq(seq);
    const Wait wait = Waiting(dumps, seq);
    SetWait(wait, f);
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
    f.set_text(MissingText(dumps, missing, first, wait));
    return f;
  }
  return std::nullopt;
}

// The first collective of a PyTorch job's process group that is not fully matched (nor
// undecided, which a rank without a dump explains), as a finding.
std::optional<FrFinding> FirstDivergent(const std::map<int, Dump>& dumps,
                                        const std::vector<FrCollective>& collectives) {
  for (const FrCollective& c : collectives) {
    if (c.verdict() == "fully_matched" || c.verdict() == "undecided") continue;
    FrFinding f;
    f.set_seq(c.seq());
    f.set_verdict(c.verdict());
    f.set_process_group(c.process_group());
    const Wait wait = Waiting(dumps, c.seq());
    SetWait(wait, f);
    const Dump& reference = dumps.at(c.reference_rank());
    const FrEntry& first = reference.entries.at(c.seq());
    if (c.verdict() == "missing") {
      f.set_kind("missing");
      const std::vector<int> missing(c.missing_ranks().begin(), c.missing_ranks().end());
      for (int r : missing) f.add_ranks(r);
      std::string text = MissingText(dumps, missing, first, wait);
      if (std::optional<std::string> hint = UnevenHint(dumps, missing, first)) {
        text += ". " + *hint;
        f.set_pattern("uneven_inputs");
      }
      f.set_text(text);
      f.set_stack_rank(c.reference_rank());
      for (const std::string& frame : reference.torch_calls.at(c.seq()).front().frames) {
        f.add_stack(frame);  // where the ranks that issued it are
      }
      return f;
    }
    const FrMismatch& m = c.mismatches(0);
    f.set_kind("mismatch");
    f.add_ranks(c.reference_rank());
    for (const FrMismatch& other : c.mismatches()) {
      if (other.rank() != c.reference_rank()) f.add_ranks(other.rank());
    }
    const Dump& culprit = dumps.at(m.rank());
    f.set_text(
        absl::StrFormat("ranks disagree at seq %d (%s): rank %d issued %s but rank %d "
                        "issued %s (%s)",
                        c.seq(), VerdictWords(c.verdict()), c.reference_rank(), Describe(first),
                        m.rank(), Describe(culprit.entries.at(c.seq())), m.detail()));
    f.set_stack_rank(m.rank());
    for (const std::string& frame : culprit.torch_calls.at(c.seq()).front().frames) {
      f.add_stack(frame);
    }
    return f;
  }
  return std::nullopt;
}

// "the ranks' dumps have different dump versions: 2.10 (ranks 0, 1), 2.9 (rank 2)".
std::optional<FrFinding> VersionsDisagree(const std::map<int, std::string>& versions) {
  std::map<std::string, std::vector<int>> ranks;
  for (const auto& [rank, v] : versions) ranks[v].push_back(rank);
  if (ranks.size() < 2) return std::nullopt;
  FrFinding f;
  f.set_kind("versions");
  std::vector<std::string> parts;
  for (const auto& [v, rs] : ranks) {
    parts.push_back(StrCat(v, " (", RankList(rs), ")"));
    for (int r : rs) f.add_ranks(r);
  }
  f.set_text(StrCat("the ranks' dumps have different dump versions: ", absl::StrJoin(parts, ", "),
                    ": the ranks ran different PyTorch releases (PyTorch's analyser refuses such "
                    "a set; ddpkit compares what the versions share)"));
  return f;
}

// PyTorch's dumps: every group's collectives compared, and the first divergent one of each.
void AnalyzeTorch(const AllDumps& all, int world, FlightRecorderAnalysis& analysis) {
  for (const auto& [rank, v] : all.versions) (*analysis.mutable_dump_versions())[rank] = v;
  if (std::optional<FrFinding> f = VersionsDisagree(all.versions)) *analysis.add_findings() = *f;
  for (const auto& [group, dumps] : all.groups) {
    const GroupDumps g{.name = group,
                       .dumps = &dumps,
                       .expected = ExpectedRanks(group, dumps, all.group_ranks, world),
                       .dumped = all.ranks,
                       .version = all.versions.begin()->second};
    const std::vector<FrCollective> collectives = CompareCollectives(g);
    for (const FrCollective& c : collectives) *analysis.add_collectives() = c;
    if (std::optional<FrFinding> first = FirstDivergent(dumps, collectives)) {
      *analysis.add_findings() = *first;
    }
  }
}

// A rank's entries in every process group, in the order it issued them.
std::vector<FrEntry> Timeline(const AllDumps& all, int rank) {
  std::vector<FrEntry> out;
  for (const auto& [group, dumps] : all.groups) {
    auto it = dumps.find(rank);
    if (it == dumps.end()) continue;
    for (const auto& [seq, e] : it->second.entries) out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(), [](const FrEntry& a, const FrEntry& b) {
    return std::pair(a.record_id(), a.seq()) < std::pair(b.record_id(), b.seq());
  });
  return out;
}

FrRank SummaryOf(const AllDumps& all, int rank, int last_entries) {
  FrRank r;
  r.set_rank(rank);
  r.set_dumped(true);
  const std::vector<FrEntry> timeline = Timeline(all, rank);
  for (const auto& [group, dumps] : all.groups) {
    if (dumps.count(rank) && !dumps.at(rank).reason.empty()) r.set_reason(dumps.at(rank).reason);
  }
  r.set_last_seq(timeline.empty() ? -1 : timeline.back().seq());
  r.set_last_completed_seq(-1);
  for (const FrEntry& e : timeline) {
    if (e.state() == "completed") r.set_last_completed_seq(e.seq());
  }
  const size_t skip =
      timeline.size() - std::min(timeline.size(), static_cast<size_t>(last_entries));
  for (size_t i = skip; i < timeline.size(); ++i) *r.add_last_entries() = timeline[i];
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
      if (Unfinished(dump, seq) && (stuck < 0 || seq < stuck)) stuck = seq;
    }
  }
  std::string text =
      absl::StrFormat("rank %d left no dump: it was killed or stopped, or was still running", rank);
  if (stuck >= 0) {
    const Wait wait = Waiting(dumps, stuck);
    SetWait(wait, f);
    f.set_seq(stuck);
    const FrEntry& e = dumps.at(wait.ranks[0]).entries.at(stuck);
    absl::StrAppendFormat(&text, "; %s in %s, which rank %d never completed", WaitText(wait),
                          Describe(e), rank);
  }
  f.set_text(text);
  return f;
}

// The diagnosis when no dump holds a collective.
std::string NothingRecorded(const AllDumps& all) {
  std::string text = "the dumps hold no collective";
  if (all.source != "ddpkit") {
    text +=
        ": PyTorch before 2.8 records only NCCL's collectives (gloo's from 2.8 on), and only "
        "while TORCH_NCCL_TRACE_BUFFER_SIZE (2.8 on: TORCH_FR_BUFFER_SIZE) is above 0";
  }
  return text;
}

// --plan: the default group's calls named by what DDP issued them for.
absl::Status LabelWithPlan(const std::string& plan_path, AllDumps& all) {
  if (all.source == "ddpkit") {
    return absl::InvalidArgumentError(
        "--plan reads PyTorch's dumps; ddpkit's own dumps name their buckets already");
  }
  DDPKIT_ASSIGN_OR_RETURN(const PlanFile file, ReadPlanFile(plan_path));
  DDPKIT_ASSIGN_OR_RETURN(const DdpCallPlan plan, DdpCallPlanOf(file));
  auto it = all.groups.find("0");
  if (it != all.groups.end()) LabelDdpCollectives(plan, it->second);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FlightRecorderAnalysis> AnalyzeFlightRecorders(const std::string& dir,
                                                              int last_entries,
                                                              const std::string& plan_path) {
  DDPKIT_ASSIGN_OR_RETURN(AllDumps all, ReadDumps(dir));
  if (!plan_path.empty()) DDPKIT_RETURN_IF_ERROR(LabelWithPlan(plan_path, all));
  FlightRecorderAnalysis analysis;
  analysis.set_dir(dir);
  analysis.set_source(all.source);
  const int world = std::max(all.world_size, *all.ranks.rbegin() + 1);
  analysis.set_world_size(world);
  if (all.source == "ddpkit") {
    for (const auto& [group, dumps] : all.groups) {
      if (std::optional<FrFinding> first = FirstDisagreement(dumps))
        *analysis.add_findings() = *first;
    }
  } else {
    AnalyzeTorch(all, world, analysis);
  }
  static const std::map<int, Dump> kNone;
  const std::map<int, Dump>& widest =
      all.groups.empty() ? kNone
                         : std::max_element(all.groups.begin(), all.groups.end(),
                                            [](const auto& a, const auto& b) {
                                              return a.second.size() < b.second.size();
                                            })
                               ->second;
  for (int r = 0; r < world; ++r) {
    if (all.ranks.count(r)) {
      *analysis.add_ranks() = SummaryOf(all, r, last_entries);
    } else {
      FrRank* missing = analysis.add_ranks();
      missing->set_rank(r);
      missing->set_last_seq(-1);
      missing->set_last_completed_seq(-1);
      *analysis.add_findings() = NoDump(r, widest);
    }
  }
  analysis.set_diagnosis(!analysis.findings().empty() ? analysis.findings(0).text()
                         : all.groups.empty()         ? NothingRecorded(all)
                         : all.source == "ddpkit"
                             ? "every rank issued the same collectives, and each completed"
                             : StrCat("every collective fully matched across the ranks (",
                                      analysis.collectives_size(),
                                      " compared): no rank missed or changed a call"));
  return analysis;
}

}  // namespace ddpkit::jobs
