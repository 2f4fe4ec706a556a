// `ddpkit simulate`: DDP's step on 2 ... 1,024 ranks, predicted from a model and two profiles
// (compute and network); docs/simulate.md says how a step is modelled and what is left out.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/cli/comm_flags.h"
#include "tools/cli/commands.h"
#include "tools/cli/ddp_flags.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/cli/trace_flags.h"
#include "tools/jobs/simulate/calibrate.h"
#include "tools/jobs/simulate/compute.h"
#include "tools/jobs/simulate/simulate.h"

ABSL_FLAG(std::string, simulate_world_sizes, "2,8,64,1024", "world sizes to simulate: N[,N...]");
ABSL_FLAG(std::string, param_table, "",
          "a parameter table instead of --model: NAME DTYPE AxB FLOPS per line "
          "(tests/testdata/simulate/)");
ABSL_FLAG(std::string, network, "eth100",
          "preset (dgx-a100-ib200, v100-nvlink-ib100, eth100, eth10) and/or key=value,... "
          "(algo=ring|tree|hierarchical, latency_us, GBps, gbps, node, intra_latency_us, "
          "intra_GBps), measured=FILE[+FILE...] (bench allreduce --json), or trace=FILE (a "
          "ddpkit --trace's bucket allreduces)");
ABSL_FLAG(std::string, compute, "a100",
          "gflops=X, a device preset (v100, a100, h100), or trace=FILE (a ddpkit --trace)");
ABSL_FLAG(std::string, calibrate, "",
          "FILE[,FILE...]: measure the compute profile, the allreduce alone and how much the two "
          "slow each other when they overlap from one traced run: a ddpkit --trace (or several, "
          "runs of one job at different bucket caps, to price more bucket sizes), or PyTorch "
          "profiler traces (one per rank, or their folder; with --torch-plan). --compute, "
          "--network and --interference given beside it replace their part");
ABSL_FLAG(std::string, interference, "",
          "comm=X,compute=Y: the speed of a collective while backward runs beside it, and of "
          "backward while a collective runs, as fractions of their own (default 1: independent; "
          "--calibrate measures them)");
ABSL_FLAG(bool, sweep_caps, false, "also sweep bucket_cap_mb 1..200 per world size");
ABSL_FLAG(int32_t, no_sync_every, 1, "K: synchronise every K-th micro-batch (no_sync between)");
ABSL_FLAG(std::string, hook, "none", "communication hook: none, fp16, powersgd:R");
ABSL_FLAG(double, collective_share, 1,
          "with --round-robin-groups K: the part of the link one collective alone fills, so that "
          "collectives running at once each go at min(1, 1 / (running x share)) of their speed "
          "alone (1: one fills it, the groups only split it; `bench allreduce "
          "--round-robin-groups K` measures it)");
ABSL_FLAG(std::string, svg, "", "write the largest world's simulated step as a timeline SVG");
ABSL_DECLARE_FLAG(std::string, params);

namespace ddpkit::cli {
namespace {

absl::StatusOr<std::vector<int>> WorldSizes() {
  std::vector<int> sizes;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_simulate_world_sizes), ',')) {
    int n;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      return absl::InvalidArgumentError(
          StrCat("--world-size: '", std::string(part), "' is not a positive integer"));
    }
    sizes.push_back(n);
  }
  return sizes;
}

absl::StatusOr<jobs::sim::Hook> HookFromFlag() {
  const std::string text = absl::GetFlag(FLAGS_hook);
  jobs::sim::Hook hook;
  if (text == "none") return hook;
  if (text == "fp16") return jobs::sim::Hook{.kind = jobs::sim::Hook::kFp16};
  if (absl::StartsWith(text, "powersgd:") && absl::SimpleAtoi(text.substr(9), &hook.rank) &&
      hook.rank > 0) {
    hook.kind = jobs::sim::Hook::kPowerSgd;
    return hook;
  }
  return absl::InvalidArgumentError(
      StrCat("--hook: '", text, "' is none of none, fp16, powersgd:R"));
}

