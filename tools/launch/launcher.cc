#include "tools/launch/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>

#include "autograd/base/error.h"
#include "comm/store/token.h"
#include "comm/world/env_rendezvous.h"
#include "comm/world/thread_budget.h"
#include "tools/launch/proc_stat.h"
#include "tools/launch/restart_round.h"

namespace ddpkit::launch {
namespace {

volatile std::sig_atomic_t pending_signal = 0;
void RecordSignal(int signal) { pending_signal = signal; }

// SIGINT and SIGTERM are recorded (and forwarded to the ranks) while the launcher runs.
class SignalRecorder {
 public:
  SignalRecorder() {
    struct sigaction action {};
    action.sa_handler = RecordSignal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalRecorder() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;  // read ends; -1 once closed
  std::string out_partial, err_partial;
  bool running = true;
  int status = 0;
};

// Where the ranks meet: the rendezvous store's address, and the ranks' environment.
struct Rendezvous {
  std::string master_addr;
  int master_port = 0;
  int world_size = 1;
  // DDPKIT_STORE_TOKEN: the user's (shared by every node), or drawn here.
  std::string store_token = {};
};

// Writes complete lines from `partial` + `data` with the rank prefix; keeps the unfinished tail.
// All in one write: nodes started apart may share one output file (ddpkit chaos --faults gives
// every node's launcher the trial's log), and piecewise writes to unbuffered stderr interleaved
// there mid-prefix ("[rank [rank 3] ...").
void EmitLines(int rank, std::string& partial, std::string_view data, std::ostream& sink,
               bool flush_all) {
  partial.append(data);
  const std::string prefix = StrCat("[rank ", rank, "] ");
  std::string out;
  size_t start = 0, newline;
  while ((newline = partial.find('\n', start)) != std::string::npos) {
    out.append(prefix).append(partial, start, newline - start + 1);
    start = newline + 1;
  }
  partial.erase(0, start);
  if (flush_all && !partial.empty()) {
    out.append(prefix).append(partial).append("\n");
    partial.clear();
  }
  sink << out;
  sink.flush();
}

std::string Describe(const Child& c) {
  if (WIFSIGNALED(c.status)) {
    return StrCat("rank ", c.rank, " (pid ", c.pid, ") was killed by signal ", WTERMSIG(c.status),
                  " (", strsignal(WTERMSIG(c.status)), ")");
  }
  return StrCat("rank ", c.rank, " (pid ", c.pid, ") exited with code ", WEXITSTATUS(c.status));
}

bool Failed(const Child& c) { return !WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0; }

// Whether `pid` is stopped (SIGSTOP, a debugger).
bool IsStopped(pid_t pid) {
  const std::optional<ProcStat> stat = ReadProcStat(pid);
  return stat && (stat->state == 'T' || stat->state == 't');
}

// How long a rank has between SIGTERM and SIGKILL when the launcher tears the job down.
constexpr absl::Duration kKillAfterTerm = absl::Seconds(2);

absl::Status Validate(const LaunchOptions& options) {
  if (options.command.empty()) {
    return absl::InvalidArgumentError(
        "no program to launch; put it after '--', e.g. ddpkit launch "
        "--nproc-per-node 2 -- ddpkit train --backend gloo");
  }
  if (options.nproc_per_node < 1 || options.nnodes < 1 || options.node_rank < 0 ||
      options.node_rank >= options.nnodes) {
    return absl::InvalidArgumentError(
        StrCat("need --nproc-per-node >= 1, --nnodes >= 1 and 0 <= "
               "--node-rank < --nnodes (got ",
               options.nproc_per_node, ", ", options.nnodes, ", ", options.node_rank, ")"));
  }
  if (options.nproc_per_node > kMaxLocalRanks) {
    return absl::InvalidArgumentError(
        StrCat("--nproc-per-node ", options.nproc_per_node, " is more than ", kMaxLocalRanks,
               " processes on one node; start at most one rank per core (or per GPU)"));
  }
  if (options.max_restarts < 0) {
    return absl::InvalidArgumentError(
        StrCat("--max-restarts must be 0 or more (got ", options.max_restarts, ")"));
  }
  if (options.node_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--node-timeout must be more than 0 seconds");
  }
  if (options.standalone && options.nnodes != 1) {
    return absl::InvalidArgumentError("--standalone runs on one node: drop --nnodes");
  }
  return absl::OkStatus();
}

absl::StatusOr<Rendezvous> ResolveRendezvous(const LaunchOptions& options) {
  Rendezvous rendezvous{options.master_addr, options.master_port,
                        options.nnodes * options.nproc_per_node};
  if (options.standalone) {
    rendezvous.master_addr = "127.0.0.1";
    DDPKIT_ASSIGN_OR_RETURN(rendezvous.master_port, PickFreePort());
  }
  if (const char* token = std::getenv(comm::kStoreTokenEnv); token != nullptr && *token != '\0') {
    rendezvous.store_token = token;
  } else {
    DDPKIT_ASSIGN_OR_RETURN(rendezvous.store_token, comm::NewStoreToken());
  }
  return rendezvous;
}

// In the forked child: torchrun's environment, then the program. Never returns.
[[noreturn]] void ExecRank(const LaunchOptions& options, const Rendezvous& rendezvous, int rank,
                           int local_rank, int restart, pid_t launcher, int out_fd, int err_fd) {
  // A process group of its own, so the launcher can end the rank with whatever it started; and
  // death with the launcher, so a killed launcher leaves no rank holding the job's ports.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(1);  // the launcher died before prctl took effect
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::setenv("MASTER_ADDR", rendezvous.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(rendezvous.master_port).c_str(), 1);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(rendezvous.world_size).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node).c_str(), 1);
  ::setenv("GROUP_RANK", std::to_string(options.node_rank).c_str(), 1);
  ::setenv("DDPKIT_RESTART_COUNT", std::to_string(restart).c_str(), 1);
  if (!options.local_addr.empty()) ::setenv("DDPKIT_LOCAL_ADDR", options.local_addr.c_str(), 1);
  ::setenv(comm::kStoreTokenEnv, rendezvous.store_token.c_str(), 1);
  ::setenv(comm::kLauncherTagsLinesEnv, "1", 1);
  // As torchrun does: each rank's BLAS pool gets its share of this host's cores, unless the
  // user chose (comm/world/thread_budget.h).
  ::setenv("OMP_NUM_THREADS",
           std::to_string(comm::ThreadsPerProcess(options.nproc_per_node)).c_str(), 0);
  std::vector<char*> argv;
  for (const std::string& arg : options.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "ddpkit launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

// Starts the local rank `local` with its stdout and stderr on pipes the launcher reads.
absl::StatusOr<Child> Spawn(const LaunchOptions& options, const Rendezvous& rendezvous, int local,
                            int restart) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return absl::UnavailableError(StrCat("pipe: ", std::strerror(errno)));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return absl::UnavailableError(StrCat("pipe: ", std::strerror(errno)));
  }
  Child child;
  child.rank = options.node_rank * options.nproc_per_node + local;
  const pid_t launcher = ::getpid();
  child.pid = ::fork();
  if (child.pid == 0) {
    ExecRank(options, rendezvous, child.rank, local, restart, launcher, out[1], err[1]);
  }
  if (child.pid > 0) ::setpgid(child.pid, child.pid);  // also here: no signal races the child's
  ::close(out[1]);
  ::close(err[1]);
  if (child.pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    return absl::UnavailableError(StrCat("fork: ", std::strerror(errno)));
  }
  child.out_fd = out[0];
  child.err_fd = err[0];
  return child;
}

// Watches the ranks until every one has exited and its output is drained. With several nodes,
// it records a local failure in the restart round and stops its ranks on another node's.
class Supervisor {
 public:
  Supervisor(std::vector<Child> children, absl::Duration teardown_grace,
             RestartRounds* rounds = nullptr, std::string failure_prefix = "")
      : children_(std::move(children)),
        teardown_grace_(teardown_grace),
        rounds_(rounds),
        failure_prefix_(std::move(failure_prefix)) {}

