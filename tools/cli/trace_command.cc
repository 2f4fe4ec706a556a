// `ddpkit trace stats|svg|merge`: reading the traces `--trace FILE` writes, and PyTorch's
// profiler traces (tools/trace/torch_profiler.h).
#include <algorithm>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/base/file_util.h"
#include "tools/cli/commands.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/cli/trace_flags.h"
#include "tools/trace/merge.h"
#include "tools/trace/read_traces.h"
#include "tools/trace/session.h"
#include "tools/trace/stats.h"
#include "tools/trace/timeline.h"

ABSL_FLAG(std::string, iterations, "",
          "trace svg: the iterations A:B to draw, A included, B not (as a Python slice); by "
          "default 1:4, leaving out iteration 0's warm-up (0:3 draws it)");

namespace ddpkit::cli {
namespace {

constexpr char kUsage[] =
    "name what to do: 'ddpkit trace stats FILE... [--json]', 'ddpkit trace svg FILE... --out "
    "timeline.svg [--iterations A:B]' or 'ddpkit trace merge FILE' (FILE.rank<r>.json -> FILE); "
    "FILE... is one ddpkit trace, or PyTorch profiler traces (a file per rank, or their folder)";

double Ms(double us) { return us / 1000; }

void PrintStats(const trace::TraceStatsReport& r) {
  std::cout << absl::StrFormat("ddpkit trace stats %s: %s, %d rank(s), %s\n\n", r.file(), r.job(),
                               r.world_size(), r.backend())
            << absl::StrFormat("%9s %4s %9s %9s %9s %9s %8s %9s %9s %9s  %s\n", "iteration", "rank",
                               "window", "compute", "comm", "overlap", "overlap%", "exposed",
                               "idle", "finalize", "bucket waits at finalize (ms)");
  for (const trace::IterationStats& s : r.iterations()) {
    std::vector<std::string> waits;
    for (const trace::BucketWait& w : s.buckets()) {
      waits.push_back(absl::StrFormat("b%d %.3f", w.bucket(), Ms(w.wait_us())));
    }
    std::cout << absl::StrFormat(
        "%9d %4d %9.3f %9.3f %9.3f %9.3f %7.0f%% %9.3f %9.3f %9.3f  %s\n", s.iteration(), s.rank(),
        Ms(s.window_us()), Ms(s.compute_us()), Ms(s.comm_us()), Ms(s.overlap_us()), s.overlap_pct(),
        Ms(s.exposed_us()), Ms(s.idle_us()), Ms(s.finalize_us()), absl::StrJoin(waits, "  "));
  }
  std::cout << "\nper rank, over its synced iterations (ms; DDP's logging-data figures as "
               "averages):\n"
            << absl::StrFormat("%4s %10s %10s %10s %10s %8s %10s %10s   %8s %8s %8s\n", "rank",
                               "iterations", "compute", "comm", "overlap", "overlap%", "exposed",
                               "idle", "ddp_comm", "ddp_ovl", "ddp_exp");
  for (const trace::RankTotals& t : r.ranks()) {
    std::cout << absl::StrFormat(
        "%4d %10d %10.3f %10.3f %10.3f %7.0f%% %10.3f %10.3f   %8.3f %8.3f %8.3f\n", t.rank(),
        t.iterations(), Ms(t.compute_us()), Ms(t.comm_us()), Ms(t.overlap_us()), t.overlap_pct(),
        Ms(t.exposed_us()), Ms(t.idle_us()), Ms(t.avg_ddp_comm_us()), Ms(t.avg_ddp_overlap_us()),
        Ms(t.avg_ddp_exposed_us()));
  }
  std::cout << "\nslowest rank per iteration (its window, and how much longer than the fastest):\n";
  for (const trace::SlowestRank& s : r.slowest()) {
    std::cout << absl::StrFormat("  iteration %d: rank %d, %.3f ms (+%.3f ms)\n", s.iteration(),
                                 s.rank(), Ms(s.window_us()), Ms(s.spread_us()));
  }
  std::cout << "\noverlap% = time computation and communication both ran / communication time "
               "(HTA's definition);\nexposed = communication nothing hid; docs/inspect.md defines "
               "every column.\n";
}

absl::StatusOr<std::pair<int, int>> ParseIterations(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int a = 0, b = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &a) || !absl::SimpleAtoi(parts[1], &b) ||
      a < 0 || b <= a) {
    return absl::InvalidArgumentError(StrCat(
        "--iterations: '", text, "' is not A:B with 0 <= A < B (iterations A to B-1, e.g. 0:3)"));
  }
  return std::pair{a, b};
}

