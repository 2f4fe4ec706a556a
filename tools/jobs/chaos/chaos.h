// `ddpkit chaos`: fault injection, measured. Each trial starts a gloo job under `ddpkit launch`
// (train or join, 2-4 ranks), waits a random moment from start-up through training, signals a
// random rank with SIGKILL, SIGSTOP or SIGTERM, and measures what a user would see:
//
//   - whether the job ended with a clear error: the launcher exits non-zero naming a rank, no
//     rank crashed (no abort, segfault or sanitizer report), and for a stopped rank, some
//     survivor's error names it as the one that did not arrive;
//   - the time from the signal to the launcher's exit (the target: --timeout + 5 s);
//   - processes of the trial left over once the launcher has gone (the target: none). Every
//     process of a trial carries DDPKIT_CHAOS_TRIAL in its environment, which is how they are
//     found and, after counting, cleaned up.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/jobs/chaos/chaos_report.pb.h"

namespace ddpkit::jobs {

// The model every chaos job trains (its measurements in docs/reliability.md were taken on it):
// small, so a trial's time is its failure's, not its compute's.
inline constexpr char kChaosModel[] = "mlp:32,64,64,10";

struct ChaosConfig {
  int trials = 50;
  uint64_t seed = 1;
  int timeout_s = 10;  // each job's --timeout
  int min_ranks = 2, max_ranks = 4;
  std::vector<std::string> jobs = {"train", "join"};
  std::vector<std::string> signals = {"KILL", "STOP", "TERM"};
  double max_delay_s = 4;  // the signal comes uniformly in [0, max_delay_s] after the start
  std::string program;     // the ddpkit binary; "" = this one (/proc/self/exe)
  std::string log_dir;     // each trial's output goes to LOG_DIR/trial-N.log
  absl::Duration slack = absl::Seconds(5);  // the target: ended within timeout + slack
  // Faults on the wire instead of signals (wire_chaos.h) when not empty.
  std::vector<std::string> faults;
  std::string netns_script;  // tools/scripts/netns_hosts.sh
  int loss_pct = 30;         // --faults loss: the share of packets dropped both ways
  int spike_ms = 2000;       // --faults delay: each frame is held this much more, each way
  double fault_for_s = 0;    // how long a fault lasts; 0: until the job ends
  int max_restarts = 0;      // each node's launcher's --max-restarts (train checkpoints each step)
  int wire_steps = 1000;     // the length of a --faults job: train's steps, join's most inputs
  // When the fault comes: "any" moment within --max-delay, or "checkpoint": the first moment
  // after that one at which the job is writing a checkpoint (train only; it checkpoints every
  // step; checkpoint_fault.h).
  std::string fault_when = "any";
};

// Called after each trial, in order (the CLI prints a row).
using ChaosObserver = std::function<void(const ChaosTrial&)>;

// Runs the trials one after another. An error Status means the trials could not run at all
// (bad config, cannot spawn); a trial that goes wrong is a row of the report.
absl::StatusOr<ChaosReport> RunChaos(const ChaosConfig& config, const ChaosObserver& observer);

// Judges one trial from its log (each rank's lines tagged "[rank N] ", the launcher's untagged)
// into `row`, whose job, signal, victim and exit code are set: clear_error and diagnosis.
void JudgeTrial(const std::string& log_text, ChaosTrial& row);

}  // namespace ddpkit::jobs