  LaunchResult Run() {
    while (true) {
      PumpOutput();  // output first, so nothing a rank printed is lost
      const bool any_running = ReapExited();
      if (!any_running && !OutputOpen()) break;
      if (!any_running) continue;  // drain what is left in the pipes
      AdoptRemoteFailure();
      ForwardSignals();
      EnforceTeardown();
    }
    return result_;
  }

  // Stops every rank now (used when the job cannot start completely).
  void KillAll() {
    Signal(SIGKILL);
    for (Child& c : children_) {
      if (c.running) ::waitpid(c.pid, &c.status, 0);
      if (c.out_fd >= 0) ::close(c.out_fd);
      if (c.err_fd >= 0) ::close(c.err_fd);
    }
  }

 private:
  // Reads whatever the ranks printed within 50 ms and prints it, line by line, prefixed.
  void PumpOutput() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is_stderr)
    for (Child& c : children_) {
      for (bool is_err : {false, true}) {
        const int fd = is_err ? c.err_fd : c.out_fd;
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owners.push_back({&c, is_err});
      }
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto [child, is_err] = owners[i];
      char buffer[8192];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      int& fd = is_err ? child->err_fd : child->out_fd;
      std::string& partial = is_err ? child->err_partial : child->out_partial;
      std::ostream& sink = is_err ? std::cerr : std::cout;
      if (n <= 0) {
        EmitLines(child->rank, partial, "", sink, /*flush_all=*/true);
        ::close(fd);
        fd = -1;
      } else {
        EmitLines(child->rank, partial, std::string_view(buffer, n), sink, false);
      }
    }
  }

  // Collects exited ranks; the first failure starts the teardown grace. True while any runs.
  bool ReapExited() {
    bool any_running = false;
    for (Child& c : children_) {
      if (c.running && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.running = false;
        if (Failed(c) && result_.ok) {
          Fail(failure_prefix_ + Describe(c));
          if (WIFEXITED(c.status)) result_.rank_exit_code = WEXITSTATUS(c.status);
        }
      }
      any_running = any_running || c.running;
    }
    return any_running;
  }

  // This node's first failure: recorded for the other nodes, and the teardown grace starts.
  void Fail(const std::string& failure) {
    result_.ok = false;
    result_.failure = failure;
    teardown_at_ = absl::Now() + teardown_grace_;
    if (rounds_ != nullptr) rounds_->RecordFailure(failure);
  }

  // Another node's failure (or node 0's launcher lost): this node's ranks stop too.
  void AdoptRemoteFailure() {
    if (rounds_ == nullptr || !result_.ok) return;
    const std::optional<RoundFailure> failure = rounds_->Failure();
    if (!failure) return;
    result_.ok = false;
    result_.failure = failure->cause;
    teardown_at_ = absl::Now() + teardown_grace_;
    std::cerr << "ddpkit launch: " << (failure->fatal ? "" : "the job failed on another node: ")
              << failure->cause << "; stopping this node's ranks" << std::endl;
  }

  bool OutputOpen() const {
    return std::any_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.out_fd >= 0 || c.err_fd >= 0; });
  }

  // SIGINT/SIGTERM to the launcher go to every rank; SIGKILL follows kKillAfterTerm later.
  void ForwardSignals() {
    if (pending_signal == 0) return;
    const int signal = pending_signal;
    pending_signal = 0;
    Signal(signal);
    result_.interrupted = true;
    if (result_.ok) {
      Fail(StrCat(failure_prefix_, "interrupted by signal ", signal, " (", strsignal(signal), ")"));
    }
    Signal(SIGCONT);
    kill_at_ = std::min(kill_at_, absl::Now() + kKillAfterTerm);
  }

  // After a failure and the grace (cut short when every rank still running is stopped, since a
  // stopped rank reports nothing): SIGTERM to the rest, SIGKILL kKillAfterTerm later.
  void EnforceTeardown() {
    if (!terminated_ && (absl::Now() >= teardown_at_ || (!result_.ok && OnlyStoppedRemain()))) {
      terminated_ = true;
      Signal(SIGTERM);
      Signal(SIGCONT);  // a stopped rank acts on SIGTERM only once continued
      kill_at_ = absl::Now() + kKillAfterTerm;
    }
    if (absl::Now() >= kill_at_) Signal(SIGKILL);
  }

  bool OnlyStoppedRemain() const {
    return std::all_of(children_.begin(), children_.end(),
                       [](const Child& c) { return !c.running || IsStopped(c.pid); });
  }

  // To the rank's whole process group: whatever the rank started ends with it.
  void Signal(int signal) {
    for (Child& c : children_) {
      if (c.running) ::kill(-c.pid, signal);
    }
  }

  std::vector<Child> children_;
  const absl::Duration teardown_grace_;
  RestartRounds* const rounds_;       // null: a single node
  const std::string failure_prefix_;  // "node K: " with several nodes
  LaunchResult result_;
  absl::Time teardown_at_ = absl::InfiniteFuture(), kill_at_ = absl::InfiniteFuture();
  bool terminated_ = false;
};

}  // namespace

