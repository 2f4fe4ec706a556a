// `ddpkit fr analyze DIR`: what the ranks' flight-recorder dumps say, read side by side.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "tools/cli/commands.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/fr/analyze.h"

namespace ddpkit::cli {
namespace {

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

void PrintEntries(const jobs::FrRank& rank) {
  std::cout << absl::StrFormat("  %6s  %-16s  %-8s  %10s  %-18s  %-9s  %s\n", "seq", "op", "dtype",
                               "count", "for", "state", "time");
  for (const jobs::FrEntry& e : rank.last_entries()) {
    std::string what =
        e.purpose() == "bucket" ? absl::StrFormat("bucket %d", e.bucket()) : e.purpose();
    if (!e.process_group().empty()) what = "process group " + e.process_group();
    if (e.shadow()) what += " (shadow)";
    std::string time = e.state() == "completed"
                           ? absl::StrFormat("%.3f ms", e.duration_ms())
                           : absl::StrFormat("waited %.3f s", e.waited_ms() / 1000);
    if (e.state() == "scheduled" && e.waited_ms() == 0) time = "-";  // gloo records no times
    std::cout << absl::StrFormat("  %6d  %-16s  %-8s  %10d  %-18s  %-9s  %s\n", e.seq(), e.op(),
                                 e.dtype(), e.count(), what, e.state(), time);
  }
}

void PrintAnalysis(const jobs::FlightRecorderAnalysis& a) {
  int dumped = 0;
  for (const jobs::FrRank& r : a.ranks()) dumped += r.dumped();
  std::cout << absl::StrFormat("ddpkit fr analyze %s: %d of %d rank(s) left a dump (%s)\n\n",
                               a.dir(), dumped, a.world_size(), a.source())
            << "diagnosis: " << a.diagnosis() << "\n";
  for (int i = 1; i < a.findings_size(); ++i) std::cout << "also: " << a.findings(i).text() << "\n";
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
                          "ranks' ddpkit_fr.rank<r>.json, or PyTorch's JSON dumps, one per rank)"));
  }
  absl::StatusOr<jobs::FlightRecorderAnalysis> analysis =
      jobs::AnalyzeFlightRecorders(positionals[1]);
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
          .usage = "ddpkit fr analyze DIR [--json]",
          .flag_names = {"json"},
          .takes_positionals = true,
          .run = RunFr};
}

}  // namespace ddpkit::cli
