// `ddpkit bench ddp|allreduce`: measurements beside references taken in the same run
// (tools/jobs/bench/), printed as tables — allreduce in nccl-tests' columns — or as JSON.
#include <chrono>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/cli/comm_flags.h"
#include "tools/cli/commands.h"
#include "tools/cli/ddp_flags.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/bench/bench.h"

ABSL_FLAG(int64_t, min_bytes, 1024, "allreduce: smallest message size in bytes");
ABSL_FLAG(int64_t, max_bytes, 16 << 20, "allreduce: largest message size in bytes (sizes double)");
ABSL_FLAG(int32_t, iters, 20, "timed iterations per measurement");
ABSL_FLAG(int32_t, warmup_iters, 5, "untimed iterations per measurement");
ABSL_FLAG(std::string, bucket_caps, "0.5,1,5,10,25,50",
          "ddp: bucket_cap_mb values for the sweep (paper: 0,0.5,1,5,10,25,50,100; 0 there is one "
          "bucket per parameter)");
ABSL_FLAG(std::string, sync_every, "1,2,4,8",
          "paper: K values, an allreduce every K-th micro-batch (no_sync between); starts with 1");

namespace ddpkit::cli {
namespace {

// `allow_zero`: bench paper, where 0 stands for one bucket per parameter.
absl::StatusOr<std::vector<double>> ParseCaps(const std::string& text, bool allow_zero = false) {
  std::vector<double> caps;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double cap;
    if (!absl::SimpleAtod(part, &cap) || !(cap > 0 || (allow_zero && cap == 0))) {
      return absl::InvalidArgumentError(StrCat("--bucket-caps: '", std::string(part), "' is not a ",
                                               allow_zero ? "number >= 0" : "positive number"));
    }
    caps.push_back(cap);
  }
  return caps;
}

absl::StatusOr<std::vector<int>> ParseSyncEvery(const std::string& text) {
  std::vector<int> ks;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int k;
    if (!absl::SimpleAtoi(part, &k) || k < 1) {
      return absl::InvalidArgumentError(
          StrCat("--sync-every: '", std::string(part), "' is not a whole number >= 1"));
    }
    ks.push_back(k);
  }
  return ks;
}

void PrintDdp(const jobs::BenchDdpReport& r) {
  std::cout << absl::StrFormat(
      "# ddpkit bench ddp: %s, %d parameter tensors (%d bytes), batch %d per rank, backend %s, "
      "world size %d, %s\n# median of %d steps (forward + backward, grads zeroed to none) after "
      "%d warm-up steps; the slowest rank's median\n#\n",
      r.model(), r.parameter_tensors(), r.parameter_bytes(), r.batch_size(), r.backend(),
      r.world_size(), r.pytorch_rules(), r.iters(), r.warmup_iters());
  std::cout << absl::StrFormat("%-34s %10.3f ms\n", "local step (no DDP, reference)",
                               r.local_step_ms())
            << absl::StrFormat("%-34s %10.3f ms   ratio %.3f  (%d bucket(s) after the rebuild)\n",
                               "DDP step (default options)", r.ddp_step_ms(),
                               r.ddp_step_ms() / r.local_step_ms(), r.buckets())
            << absl::StrFormat("%-34s %10.3f ms   ratio %.3f  vs local zeroing in place, %.3f ms\n",
                               "DDP step (bucket views, in place)", r.view_ddp_step_ms(),
                               r.view_ddp_step_ms() / r.view_local_step_ms(),
                               r.view_local_step_ms())
            << absl::StrFormat("%-34s %10.3f ms\n", "exposed comm (DDP - local)",
                               r.ddp_step_ms() - r.local_step_ms())
            << absl::StrFormat("%-34s %10.3f ms   (first launch -> last bucket reduced, avg)\n",
                               "total allreduce time", r.comm_ms())
            << absl::StrFormat("%-34s %10.3f ms   (avg)\n", "  of which overlapped backward",
                               r.overlap_ms());
  if (r.world_size() == 1) {
    std::cout << "# world size 1: the ratio is the reducer's own overhead (target <= 1.03)\n";
  }
  std::cout << absl::StrFormat("#\n# bucket-cap sweep\n%14s  %8s  %12s  %18s\n", "bucket_cap_mb",
                               "buckets", "step(ms)", "vs local (same run)");
  for (const jobs::BucketCapPoint& p : r.sweep()) {
    std::cout << absl::StrFormat("%14g  %8d  %12.3f  %18.3f\n", p.bucket_cap_mb(), p.buckets(),
                                 p.step_ms(), p.step_ms() / p.local_step_ms());
  }
}