// --params FILE (a plan file), --param-table FILE, or --model mlp:...
absl::StatusOr<jobs::sim::SimModel> ModelFromFlags() {
  const std::string params = absl::GetFlag(FLAGS_params);
  const std::string table = absl::GetFlag(FLAGS_param_table);
  const int batch = absl::GetFlag(FLAGS_batch_size);
  if (!params.empty() && !table.empty()) {
    return absl::InvalidArgumentError("--params and --param-table: give one");
  }
  if (!params.empty()) return jobs::sim::FromPlanFile(params, batch);
  if (!table.empty()) return jobs::sim::FromParamTable(table, batch);
  return jobs::sim::FromMlpSpec(absl::GetFlag(FLAGS_model), batch);
}

// --interference comm=X,compute=Y, each in (0, 1].
absl::Status InterferenceFromFlag(jobs::sim::Interference& rates) {
  const std::string text = absl::GetFlag(FLAGS_interference);
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(text, ','))) {
    std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    double v = 0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &v) || v <= 0 || v > 1 ||
        (kv[0] != "comm" && kv[0] != "compute")) {
      return absl::InvalidArgumentError(
          StrCat("--interference: '", part, "' is not comm=X or compute=X with 0 < X <= 1"));
    }
    (kv[0] == "comm" ? rates.comm_rate : rates.compute_rate) = v;
  }
  return absl::OkStatus();
}

// The compute and network profiles and their interference: --calibrate's, with the parts
// given by --compute, --network or --interference replaced.
absl::Status ProfilesFromFlags(jobs::SimulateConfig& c) {
  const std::string calibrate = absl::GetFlag(FLAGS_calibrate);
  if (!calibrate.empty()) {
    DDPKIT_ASSIGN_OR_RETURN(const trace::TraceView view,
                            ReadTracesWithPlan(absl::StrSplit(calibrate, ',')));
    DDPKIT_ASSIGN_OR_RETURN(const jobs::sim::Hook hook, HookFromFlag());
    DDPKIT_ASSIGN_OR_RETURN(jobs::sim::Calibration cal,
                            jobs::sim::Calibrate(view, calibrate, c.model, hook));
    c.network = std::move(cal.network), c.interference = cal.interference;
    c.replays = std::move(cal.replays), c.calibration_world = cal.world_size;
    c.calibration = std::move(cal.summary);
    c.priced_min_bytes = cal.priced_min_bytes, c.priced_max_bytes = cal.priced_max_bytes;
    c.unpriced_bytes = std::move(cal.unpriced_bytes);
  }
  // A compute profile given replaces the replayed iterations' compute; a network given has no
  // pace of its own to replay.
  if (calibrate.empty() || FlagGiven("compute")) {
    DDPKIT_RETURN_IF_ERROR(jobs::sim::ApplyCompute(c.model, absl::GetFlag(FLAGS_compute)));
    c.replays.clear();
  }
  if (calibrate.empty() || FlagGiven("network")) {
    DDPKIT_ASSIGN_OR_RETURN(c.network, jobs::sim::ParseNetwork(absl::GetFlag(FLAGS_network)));
    for (jobs::sim::Replay& r : c.replays) r.comm_excess_us = 0;  // it was over the fit replaced
    c.priced_min_bytes = c.priced_max_bytes = 0;
  }
  if (FlagGiven("interference")) DDPKIT_RETURN_IF_ERROR(InterferenceFromFlag(c.interference));
  // The run predicted again is the run as measured: not with a network or rates it did not have.
  if (FlagGiven("network") || FlagGiven("interference")) c.calibration_world = 0;
  return absl::OkStatus();
}

absl::StatusOr<jobs::SimulateConfig> ConfigFromFlags() {
  jobs::SimulateConfig c;
  DDPKIT_ASSIGN_OR_RETURN(c.model, ModelFromFlags());
  DDPKIT_RETURN_IF_ERROR(ProfilesFromFlags(c));
  DDPKIT_ASSIGN_OR_RETURN(c.world_sizes, WorldSizes());
  DDPKIT_ASSIGN_OR_RETURN(c.hook, HookFromFlag());
  DDPKIT_ASSIGN_OR_RETURN(c.ddp, DdpCapsFromFlags(c.model.recorded_rules));
  c.ddp.find_unused_parameters = absl::GetFlag(FLAGS_find_unused_parameters);
  c.ddp.static_graph = absl::GetFlag(FLAGS_static_graph);
  c.ddp.gradient_as_bucket_view = absl::GetFlag(FLAGS_gradient_as_bucket_view);
  c.sweep_caps = absl::GetFlag(FLAGS_sweep_caps);
  c.no_sync_every = absl::GetFlag(FLAGS_no_sync_every);
  c.streams = {.groups = absl::GetFlag(FLAGS_round_robin_groups),
               .share = absl::GetFlag(FLAGS_collective_share)};
  c.svg_path = absl::GetFlag(FLAGS_svg);
  return c;
}