int RunStats(const std::vector<std::string>& paths) {
  absl::StatusOr<trace::TraceView> view = ReadTracesWithPlan(paths);
  if (!view.ok()) return Fail("trace", view.status());
  trace::TraceStatsReport report = trace::ComputeTraceStats(*view);
  report.set_file(absl::StrJoin(paths, " "));
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(report);
  } else {
    PrintStats(report);
  }
  return kExitOk;
}

// The last iteration any rank's trace reaches (-1 for none).
int LastIteration(const trace::TraceView& view) {
  int last = -1;
  for (const trace::RankView& rank : view.ranks) {
    for (const trace::TraceItem& phase : rank.phases) last = std::max(last, phase.iteration);
  }
  return last;
}

// Without --iterations: 1:4, as iteration 0 is the warm-up (first-touch allocations, the plan
// not yet rebuilt) and would take most of the picture; 0:1 for a trace of one iteration.
absl::StatusOr<std::pair<int, int>> IterationsToDraw(const trace::TraceView& view) {
  const std::string text = absl::GetFlag(FLAGS_iterations);
  if (!text.empty()) return ParseIterations(text);
  if (LastIteration(view) < 1) return std::pair{0, 1};
  std::cout << "iteration 0, the warm-up, left out (--iterations 0:3 draws it)\n";
  return std::pair{1, 4};
}

int RunSvg(const std::vector<std::string>& paths) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("trace", absl::InvalidArgumentError("trace svg needs --out FILE"));
  if (const std::string text = absl::GetFlag(FLAGS_iterations); !text.empty()) {
    if (absl::Status s = ParseIterations(text).status(); !s.ok()) return Fail("trace", s);
  }
  absl::StatusOr<trace::TraceView> view = ReadTracesWithPlan(paths);
  if (!view.ok()) return Fail("trace", view.status());
  absl::StatusOr<std::pair<int, int>> range = IterationsToDraw(*view);
  if (!range.ok()) return Fail("trace", range.status());
  absl::StatusOr<std::string> svg =
      trace::TimelineSvg(*view, {.first_iteration = range->first, .end_iteration = range->second});
  if (!svg.ok()) return Fail("trace", svg.status());
  if (absl::Status s = WriteFileAtomically(out, *svg); !s.ok()) return Fail("trace", s);
  std::cout << "wrote " << out << "\n";
  return kExitOk;
}

// `merge FILE`: FILE.rank<r>.json -> FILE; `merge --out FILE A B ...`: the named files.
int RunMerge(const std::vector<std::string>& files) {
  std::string out = absl::GetFlag(FLAGS_out);
  std::vector<std::string> inputs = files;
  if (out.empty() && files.size() == 1) {
    out = files[0];
    inputs = trace::RankFilesOf(files[0]);
    if (inputs.empty()) {
      return Fail("trace",
                  absl::NotFoundError(StrCat("no ", trace::TraceSession::RankPath(files[0], 0),
                                             ": merge reads FILE.rank<r>.json")));
    }
  }
  if (out.empty()) {
    return Fail("trace", absl::InvalidArgumentError("trace merge FILE, or --out FILE A B ..."));
  }
  absl::StatusOr<int> ranks = trace::MergeTraceFiles(inputs, out);
  if (!ranks.ok()) return Fail("trace", ranks.status());
  std::cout << "merged " << *ranks << " rank(s) into " << out << "\n";
  return kExitOk;
}

int RunTrace(const std::vector<std::string>& positionals) {
  if (positionals.size() < 2) return Fail("trace", absl::InvalidArgumentError(kUsage));
  const std::string& what = positionals[0];
  const std::vector<std::string> files(positionals.begin() + 1, positionals.end());
  if (what == "stats") return RunStats(files);
  if (what == "svg") return RunSvg(files);
  if (what == "merge") return RunMerge(files);
  return Fail("trace", absl::InvalidArgumentError(kUsage));
}

}  // namespace

Subcommand TraceSubcommand() {
  return {.name = "trace",
          .summary =
              "read a --trace file or PyTorch profiler traces: overlap statistics, a "
              "timeline picture, merging ranks",
          .usage =
              "ddpkit trace stats FILE... [--json] [--torch-plan PLAN]\n       ddpkit trace svg "
              "FILE... --out timeline.svg [--iterations A:B]\n       ddpkit trace merge FILE | "
              "--out FILE FILE.rank0.json FILE.rank1.json ...\n(FILE...: a ddpkit --trace file, "
              "or PyTorch profiler traces: one per rank, or their folder)",
          .flag_names = {"json", "out", "iterations", "torch_plan"},
          .takes_positionals = true,
          .run = RunTrace};
}

}  // namespace ddpkit::cli