void PrintAllreduce(const jobs::BenchAllreduceReport& r) {
  std::cout << absl::StrFormat(
      "# ddpkit bench allreduce: backend %s, world size %d, device %s, float32 sum, %d "
      "iterations (%d warm-up)\n# %s reference: %d bytes in %.1f us = %.2f GB/s\n#\n",
      r.backend(), r.world_size(), r.device(), r.iters(), r.warmup_iters(),
      r.device() == "cpu" ? "memcpy" : "device-to-device copy", r.memcpy_bytes(), r.memcpy_us(),
      r.memcpy_bytes() / r.memcpy_us() / 1e3);
  if (!r.algorithm().empty())
    std::cout << "# " << r.backend() << " allreduce: " << r.algorithm() << "\n#\n";
  std::cout << absl::StrFormat("# %10s  %12s  %6s  %5s  %10s  %11s  %11s  %6s", "size", "count",
                               "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  const bool raw = !r.raw_reference().empty();
  if (raw)
    std::cout << absl::StrFormat("  %12s  %9s", StrCat("raw_", r.raw_reference(), "(us)"), "ratio");
  const int groups = r.round_robin_groups();
  if (groups > 1)
    std::cout << absl::StrFormat("  %14s  %6s", StrCat(groups, "_at_once(us)"), "share");
  std::cout << "\n";
  for (const jobs::AllreducePoint& p : r.points()) {
    std::cout << absl::StrFormat("  %10d  %12d  %6s  %5s  %10.1f  %11.3f  %11.3f  %6d", p.bytes(),
                                 p.count(), "float", "sum", p.time_us(), p.algbw_gbps(),
                                 p.busbw_gbps(), p.wrong());
    if (raw) std::cout << absl::StrFormat("  %12.1f  %9.2f", p.raw_us(), p.time_us() / p.raw_us());
    if (groups > 1)
      std::cout << absl::StrFormat("  %14.1f  %6.2f", p.concurrent_us(), p.collective_share());
    std::cout << "\n";
  }
  std::cout << absl::StrFormat("# Avg bus bandwidth    : %.3f GB/s\n", r.avg_busbw_gbps());
  if (groups > 1) {
    std::cout << absl::StrFormat(
        "# %d_at_once = one allreduce on each of the %d round-robin groups at once, until the "
        "last is done;\n# share = that time / (%d x time): the part of the link one collective "
        "fills (1: they only split it),\n# for `ddpkit simulate --round-robin-groups %d "
        "--collective-share X`\n",
        groups, groups, groups, groups);
  }
  if (raw) {
    std::cout << "# ratio = ddpkit time / the raw " << r.raw_reference()
              << " allreduce's at the same size (target <= 1.10); each the median of 5 blocks,\n"
              << "# the two sides' blocks alternating\n";
  }
}

// bench ddp's own model when --model is not given: four 4 MB weights, so the cap sweep's rows
// hold different numbers of buckets (4, 4, 2, 2, 1, 1) and the step is long enough to overlap.
constexpr char kBenchDdpDefaultModel[] = "mlp:784,1024,1024,1024,1024,10";

int RunBenchDdp() {
  jobs::BenchDdpConfig config;
  if (absl::Status s = WorldFromFlags(config.world); !s.ok()) return Fail("bench", s);
  absl::StatusOr<std::vector<double>> caps = ParseCaps(absl::GetFlag(FLAGS_bucket_caps));
  if (!caps.ok()) return Fail("bench", caps.status());
  config.model = FlagGiven("model") ? absl::GetFlag(FLAGS_model) : kBenchDdpDefaultModel;
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.iters = absl::GetFlag(FLAGS_iters);
  config.warmup_iters = absl::GetFlag(FLAGS_warmup_iters);
  config.bucket_caps = *caps;
  config.trace_path = absl::GetFlag(FLAGS_trace);
  absl::StatusOr<reducer::DdpOptions> ddp = DdpCapsFromFlags();
  if (!ddp.ok()) return Fail("bench", ddp.status());
  config.pytorch_version = ddp->pytorch_version;
  absl::StatusOr<jobs::BenchDdpReport> report = jobs::BenchDdp(config);
  if (!report.ok()) return Fail("bench", report.status());
  return EmitReport<jobs::BenchDdpReport>(
      *report, absl::GetFlag(FLAGS_json), [&](const jobs::BenchDdpReport& r) {
        PrintDdp(r);
        if (!config.trace_path.empty()) {
          std::cout << TraceWrittenLine(config.trace_path, r.backend(), r.rank()) << "\n";
        }
      });
}

int RunBenchAllreduce() {
  jobs::BenchAllreduceConfig config;
  if (absl::Status s = WorldFromFlags(config.world); !s.ok()) return Fail("bench", s);
  if (!absl::GetFlag(FLAGS_trace).empty()) {
    return Fail("bench", absl::InvalidArgumentError(
                             "--trace records DDP's steps, and `bench allreduce` runs none: use "
                             "it with `ddpkit bench ddp` (or `ddpkit train`)"));
  }
  absl::StatusOr<Device> device = DeviceFromFlag();
  if (!device.ok()) return Fail("bench", device.status());
  config.device = *device;
  config.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  config.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  config.iters = absl::GetFlag(FLAGS_iters);
  config.warmup_iters = absl::GetFlag(FLAGS_warmup_iters);
  absl::StatusOr<jobs::BenchAllreduceReport> report = jobs::BenchAllreduce(config);
  if (!report.ok()) return Fail("bench", report.status());
  return EmitReport<jobs::BenchAllreduceReport>(*report, absl::GetFlag(FLAGS_json), PrintAllreduce);
}

std::string RangeText(double lo, double hi) { return absl::StrFormat("%.1f-%.1f", lo, hi); }

void PrintPaper(const jobs::BenchPaperReport& r) {
  std::cout << absl::StrFormat(
      "# ddpkit bench paper: %s (%d tensors, %.1f MB), batch %d per rank, %d ranks (%s); %s; %s\n"
      "# the DDP paper's experiments (Li et al., VLDB 2020, section 5); medians of %d steps, "
      "the slowest rank's\n\n",
      r.model(), r.parameter_tensors(), r.parameter_bytes() / 1e6, r.batch_size(), r.world_size(),
      r.backend(), r.thread_budget(), r.pytorch_rules(), r.iters());
  std::cout << "1. latency breakdown per step (ms)\n"
            << absl::StrFormat("%-12s %9s %10s %9s %10s %9s %15s %11s\n", "mode", "forward",
                               "backward", "exposed", "optimizer", "step", "step range",
                               "total comm");
  for (const jobs::PhaseBreakdown& b : r.breakdown()) {
    std::cout << absl::StrFormat("%-12s %9.2f %10.2f %9.2f %10.2f %9.2f %15s %11.2f\n", b.mode(),
                                 b.forward_ms(), b.backward_compute_ms(), b.exposed_comm_ms(),
                                 b.optimizer_ms(), b.step_ms(),
                                 RangeText(b.step_min_ms(), b.step_max_ms()), b.comm_ms());
  }
  std::cout << absl::StrFormat(
      "overlap makes the step %.1f%% faster (the paper: 21-39%%)\n\n"
      "2. step time against bucket_cap_mb (0: one bucket per parameter)\n%14s %8s %9s %15s "
      "%12s\n",
      100 * r.overlap_speedup(), "bucket_cap_mb", "buckets", "step(ms)", "step range",
      "exposed(ms)");
  for (const jobs::CapPoint& p : r.caps()) {
    std::cout << absl::StrFormat("%14g %8d %9.2f %15s %12.2f\n", p.bucket_cap_mb(), p.buckets(),
                                 p.step_ms(), RangeText(p.step_min_ms(), p.step_max_ms()),
                                 p.exposed_comm_ms());
  }
  std::cout << absl::StrFormat(
      "\n3. skipping synchronisation: an allreduce every K-th micro-batch, no_sync between\n"
      "%4s %18s %15s %9s\n",
      "K", "ms/micro-batch", "range", "speedup");
  for (const jobs::SyncPoint& p : r.sync()) {
    std::cout << absl::StrFormat("%4d %18.2f %15s %8.2fx\n", p.sync_every(), p.iteration_ms(),
                                 RangeText(p.iteration_min_ms(), p.iteration_max_ms()),
                                 p.speedup());
  }
  std::cout << "(ranges: the fastest and slowest of the timed steps; medians and ranges vary "
               "from run to run on a busy machine)\n";
  if (!r.svg_path().empty()) std::cout << "\nwrote " << r.svg_path() << "\n";
}

// bench paper's own defaults (BenchPaperConfig's) where the shared flags were not given.
int RunBenchPaper() {
  jobs::BenchPaperConfig config;
  if (absl::Status s = WorldFromFlags(config.world); !s.ok()) return Fail("bench", s);
  if (FlagDiffersFromDefault("bucket_caps")) {
    absl::StatusOr<std::vector<double>> caps =
        ParseCaps(absl::GetFlag(FLAGS_bucket_caps), /*allow_zero=*/true);
    if (!caps.ok()) return Fail("bench", caps.status());
    config.bucket_caps = *caps;
  }
  absl::StatusOr<std::vector<int>> sync_every = ParseSyncEvery(absl::GetFlag(FLAGS_sync_every));
  if (!sync_every.ok()) return Fail("bench", sync_every.status());
  config.sync_every = *sync_every;
  if (FlagDiffersFromDefault("model")) config.model = absl::GetFlag(FLAGS_model);
  if (FlagDiffersFromDefault("batch_size")) config.batch_size = absl::GetFlag(FLAGS_batch_size);
  if (FlagDiffersFromDefault("iters")) config.iters = absl::GetFlag(FLAGS_iters);
  if (FlagDiffersFromDefault("warmup_iters")) {
    config.warmup_iters = absl::GetFlag(FLAGS_warmup_iters);
  }
  config.out_dir = absl::GetFlag(FLAGS_out);
  absl::StatusOr<reducer::DdpOptions> ddp = DdpCapsFromFlags();
  if (!ddp.ok()) return Fail("bench", ddp.status());
  config.pytorch_version = ddp->pytorch_version;
  // Progress on stderr: the run takes a minute or more, and stdout stays the report.
  const auto start = std::chrono::steady_clock::now();
  config.progress = [start](const std::string& what) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << absl::StrFormat("bench paper: %s (at %.0f s)\n", what, s) << std::flush;
  };
  absl::StatusOr<jobs::BenchPaperReport> report = jobs::BenchPaper(config);
  if (!report.ok()) return Fail("bench", report.status());
  return EmitReport<jobs::BenchPaperReport>(*report, absl::GetFlag(FLAGS_json), PrintPaper);
}

