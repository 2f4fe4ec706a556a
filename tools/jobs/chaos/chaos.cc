#include "tools/jobs/chaos/chaos.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "tools/jobs/chaos/trial_processes.h"
#include "tools/jobs/chaos/wire_chaos.h"
#include "tools/jobs/job.h"
#include "tools/jobs/training.h"
#include "tools/launch/proc_stat.h"

namespace ddpkit::jobs {
namespace {

struct TrialPlan {
  std::string job;
  int ranks = 2;
  std::string signal;
  double delay_s = 0;
};

int SignalNumber(std::string_view name) {
  if (name == "KILL") return SIGKILL;
  if (name == "STOP") return SIGSTOP;
  return SIGTERM;
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

TrialPlan Draw(const ChaosConfig& config, std::mt19937_64& rng) {
  auto pick = [&](const std::vector<std::string>& from) {
    return from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
  };
  TrialPlan plan;
  plan.job = pick(config.jobs);
  plan.ranks = std::uniform_int_distribution<int>(config.min_ranks, config.max_ranks)(rng);
  plan.signal = pick(config.signals);
  plan.delay_s = std::uniform_real_distribution<double>(0, config.max_delay_s)(rng);
  return plan;
}

// `ddpkit launch ... -- ddpkit train|join ...`: a gloo job that trains far longer than any
// trial waits, so it only ends because of the signal.
std::vector<std::string> JobCommand(const ChaosConfig& config, const TrialPlan& plan) {
  const std::string& self = config.program;
  std::vector<std::string> argv = {self,
                                   "launch",
                                   "--standalone",
                                   "--nproc-per-node",
                                   std::to_string(plan.ranks),
                                   "--",
                                   self,
                                   plan.job,
                                   "--backend",
                                   "gloo",
                                   "--timeout",
                                   std::to_string(config.timeout_s),
                                   "--batch-size",
                                   "8",  // small data: quick to set up, even under sanitizers
                                   "--model",
                                   kChaosModel};
  if (plan.job == "train") {
    argv.insert(argv.end(), {"--steps", std::to_string(kMaxSteps)});
  } else {  // join: uneven inputs, so the Join protocol runs too
    std::vector<std::string> inputs;
    for (int r = 0; r < plan.ranks; ++r) inputs.push_back(std::to_string(8000 - 1500 * r));
    argv.insert(argv.end(), {"--inputs", absl::StrJoin(inputs, ",")});
  }
  return argv;
}

// The launcher's children that have become ranks (RANK set), by rank.
std::vector<std::pair<int, pid_t>> RanksOf(pid_t launcher) {
  std::vector<std::pair<int, pid_t>> ranks;
  for (pid_t pid : AllPids()) {
    const std::optional<launch::ProcStat> stat = launch::ReadProcStat(pid);
    if (!stat || stat->parent != launcher) continue;
    if (std::optional<std::string> rank = EnvValue(pid, "RANK")) {
      ranks.push_back({std::atoi(rank->c_str()), pid});
    }
  }
  return ranks;
}

// Whether a line of the log is from the victim ("[rank V] ...").
bool FromRank(const std::string& line, int rank) {
  return line.starts_with(StrCat("[rank ", rank, "] "));
}

// Whether a survivor's line names a rank 0 stopped before it served the rendezvous store: all a
// survivor can see is the store not answering, and its error asks whether rank 0 is running
// (comm/store/tcp_store.cc), which is the stopped rank named.
bool NamesTheStoreHost(const std::string& line, int victim) {
  return victim == 0 && absl::StrContains(line, "could not connect to the rendezvous store") &&
         absl::StrContains(line, "is rank 0 running");
}

}  // namespace

// Whether the log shows what a user needs: the launcher's failure line, no crash, and — for a
// stopped rank, which cannot speak for itself — a survivor naming it.
void JudgeTrial(const std::string& log_text, ChaosTrial& row) {
  std::vector<std::string> lines = absl::StrSplit(log_text, '\n');
  const std::regex names_victim(
      StrCat("ranks? ([0-9]+, )*", row.victim(), "(, [0-9]+)*(, which hosts the store,)? did not"));
  bool launcher_line = false, crash = false, named = false;
  std::string first_error;
  for (const std::string& line : lines) {
    if (line.starts_with("ddpkit launch: job failed:")) launcher_line = true;
    for (const char* sign : {"terminate called", "Segmentation fault", "AddressSanitizer",
                             "runtime error:", "core dumped", "by signal 6 ", "by signal 11 "}) {
      if (line.find(sign) != std::string::npos) crash = true;
    }
    if (!FromRank(line, row.victim()) &&
        (std::regex_search(line, names_victim) || NamesTheStoreHost(line, row.victim()))) {
      named = true;
    }
    const bool error_line =
        line.find(StrCat("ddpkit ", row.job(), ": ")) != std::string::npos &&
        (line.find("fail") != std::string::npos || line.find("timed out") != std::string::npos ||
         line.find("did not") != std::string::npos || line.find("could not") != std::string::npos);
    if (first_error.empty() && error_line && !FromRank(line, row.victim())) first_error = line;
  }
  if (first_error.empty()) {
    for (const std::string& line : lines) {
      if (line.starts_with("ddpkit launch: job failed:")) first_error = line;
    }
  }
  row.set_diagnosis(first_error.substr(0, 300));
  row.set_clear_error(row.victim() >= 0 && row.exit_code() != 0 && launcher_line && !crash &&
                      (row.signal() != "STOP" || named));
  if (crash) row.set_diagnosis(StrCat("a rank crashed: ", row.diagnosis()));
  if (row.signal() == "STOP" && !named) {
    row.set_diagnosis(StrCat("no survivor named the stopped rank: ", row.diagnosis()));
  }
}

namespace {

ChaosTrial RunTrial(const ChaosConfig& config, const TrialPlan& plan, int index,
                    std::mt19937_64& rng) {
  ChaosTrial row;
  row.set_trial(index);
  row.set_job(plan.job);
  row.set_ranks(plan.ranks);
  row.set_signal(plan.signal);
  row.set_victim(-1);
  row.set_log(StrCat(config.log_dir, "/trial-", index, ".log"));
  const std::string mark = StrCat(::getpid(), "-", index, "-", rng());
  const absl::Time start = absl::Now();
  absl::StatusOr<pid_t> launcher = StartMarked(JobCommand(config, plan), mark, row.log());
  if (!launcher.ok()) {
    row.set_diagnosis(std::string(launcher.status().message()));
    return row;
  }
  // The signal: at the drawn moment, or as soon as the ranks exist if that is later.
  absl::SleepFor(absl::Seconds(plan.delay_s));
  std::vector<std::pair<int, pid_t>> ranks = RanksOf(*launcher);
  while (static_cast<int>(ranks.size()) < plan.ranks && absl::Now() < start + absl::Seconds(10) &&
         ::kill(*launcher, 0) == 0) {
    absl::SleepFor(absl::Milliseconds(5));
    ranks = RanksOf(*launcher);
  }
  absl::Time signalled = absl::Now();
  if (!ranks.empty()) {
    auto [victim, pid] = ranks[std::uniform_int_distribution<size_t>(0, ranks.size() - 1)(rng)];
    signalled = absl::Now();
    ::kill(pid, SignalNumber(plan.signal));
    row.set_victim(victim);
  }
  row.set_signal_at_s(Seconds(signalled - start));
  const absl::Duration cap = absl::Seconds(config.timeout_s) + absl::Seconds(60);
  std::optional<int> status = WaitUntil(*launcher, signalled + cap);
  row.set_ended_after_s(Seconds(absl::Now() - signalled));
  if (!status) {
    row.set_hung(true);
    ::kill(-*launcher, SIGKILL);
    status = WaitUntil(*launcher, absl::Now() + absl::Seconds(5));
  }
  row.set_exit_code(status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1);
  row.set_left_over(SweepLeftovers(mark));
  absl::StatusOr<std::string> log_text = ReadFileToString(row.log());
  JudgeTrial(log_text.ok() ? *log_text : "", row);
  if (row.victim() < 0) row.set_diagnosis("no rank to signal: the job ended or never started");
  if (row.hung()) row.set_diagnosis(StrCat("hung; killed: ", row.diagnosis()));
  return row;
}

absl::Status ValidateWire(const ChaosConfig& config) {
  for (const std::string& fault : config.faults) {
    DDPKIT_RETURN_IF_ERROR(
        RequireOneOf("--faults", fault, {"link-down", "loss", "partition", "flap", "delay"}));
  }
  if (config.faults.empty()) return absl::OkStatus();
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--fault-for", config.fault_for_s, 0));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--max-restarts", config.max_restarts, 0));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--wire-steps", config.wire_steps));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--spike-ms", config.spike_ms));
  DDPKIT_RETURN_IF_ERROR(RequireOneOf("--fault-when", config.fault_when, {"any", "checkpoint"}));
  if (config.fault_when == "checkpoint" && config.jobs != std::vector<std::string>{"train"}) {
    return absl::InvalidArgumentError(
        "--fault-when checkpoint needs --jobs train (join writes no checkpoints)");
  }
  if (config.loss_pct < 0 || config.loss_pct > 100) {
    return absl::InvalidArgumentError(StrCat("--loss-pct must be 0..100, got ", config.loss_pct));
  }
  return absl::OkStatus();
}