// One world's cap sweep; caps within 0.1% of the best are named as ties, and a sweep where
// every cap ties says the cap does not matter rather than crowning the smallest.
void PrintSweep(const jobs::CapSweep& s) {
  if (s.tied_caps_mb_size() + 1 == s.points_size() && s.points_size() > 1) {
    std::cout << absl::StrFormat(
        "\nworld %d: every bucket_cap_mb gives %.3f ms per micro-batch (within 0.1%%): the cap "
        "does not matter here;",
        s.world_size(), s.best_step_ms());
  } else {
    std::cout << absl::StrFormat(
        "\nworld %d: best bucket_cap_mb %g (%.3f ms per micro-batch%s);", s.world_size(),
        s.best_bucket_cap_mb(), s.best_step_ms(),
        s.tied_caps_mb().empty()
            ? ""
            : StrCat(", tied within 0.1% by ", absl::StrJoin(s.tied_caps_mb(), ", ")));
  }
  for (const jobs::SimPoint& p : s.points()) {
    std::cout << absl::StrFormat(" %g:%.3f", p.bucket_cap_mb(), p.iteration_ms());
  }
}

// A step that is almost all communication has nothing for buckets to overlap with: say so, and
// what would change it, instead of leaving a reader to puzzle over 1% efficiency.
void PrintComputeNote(const jobs::SimulateReport& r) {
  if (r.worlds().empty()) return;
  const jobs::SimPoint& p = r.worlds(0);
  if (p.step_ms() <= 0 || p.compute_ms() >= 0.05 * p.step_ms()) return;
  std::cout << absl::StrFormat(
      "\nnote: compute is %.1f%% of world %d's step: at this batch size the model is all "
      "communication and there is no backward to overlap it with (a larger --batch-size, a "
      "slower --compute, or a PyTorch model's --params shows overlap)\n",
      100 * p.compute_ms() / p.step_ms(), p.world_size());
}

// The interference the step was simulated with, and what --calibrate measured, when any.
std::string InterferenceLine(const jobs::SimulateReport& r) {
  std::string line;
  if (r.interference_comm_rate() != 1 || r.interference_compute_rate() != 1) {
    line = absl::StrFormat(
        "  interference: a collective beside backward at %.2fx its speed, backward beside a "
        "collective at %.2fx\n",
        r.interference_comm_rate(), r.interference_compute_rate());
  }
  if (r.round_robin_groups() > 1) {
    line += absl::StrFormat(
        "  streams: %d round-robin groups, collective i on group i mod %d; one collective fills "
        "%.2f of the link, so %s\n",
        r.round_robin_groups(), r.round_robin_groups(), r.collective_share(),
        r.collective_share() >= 1
            ? "collectives running at once only split it"
            : absl::StrFormat("up to %.1f run at once at full speed", 1 / r.collective_share()));
  }
  if (!r.calibration().empty()) line += StrCat("  calibration: ", r.calibration(), "\n");
  if (r.replay_iterations() > 0 && r.replay_measured_ms() > 0) {
    const double error = 100 * (r.replay_predicted_ms() / r.replay_measured_ms() - 1);
    line += absl::StrFormat(
        "  the calibration run predicted again (its %d iterations at the bucket plans they ran, "
        "optimizer left out): %.3f ms against %.3f ms measured, %+.1f%% — the model's error on "
        "the run it learned from; its steps spread %.1f%% from one iteration to the next "
        "(interquartile range over the median): the noisier the run, the less close a "
        "prediction from it (docs/simulate.md, the validation by spread)\n",
        r.replay_iterations(), r.replay_predicted_ms(), r.replay_measured_ms(), error,
        100 * r.replay_spread());
  } else if (!r.replay_note().empty()) {
    line += StrCat("  the calibration run predicted again: ", r.replay_note(), "\n");
  }
  if (!r.price_note().empty()) line += StrCat("  price: ", r.price_note(), "\n");
  if (!r.ddp_options().empty()) line += StrCat("  DDP options: ", r.ddp_options(), "\n");
  return line;
}

