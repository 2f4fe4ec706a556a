// `ddpkit chaos`: N trials of a gloo job under the launcher, a random rank signalled at a random
// moment in each; one row per trial and a summary (trials, clear errors, the longest time from
// the signal to the job's end, processes left over).
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "tools/cli/comm_flags.h"
#include "tools/cli/commands.h"
#include "tools/cli/job_flags.h"
#include "tools/cli/print_json.h"
#include "tools/jobs/chaos/chaos.h"

// With --faults: each node's launcher's --max-restarts (train then checkpoints every step).
ABSL_DECLARE_FLAG(int32_t, max_restarts);  // tools/cli/launch_command.cc

ABSL_FLAG(int32_t, trials, 50, "jobs to start, one signal each");
ABSL_FLAG(std::string, ranks, "2-4", "MIN-MAX ranks per job");
ABSL_FLAG(std::string, jobs, "train,join", "jobs to draw from: train, join");
ABSL_FLAG(std::string, signals, "KILL,STOP,TERM", "signals to draw from: KILL, STOP, TERM");
ABSL_FLAG(double, max_delay, 4, "the signal comes uniformly within this many seconds of the start");
ABSL_FLAG(double, slack, 5,
          "the target: every job ends within its --timeout + this many seconds of the signal");
ABSL_FLAG(std::string, log_dir, "ddpkit_chaos", "each trial's output: LOG_DIR/trial-N.log");
ABSL_FLAG(std::string, faults, "",
          "faults on the wire instead of signals, drawn from: link-down, loss, partition, flap, "
          "delay (each rank on a test host of its own: network namespaces, needs root)");
ABSL_FLAG(int32_t, loss_pct, 30, "with --faults loss: the percentage of packets dropped both ways");
ABSL_FLAG(int32_t, spike_ms, 2000,
          "with --faults delay: the spike, each frame held this much more each way (for "
          "--fault-for, default as long as the spike)");
ABSL_FLAG(double, fault_for, 0,
          "with --faults: seconds until the fault is lifted (0: it lasts until the job ends)");
ABSL_FLAG(std::string, fault_when, "any",
          "with --faults: when the fault comes: any (a random moment within --max-delay) or "
          "checkpoint (the first checkpoint being written after that moment; --jobs train, which "
          "then checkpoints every step)");
ABSL_FLAG(int32_t, wire_steps, 1000, "with --faults: train's steps, and join's most inputs");
ABSL_FLAG(std::string, netns_script, DDPKIT_NETNS_SCRIPT,
          "with --faults: the script that makes the test hosts");

