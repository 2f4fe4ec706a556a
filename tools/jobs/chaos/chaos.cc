#include "tools/jobs/chaos/chaos.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <random>
#include <regex>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/error.h"
#include "autograd/file_util.h"
#include "tools/jobs/job.h"
#include "tools/jobs/training.h"
#include "tools/launch/proc_stat.h"

namespace ddpkit::jobs {
namespace {

constexpr char kTrialEnv[] = "DDPKIT_CHAOS_TRIAL";

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
                                   "8"};  // small data: quick to set up, even under sanitizers
  if (plan.job == "train") {
    argv.insert(argv.end(), {"--steps", std::to_string(kMaxSteps)});
  } else {  // join: uneven inputs, so the Join protocol runs too
    std::vector<std::string> inputs;
    for (int r = 0; r < plan.ranks; ++r) inputs.push_back(std::to_string(8000 - 1500 * r));
    argv.insert(argv.end(), {"--inputs", absl::StrJoin(inputs, ",")});
  }
  return argv;
}

// Starts the launcher in a process group of its own, its output into `log`, the trial's mark
// in its environment (which every rank inherits).
absl::StatusOr<pid_t> StartLauncher(const std::vector<std::string>& argv, const std::string& mark,
                                    const std::string& log) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(StrCat("cannot write ", log, ": ", strerror(errno)));
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::setenv(kTrialEnv, mark.c_str(), 1);
    ::setenv("DDPKIT_FR_DUMP_DIR", StrCat(log, ".fr").c_str(), 1);  // not the caller's folder
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fd);
  if (pid < 0) return absl::UnavailableError(StrCat("fork: ", strerror(errno)));
  ::setpgid(pid, pid);
  return pid;
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return pids;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0') pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return pids;
}

// /proc/PID/environ as NAME=VALUE strings (empty for a zombie or a process that is gone).
std::vector<std::string> Environment(pid_t pid) {
  absl::StatusOr<std::string> text = ReadFileToString(StrCat("/proc/", pid, "/environ"));
  if (!text.ok()) return {};
  return absl::StrSplit(*text, '\0', absl::SkipEmpty());
}

std::optional<std::string> EnvValue(pid_t pid, std::string_view name) {
  const std::string prefix = StrCat(name, "=");
  for (const std::string& entry : Environment(pid)) {
    if (entry.starts_with(prefix)) return entry.substr(prefix.size());
  }
  return std::nullopt;
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

std::vector<pid_t> TrialProcesses(const std::string& mark) {
  std::vector<pid_t> found;
  for (pid_t pid : AllPids()) {
    if (EnvValue(pid, kTrialEnv) == mark) found.push_back(pid);
  }
  return found;
}

// The launcher's exit status once it exits, or nullopt at `deadline`.
std::optional<int> WaitUntil(pid_t pid, absl::Time deadline) {
  while (absl::Now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return std::nullopt;
}

// Whether a line of the log is from the victim ("[rank V] ...").
bool FromRank(const std::string& line, int rank) {
  return line.starts_with(StrCat("[rank ", rank, "] "));
}

// Whether the log shows what a user needs: the launcher's failure line, no crash, and — for a
// stopped rank, which cannot speak for itself — a survivor naming it.
void Judge(const std::string& log_text, ChaosTrial& row) {
  std::vector<std::string> lines = absl::StrSplit(log_text, '\n');
  const std::regex names_victim(StrCat("ranks? ([0-9]+, )*", row.victim(), "(, [0-9]+)* did not"));
  bool launcher_line = false, crash = false, named = false;
  std::string first_error;
  for (const std::string& line : lines) {
    if (line.starts_with("ddpkit launch: job failed:")) launcher_line = true;
    for (const char* sign : {"terminate called", "Segmentation fault", "AddressSanitizer",
                             "runtime error:", "core dumped", "by signal 6 ", "by signal 11 "}) {
      if (line.find(sign) != std::string::npos) crash = true;
    }
    if (!FromRank(line, row.victim()) && std::regex_search(line, names_victim)) named = true;
    const bool error_line =
        line.find(StrCat("ddpkit ", row.job(), ": ")) != std::string::npos &&
        (line.find("fail") != std::string::npos || line.find("timed out") != std::string::npos ||
         line.find("did not") != std::string::npos);
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

// Counts what is left of the trial a second after the launcher exited (dying with the launcher
// takes the kernel a moment), then kills it so the next trial starts clean.
int SweepLeftovers(const std::string& mark) {
  const absl::Time until = absl::Now() + absl::Seconds(1);
  std::vector<pid_t> left = TrialProcesses(mark);
  while (!left.empty() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
    left = TrialProcesses(mark);
  }
  for (pid_t pid : left) ::kill(pid, SIGKILL);
  return static_cast<int>(left.size());
}

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
  absl::StatusOr<pid_t> launcher = StartLauncher(JobCommand(config, plan), mark, row.log());
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
  Judge(log_text.ok() ? *log_text : "", row);
  if (row.victim() < 0) row.set_diagnosis("no rank to signal: the job ended or never started");
  if (row.hung()) row.set_diagnosis(StrCat("hung; killed: ", row.diagnosis()));
  return row;
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
  return absl::OkStatus();
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
  for (int t = 1; t <= config.trials; ++t) {
    const TrialPlan plan = Draw(config, rng);
    ChaosTrial row = RunTrial(config, plan, t, rng);
    report.set_trials(t);
    report.set_clear_errors(report.clear_errors() + (row.clear_error() ? 1 : 0));
    report.set_longest_end_s(std::max(report.longest_end_s(), row.ended_after_s()));
    report.set_over_deadline(report.over_deadline() + (row.ended_after_s() > deadline ? 1 : 0));
    report.set_left_over(report.left_over() + row.left_over());
    if (observer) observer(row);
    *report.add_rows() = std::move(row);
  }
  return report;
}

}  // namespace ddpkit::jobs