WirePlan DrawWire(const ChaosConfig& config, std::mt19937_64& rng) {
  const TrialPlan drawn = Draw(config, rng);
  WirePlan plan{.job = drawn.job, .hosts = drawn.ranks, .delay_s = drawn.delay_s};
  plan.fault =
      config.faults[std::uniform_int_distribution<size_t>(0, config.faults.size() - 1)(rng)];
  plan.victim_host = std::uniform_int_distribution<int>(0, plan.hosts - 1)(rng);
  return plan;
}

// A trial of --faults: the clean run of its job and world size first, once.
absl::StatusOr<ChaosTrial> WireTrial(const ChaosConfig& config, int index, std::mt19937_64& rng,
                                     std::map<std::string, CleanRun>& clean) {
  const WirePlan plan = DrawWire(config, rng);
  const std::string key = StrCat(plan.job, "-", plan.hosts);
  if (!clean.contains(key)) {
    DDPKIT_ASSIGN_OR_RETURN(clean[key], RunClean(config, plan));
  }
  const std::string mark = StrCat(::getpid(), "-", index, "-", rng());
  return RunWireTrial(config, plan, index, mark, clean[key]);
}

absl::Status Validate(const ChaosConfig& config) {
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--trials", config.trials));
  DDPKIT_RETURN_IF_ERROR(RequirePositive("--timeout", config.timeout_s));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--max-delay", config.max_delay_s, 0));
  DDPKIT_RETURN_IF_ERROR(RequireAtLeast("--slack", Seconds(config.slack), 0));
  if (config.min_ranks < 2 || config.max_ranks < config.min_ranks || config.max_ranks > 16) {
    return absl::InvalidArgumentError(
        StrCat("--ranks must be MIN-MAX with 2 <= MIN <= MAX <= 16, got ", config.min_ranks, "-",
               config.max_ranks));
  }
  if (config.jobs.empty() || config.signals.empty()) {
    return absl::InvalidArgumentError("--jobs and --signals need at least one entry each");
  }
  for (const std::string& job : config.jobs) {
    DDPKIT_RETURN_IF_ERROR(RequireOneOf("--jobs", job, {"train", "join"}));
  }
  for (const std::string& signal : config.signals) {
    DDPKIT_RETURN_IF_ERROR(RequireOneOf("--signals", signal, {"KILL", "STOP", "TERM"}));
  }
  return ValidateWire(config);
}

}  // namespace