void PrintText(const jobs::SimulateReport& r) {
  std::cout << absl::StrFormat(
      "Simulated DDP step: %s (%d parameters, %.1f MB), hook %s, no_sync every %d\n"
      "  compute: %s — forward %.3f ms, backward %.3f ms%s, optimizer %.3f ms\n"
      "  grad-ready order: %s\n  network: %s\n  (%s)\n%s  buckets planned as %s%s\n\n",
      r.model(), r.parameter_tensors(), r.parameter_bytes() / 1e6, r.hook(), r.no_sync_every(),
      r.compute(), r.forward_ms() + r.unused_search_ms(), r.backward_ms(),
      r.finalize_ms() > 0 ? absl::StrFormat(", finalize's copies %.3f ms", r.finalize_ms()) : "",
      r.optimizer_ms(), r.grad_ready_order(), r.network(), r.network_source(), InterferenceLine(r),
      r.pytorch_rules(),
      r.pytorch_rules_note().empty() ? "" : StrCat(" (", r.pytorch_rules_note(), ")"));
  // The column of what interference added to backward, only when there is some.
  const bool slowed = r.interference_comm_rate() != 1 || r.interference_compute_rate() != 1;
  std::cout << absl::StrFormat("%6s %7s %7s %10s %10s %s%10s %10s %10s %10s %10s %6s\n", "world",
                               "cap MB", "buckets", "step ms", "compute",
                               slowed ? absl::StrFormat("%10s ", "slowed") : "", "comm", "exposed",
                               "overlapped", "iter 0 ms", "per micro", "eff");
  for (const jobs::SimPoint& p : r.worlds()) {
    std::cout << absl::StrFormat(
        "%6d %7g %7d %10.3f %10.3f %s%10.3f %10.3f %10.3f %10.3f %10.3f %5.1f%%\n", p.world_size(),
        p.bucket_cap_mb(), p.buckets(), p.step_ms(), p.compute_ms(),
        slowed ? absl::StrFormat("%10.3f ", p.slowdown_ms()) : "", p.comm_ms(), p.exposed_ms(),
        p.overlapped_ms(), p.first_step_ms(), p.iteration_ms(), 100 * p.scaling_efficiency());
  }
  for (const jobs::CapSweep& s : r.sweeps()) PrintSweep(s);
  if (!r.sweeps().empty()) std::cout << "\n";
  PrintComputeNote(r);
  if (!r.svg_path().empty()) std::cout << "\ntimeline written to " << r.svg_path() << "\n";
  std::cout << absl::StrFormat("\n(simulated in %.1f ms)\n", r.simulate_ms());
}

int RunSimulate(const std::vector<std::string>&) {
  absl::StatusOr<jobs::SimulateConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail("simulate", config.status());
  absl::StatusOr<jobs::SimulateReport> report = jobs::Simulate(*config);
  if (!report.ok()) return Fail("simulate", report.status());
  return EmitReport<jobs::SimulateReport>(*report, absl::GetFlag(FLAGS_json), PrintText);
}

}  // namespace

Subcommand SimulateSubcommand() {
  return {.name = "simulate",
          .summary = "predict DDP's step on 2 ... 1,024 ranks from compute and network profiles",
          .usage =
              "ddpkit simulate --params FILE | --model mlp:... | --param-table FILE --world-size "
              "N[,N...] "
              "[--network ...] [--compute ...] [--calibrate TRACE [--torch-plan PLAN]] "
              "[--interference comm=X,compute=Y] [--bucket-cap-mb X | --sweep-caps] "
              "[--find-unused-parameters] [--static-graph] [--gradient-as-bucket-view] "
              "[--no-sync-every K] [--hook fp16|powersgd:R] "
              "[--round-robin-groups K [--collective-share X]] [--svg FILE] [--json]",
          .flag_names = {"params",
                         "model",
                         "param_table",
                         "batch_size",
                         "world_size",
                         "network",
                         "compute",
                         "calibrate",
                         "torch_plan",
                         "interference",
                         "find_unused_parameters",
                         "static_graph",
                         "gradient_as_bucket_view",
                         "pytorch_version",
                         "bucket_cap_mb",
                         "first_bucket_mb",
                         "bucket_cap_mb_list",
                         "sweep_caps",
                         "no_sync_every",
                         "hook",
                         "round_robin_groups",
                         "collective_share",
                         "svg",
                         "json"},
          .flag_aliases = {{"world_size", "simulate_world_sizes"}},
          .run = RunSimulate};
}

}  // namespace ddpkit::cli