int RunBench(const std::vector<std::string>& positionals) {
  if (positionals.size() == 1 && positionals[0] == "ddp") return RunBenchDdp();
  if (positionals.size() == 1 && positionals[0] == "allreduce") return RunBenchAllreduce();
  if (positionals.size() == 1 && positionals[0] == "paper") return RunBenchPaper();
  std::cerr << "ddpkit bench: name what to measure: 'ddpkit bench allreduce [flags]', "
               "'ddpkit bench ddp [flags]' or 'ddpkit bench paper [flags]'\n";
  return kExitUsage;
}

}  // namespace

Subcommand BenchSubcommand() {
  return {
      .name = "bench",
      .summary = "measure allreduce bandwidth, DDP's step cost, or the DDP paper's experiments",
      .usage =
          "ddpkit bench allreduce [--backend threads|gloo|mpi|nccl] [--device cpu|cuda] "
          "[--world-size N] [--round-robin-groups K] "
          "[--min-bytes B] [--max-bytes B] [--json]\n       ddpkit bench ddp "
          "[--model mlp:...|resnet:...|gpt:...] [--batch-size B] [--world-size N] "
          "[--bucket-caps 0.5,1,...] "
          "[--json]  (default model mlp:784,1024,1024,1024,1024,10)\n       ddpkit bench paper "
          "[--model mlp:...|resnet:...|gpt:...] "
          "[--batch-size B] "
          "[--world-size N] [--bucket-caps 0,0.5,...] [--sync-every 1,2,4,8] [--out DIR] "
          "[--json]  (defaults: mlp:784,2048,2048,2048,2048,10, batch 64, 10 steps, 3 "
          "warm-up)",
      .flag_names = {"backend", "world_size", "timeout", "device", "min_bytes", "max_bytes",
                     "iters", "warmup_iters", "model", "batch_size", "bucket_caps", "sync_every",
                     "out", "json", "trace", "pytorch_version", "round_robin_groups"},
      .takes_positionals = true,
      .run = RunBench};
}

}  // namespace ddpkit::cli