absl::StatusOr<ChaosReport> RunChaos(const ChaosConfig& given, const ChaosObserver& observer) {
  DDPKIT_RETURN_IF_ERROR(Validate(given));
  ChaosConfig config = given;
  if (config.program.empty()) {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return absl::UnavailableError("cannot find this program (/proc/self/exe)");
    config.program.assign(self, n);
  }
  if (config.log_dir.empty()) config.log_dir = "ddpkit_chaos";
  if (::mkdir(config.log_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::UnavailableError(
        StrCat("cannot create --log-dir ", config.log_dir, ": ", strerror(errno)));
  }
  std::mt19937_64 rng(config.seed);
  ChaosReport report;
  report.set_timeout_s(config.timeout_s);
  report.set_seed(config.seed);
  report.set_slack_s(Seconds(config.slack));
  const double deadline = config.timeout_s + Seconds(config.slack);
  if (!config.faults.empty()) DDPKIT_RETURN_IF_ERROR(CheckHostsAvailable(config));
  std::map<std::string, CleanRun> clean;  // "job-hosts": its clean run
  for (int t = 1; t <= config.trials; ++t) {
    ChaosTrial row;
    if (config.faults.empty()) {
      row = RunTrial(config, Draw(config, rng), t, rng);
    } else {
      DDPKIT_ASSIGN_OR_RETURN(row, WireTrial(config, t, rng, clean));
    }
    report.set_trials(t);
    report.set_completed(report.completed() + (row.completed() ? 1 : 0));
    report.set_bitwise_equal(report.bitwise_equal() + (row.bitwise_equal() ? 1 : 0));
    report.set_restarted(report.restarted() + (row.restarts() > 0 ? 1 : 0));
    report.set_clear_errors(report.clear_errors() + (row.clear_error() ? 1 : 0));
    if (!row.completed()) {  // the deadline is for ending with an error
      report.set_longest_end_s(std::max(report.longest_end_s(), row.ended_after_s()));
      report.set_over_deadline(report.over_deadline() + (row.ended_after_s() > deadline ? 1 : 0));
    }
    report.set_left_over(report.left_over() + row.left_over());
    if (observer) observer(row);
    *report.add_rows() = std::move(row);
  }
  return report;
}

}  // namespace ddpkit::jobs
