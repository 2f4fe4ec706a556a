// `ddpkit fr analyze DIR`: what the ranks' flight-recorder dumps say, read side by side.
#include <iostream>
#include <map>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tools/cli/commands.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/fr/analyze.h"

ABSL_FLAG(std::string, plan, "",
          "FILE: a plan file of the job's model (tools/scripts/export_ddp_plan.py, same caps): "
          "PyTorch's allreduces named by DDP bucket and iteration, uneven inputs recognised");

namespace ddpkit::cli {
namespace {

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

void PrintEntries(const jobs::FrRank& rank) {
  std::cout << absl::StrFormat("  %6s  %-16s  %-8s  %10s  %-18s  %-9s  %s\n", "seq", "op", "dtype",
                               "size", "for", "state", "time");
  for (const torch_formats::FrEntry& e : rank.last_entries()) {
    std::string what = e.purpose() == "bucket" && !e.ddp_params().empty()
                           ? absl::StrFormat("bucket %d, iter %d", e.bucket(), e.iteration())
                       : e.purpose() == "bucket" ? absl::StrFormat("bucket %d", e.bucket())
                                                 : e.purpose();
    if (!e.process_group().empty() && e.purpose() == "untagged") {
      what = "process group " + e.process_group();
    }
    if (e.shadow()) what += " (shadow)";
    std::string time = e.state() == "completed"
                           ? absl::StrFormat("%.3f ms", e.duration_ms())
                           : absl::StrFormat("waited %.3f s", e.waited_ms() / 1000);
    if (e.state() == "scheduled" && e.waited_ms() == 0) time = "-";  // gloo records no times
    const std::string size = e.shape().empty() ? std::to_string(e.count()) : e.shape();
    std::cout << absl::StrFormat("  %6d  %-16s  %-8s  %10s  %-18s  %-9s  %s\n", e.seq(), e.op(),
                                 e.dtype(), size, what, e.state(), time);
  }
}

// The stack that issued a finding's collective (PyTorch's pickle dumps keep one).
void PrintStack(const jobs::FrFinding& f) {
  if (f.stack().empty()) return;
  // A missing call's stack is where the ranks that issued it were; a mismatch's, the culprit's.
  std::cout << absl::StrFormat(
      "  issued at (rank %d%s):\n", f.stack_rank(),
      f.kind() == "missing" ? ", which the missing rank never matched" : "");
  for (const std::string& frame : f.stack()) std::cout << "    " << frame << "\n";
}

// PyTorch's dumps: how many collectives matched, and the verdicts of those that did not.
void PrintCollectives(const jobs::FlightRecorderAnalysis& a) {
  if (a.collectives().empty()) return;
  std::map<std::string, int> counts;
  for (const jobs::FrCollective& c : a.collectives()) ++counts[c.verdict()];
  std::vector<std::string> parts;
  for (const auto& [verdict, n] : counts) {
    parts.push_back(absl::StrFormat("%d %s", n, absl::StrReplaceAll(verdict, {{"_", " "}})));
  }
  std::cout << absl::StrFormat("\ncollectives compared (as PyTorch's analyser): %d: %s\n",
                               a.collectives_size(), absl::StrJoin(parts, ", "));
  for (const jobs::FrCollective& c : a.collectives()) {
    if (c.verdict() == "fully_matched") continue;
    std::string line =
        absl::StrFormat("  process group %s seq %d %s: %s", c.process_group(), c.seq(), c.op(),
                        absl::StrReplaceAll(c.verdict(), {{"_", " "}}));
    if (!c.missing_ranks().empty()) {
      absl::StrAppend(&line, "; missing ranks ", absl::StrJoin(c.missing_ranks(), ", "));
    }
    for (const jobs::FrMismatch& m : c.mismatches()) {
      absl::StrAppendFormat(&line, "; rank %d: %s", m.rank(), m.detail());
    }
    std::cout << line << "\n";
  }
}

void PrintAnalysis(const jobs::FlightRecorderAnalysis& a) {
  int dumped = 0;
  for (const jobs::FrRank& r : a.ranks()) dumped += r.dumped();
  std::cout << absl::StrFormat("ddpkit fr analyze %s: %d of %d rank(s) left a dump (%s)\n\n",
                               a.dir(), dumped, a.world_size(), a.source())
            << "diagnosis: " << a.diagnosis() << "\n";
  if (!a.findings().empty()) PrintStack(a.findings(0));
  for (int i = 1; i < a.findings_size(); ++i) std::cout << "also: " << a.findings(i).text() << "\n";
  PrintCollectives(a);
  std::cout << "\nlast collectives per rank (oldest first):\n";
  for (const jobs::FrRank& r : a.ranks()) {
    if (!r.dumped()) {
      std::cout << absl::StrFormat("rank %d: no dump\n", r.rank());
      continue;
    }
    const std::string completed =
        r.last_completed_seq() < 0
            ? std::string("no completion recorded")
            : absl::StrFormat("last completed seq %d", r.last_completed_seq());
    std::cout << absl::StrFormat("rank %d: last issued seq %d, %s%s%s\n", r.rank(), r.last_seq(),
                                 completed, r.reason().empty() ? "" : "; ", FirstLine(r.reason()));
    PrintEntries(r);
  }
}

int RunFr(const std::vector<std::string>& positionals) {
  if (positionals.size() != 2 || positionals[0] != "analyze") {
    return Fail("fr", absl::InvalidArgumentError(
                          "name what to do: 'ddpkit fr analyze DIR [--json]' (DIR holds the "
                          "ranks' ddpkit_fr.rank<r>.json, or PyTorch's dumps, JSON or pickle, "
                          "one per rank)"));
  }
  absl::StatusOr<jobs::FlightRecorderAnalysis> analysis =
      jobs::AnalyzeFlightRecorders(positionals[1], 8, absl::GetFlag(FLAGS_plan));
  if (!analysis.ok()) {
    return Fail("fr",
                absl::Status(absl::StatusCode::kInvalidArgument, analysis.status().message()));
  }
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(*analysis);
  } else {
    PrintAnalysis(*analysis);
  }
  return kExitOk;
}

}  // namespace

Subcommand FrSubcommand() {
  return {.name = "fr",
          .summary = "analyse the ranks' flight-recorder dumps: which collective, which rank",
          .usage = "ddpkit fr analyze DIR [--plan FILE] [--json]",
          .flag_names = {"json", "plan"},
          .takes_positionals = true,
          .run = RunFr};
}

}  // namespace ddpkit::cli