namespace ddpkit::cli {
namespace {

constexpr char kRowFormat[] = "%5s  %-5s  %5s  %-6s  %6s  %6s  %8s  %4s  %5s  %4s  %s\n";

void PrintRow(const jobs::ChaosTrial& t) {
  std::cout << absl::StrFormat(
      kRowFormat, StrCat(t.trial()), t.job(), StrCat(t.ranks()),
      t.fault().empty() ? t.signal() : t.fault(), StrCat(t.victim()),
      absl::StrFormat("%.2f", t.signal_at_s()), absl::StrFormat("%.2f", t.ended_after_s()),
      StrCat(t.exit_code()), t.clear_error() ? "yes" : "NO", StrCat(t.left_over()), t.diagnosis());
  std::cout.flush();
}

absl::StatusOr<jobs::ChaosConfig> ConfigFromFlags() {
  jobs::ChaosConfig config;
  config.trials = absl::GetFlag(FLAGS_trials);
  // The shared flags, with chaos's own defaults: seed 1 (any fixed seed repeats a run), and a
  // 10 s timeout for each job (a trial with a stopped rank lasts about that long).
  config.seed = FlagDiffersFromDefault("seed") ? absl::GetFlag(FLAGS_seed) : 1;
  const double timeout = FlagDiffersFromDefault("timeout") ? absl::GetFlag(FLAGS_timeout) : 10;
  if (timeout != static_cast<int>(timeout) || timeout < 1) {
    return absl::InvalidArgumentError(
        StrCat("--timeout must be a whole number of seconds >= 1 for chaos, got ", timeout));
  }
  config.timeout_s = static_cast<int>(timeout);
  config.max_delay_s = absl::GetFlag(FLAGS_max_delay);
  config.log_dir = absl::GetFlag(FLAGS_log_dir);
  config.slack = absl::Seconds(absl::GetFlag(FLAGS_slack));
  const std::string ranks = absl::GetFlag(FLAGS_ranks);
  std::vector<std::string> bounds = absl::StrSplit(ranks, '-');
  if (bounds.size() == 1) bounds.push_back(bounds[0]);
  if (bounds.size() != 2 || !absl::SimpleAtoi(bounds[0], &config.min_ranks) ||
      !absl::SimpleAtoi(bounds[1], &config.max_ranks)) {
    return absl::InvalidArgumentError(
        StrCat("--ranks must be MIN-MAX, e.g. 2-4, got '", ranks, "'"));
  }
  config.jobs = absl::StrSplit(absl::GetFlag(FLAGS_jobs), ',', absl::SkipEmpty());
  config.signals = absl::StrSplit(absl::GetFlag(FLAGS_signals), ',', absl::SkipEmpty());
  config.faults = absl::StrSplit(absl::GetFlag(FLAGS_faults), ',', absl::SkipEmpty());
  config.loss_pct = absl::GetFlag(FLAGS_loss_pct);
  config.spike_ms = absl::GetFlag(FLAGS_spike_ms);
  config.fault_for_s = absl::GetFlag(FLAGS_fault_for);
  config.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  config.wire_steps = absl::GetFlag(FLAGS_wire_steps);
  config.fault_when = absl::GetFlag(FLAGS_fault_when);
  config.netns_script = absl::GetFlag(FLAGS_netns_script);
  return config;
}

void PrintSummary(const jobs::ChaosReport& r) {
  if (r.rows().empty() || r.rows(0).fault().empty()) {
    std::cout << absl::StrFormat(
        "\n%d trials: %d ended with a clear error; longest from the signal to the job's end "
        "%.2f s (target: timeout %d s + %g s, %d over); %d process(es) left over\n",
        r.trials(), r.clear_errors(), r.longest_end_s(), r.timeout_s(), r.slack_s(),
        r.over_deadline(), r.left_over());
    return;
  }
  std::cout << absl::StrFormat(
      "\n%d trials: %d ended clearly; %d completed (%d bitwise equal to the clean run), %d "
      "restarted; longest from the fault to a failed job's end %.2f s (target: timeout %d s + "
      "%g s, %d over); %d process(es) left over\n",
      r.trials(), r.clear_errors(), r.completed(), r.bitwise_equal(), r.restarted(),
      r.longest_end_s(), r.timeout_s(), r.slack_s(), r.over_deadline(), r.left_over());
}

int RunChaos(const std::vector<std::string>&) {
  absl::StatusOr<jobs::ChaosConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail("chaos", config.status());
  const bool json = absl::GetFlag(FLAGS_json);
  if (!json) {
    std::cout << "ddpkit chaos: " << config->trials
              << " gloo jobs under `ddpkit launch`, --timeout " << config->timeout_s
              << " s; logs in " << config->log_dir << "/\n\n"
              << absl::StrFormat(kRowFormat, "trial", "job", "ranks", "signal", "victim", "at_s",
                                 "ended_s", "exit", "clear", "left", "diagnosis");
  }
  absl::StatusOr<jobs::ChaosReport> report =
      jobs::RunChaos(*config, json ? jobs::ChaosObserver() : PrintRow);
  if (!report.ok()) return Fail("chaos", report.status());
  if (json) {
    PrintJson(*report);
  } else {
    PrintSummary(*report);
  }
  const bool clean = report->clear_errors() == report->trials() && report->over_deadline() == 0 &&
                     report->left_over() == 0;
  return clean ? kExitOk : kExitFailure;
}

}  // namespace

Subcommand ChaosSubcommand() {
  return {.name = "chaos",
          .summary = "signal a random rank of gloo jobs at random moments; measure how they end",
          .usage =
              "ddpkit chaos [--trials N] [--timeout S] [--ranks 2-4] [--jobs train,join] "
              "[--signals KILL,STOP,TERM | --faults link-down,loss,partition,flap,delay "
              "[--loss-pct P] [--spike-ms MS] [--fault-for S] [--fault-when any|checkpoint] "
              "[--max-restarts R] "
              "[--wire-steps N]] "
              "[--max-delay S] [--log-dir DIR]",
          .flag_names = {"trials", "seed", "timeout", "ranks", "jobs", "signals", "max_delay",
                         "slack", "log_dir", "json", "faults", "loss_pct", "spike_ms", "fault_for",
                         "fault_when", "max_restarts", "wire_steps", "netns_script"},
          .run = RunChaos};
}

}  // namespace ddpkit::cli