absl::StatusOr<int> PickFreePort(bool every_address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(every_address ? INADDR_ANY : INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(StrCat("cannot find a free local port: ", std::strerror(errno)));
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

namespace {

// One run of the job: every local rank started, then supervised until all have exited.
absl::StatusOr<LaunchResult> RunOnce(const LaunchOptions& options, const Rendezvous& rendezvous,
                                     int restart, RestartRounds* rounds = nullptr) {
  std::vector<Child> children;
  for (int local = 0; local < options.nproc_per_node; ++local) {
    absl::StatusOr<Child> child = Spawn(options, rendezvous, local, restart);
    if (!child.ok()) {
      Supervisor(std::move(children), options.teardown_grace).KillAll();
      return child.status();
    }
    children.push_back(*std::move(child));
  }
  const std::string prefix = rounds ? StrCat("node ", options.node_rank, ": ") : "";
  return Supervisor(std::move(children), options.teardown_grace, rounds, prefix).Run();
}

// The job is over: the launcher leaves the rounds (node 0's keeps its store up for the others).
LaunchResult EndRounds(RestartRounds& rounds, LaunchResult result) {
  rounds.Leave();
  return result;
}

// Round `round` was not joined by every node (or a signal or node 0's loss ended the wait): the
// job fails with that, and what ended the round before.
LaunchResult NotJoined(const absl::Status& status, LaunchResult previous, int round) {
  previous.ok = false;
  previous.interrupted = previous.interrupted || absl::IsCancelled(status);
  previous.failure =
      StrCat(status.message(), "; round ", round - 1, " had failed: ", previous.failure);
  previous.restarts = round;
  return previous;
}

// Several nodes: every node's launcher runs round after round with the others, node 0's
// holding them (tools/launch/restart_round.h); each round's ranks meet on a port of its own.
absl::StatusOr<LaunchResult> LaunchInRounds(const LaunchOptions& options, Rendezvous rendezvous) {
  DDPKIT_ASSIGN_OR_RETURN(
      std::unique_ptr<RestartRounds> rounds,
      RestartRounds::Start({.nnodes = options.nnodes,
                            .node_rank = options.node_rank,
                            .master_addr = options.master_addr,
                            .master_port = options.master_port,
                            .token = rendezvous.store_token,
                            .node_timeout = options.node_timeout,
                            .interrupted = [] { return pending_signal != 0; }}));
  LaunchResult result;
  for (int round = 0;; ++round) {
    absl::StatusOr<int> port = rounds->Join(round);
    if (!port.ok() && round == 0) return port.status();  // the job never started
    if (!port.ok()) return EndRounds(*rounds, NotJoined(port.status(), result, round));
    rendezvous.master_port = *port;
    DDPKIT_ASSIGN_OR_RETURN(result, RunOnce(options, rendezvous, round, rounds.get()));
    result.restarts = round;
    std::optional<RoundFailure> failure = result.ok ? rounds->AwaitOutcome() : rounds->Failure();
    if (result.ok && failure) {
      result.ok = false;
      result.failure = failure->cause;
    }
    const bool fatal = (failure && failure->fatal) || pending_signal != 0;
    result.interrupted = result.interrupted || pending_signal != 0;
    if (result.ok || fatal || result.interrupted || round == options.max_restarts) {
      return EndRounds(*rounds, result);
    }
    std::cerr << "ddpkit launch: " << result.failure << "; restarting every rank (restart "
              << round + 1 << " of " << options.max_restarts << "), with every node in round "
              << round + 1 << std::endl;
  }
}

}  // namespace

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options) {
  DDPKIT_RETURN_IF_ERROR(Validate(options));
  DDPKIT_ASSIGN_OR_RETURN(Rendezvous rendezvous, ResolveRendezvous(options));
  SignalRecorder signals;
  if (options.nnodes > 1) return LaunchInRounds(options, std::move(rendezvous));
  for (int restart = 0;; ++restart) {
    DDPKIT_ASSIGN_OR_RETURN(LaunchResult result, RunOnce(options, rendezvous, restart));
    result.restarts = restart;
    if (result.ok || result.interrupted || restart == options.max_restarts || pending_signal != 0) {
      return result;
    }
    std::cerr << "ddpkit launch: " << result.failure << "; restarting every rank (restart "
              << restart + 1 << " of " << options.max_restarts << ")" << std::endl;
    if (options.standalone) {  // the old port may linger in TIME_WAIT
      DDPKIT_ASSIGN_OR_RETURN(rendezvous.master_port, PickFreePort());
    }
  }
}

}  // namespace ddpkit::launch
