#include "tools/jobs/chaos/wire_chaos.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"
#include "comm/store/token.h"
#include "tools/jobs/chaos/checkpoint_fault.h"
#include "tools/jobs/chaos/trial_processes.h"

namespace ddpkit::jobs {
namespace {

constexpr char kMasterPort[] = "29500";  // each trial has namespaces, so ports, of its own

std::string HostAddr(int host) { return StrCat("10.77.0.", host + 1); }

// `netns_hosts.sh --prefix P ARGS...`, run to its end, with this ddpkit as its relay.
absl::StatusOr<CommandOutput> Hosts(const ChaosConfig& config, const std::string& prefix,
                                    std::vector<std::string> args) {
  args.insert(args.begin(), {"env", StrCat("DDPKIT_BIN=", config.program), config.netns_script,
                             "--prefix", prefix});
  return RunToEnd(args);
}

// `ddpkit train|join ...` on gloo, as long as --wire-steps says, saving rank 0's final weights.
std::vector<std::string> JobArgs(const ChaosConfig& config, const WirePlan& plan,
                                 const std::string& weights, const std::string& checkpoints) {
  std::vector<std::string> argv = {config.program, plan.job,    "--backend",
                                   "gloo",         "--timeout", std::to_string(config.timeout_s),
                                   "--batch-size", "8",         "--save-weights",
                                   weights,        "--model",   kChaosModel};
  if (plan.job == "train") {
    argv.insert(argv.end(), {"--steps", std::to_string(config.wire_steps)});
    if (!checkpoints.empty()) {
      argv.insert(argv.end(), {"--checkpoint-dir", checkpoints, "--checkpoint-every", "1"});
    }
  } else {  // join: uneven inputs, so the Join protocol runs too
    std::vector<std::string> inputs;
    for (int r = 0; r < plan.hosts; ++r) {
      inputs.push_back(std::to_string(config.wire_steps - config.wire_steps * r / 8));
    }
    argv.insert(argv.end(), {"--inputs", absl::StrJoin(inputs, ",")});
  }
  return argv;
}

// How long the launchers wait for a node missing from a restart round, or silent, before they
// fail the round naming it (`ddpkit launch --node-timeout`): the job's timeout and 2 s more, so
// the ranks, whose collectives time out first, name an unreachable peer themselves (their
// launcher gives them the 2 s teardown grace after it), and a host cut off from the start is
// named within about the job's timeout too.
int NodeTimeout(const ChaosConfig& config) { return config.timeout_s + 2; }

// Node `host` of the job, started inside that host's namespace, with the trial's store token
// (a user's nodes share theirs too).
std::vector<std::string> NodeArgs(const ChaosConfig& config, const WirePlan& plan, int host,
                                  const std::string& prefix, const std::string& token,
                                  const std::string& weights, const std::string& checkpoints) {
  std::vector<std::string> argv = {"env",
                                   StrCat(comm::kStoreTokenEnv, "=", token),
                                   config.netns_script,
                                   "--prefix",
                                   prefix,
                                   "exec",
                                   StrCat("h", host),
                                   config.program,
                                   "launch",
                                   "--nnodes",
                                   std::to_string(plan.hosts),
                                   "--node-rank",
                                   std::to_string(host),
                                   "--master-addr",
                                   HostAddr(0),
                                   "--master-port",
                                   kMasterPort,
                                   "--local-addr",
                                   HostAddr(host),
                                   "--max-restarts",
                                   std::to_string(config.max_restarts),
                                   "--node-timeout",
                                   std::to_string(NodeTimeout(config)),
                                   "--"};
  for (std::string& arg : JobArgs(config, plan, weights, checkpoints)) argv.push_back(arg);
  return argv;
}

// Brings the fault on. A cut aimed at a checkpoint must land within its few milliseconds, so it
// runs `ip` itself (the script's names: the switch PREFIX-sw, the host's port hV) rather than
// through the script, whose bash alone takes longer than a checkpoint.
void StartFault(const ChaosConfig& config, const WirePlan& plan, const std::string& prefix,
                const std::vector<std::string>& fault_args) {
  if (config.fault_when == "checkpoint" && plan.fault == "link-down") {
    (void)RunToEnd(
        {"ip", "-n", StrCat(prefix, "-sw"), "link", "set", StrCat("h", plan.victim_host), "down"});
    return;
  }
  (void)Hosts(config, prefix, fault_args);
}

std::vector<std::string> FaultArgs(const ChaosConfig& config, const WirePlan& plan) {
  std::vector<std::string> args = {"fault", StrCat("h", plan.victim_host), plan.fault};
  if (plan.fault == "loss") args.push_back(std::to_string(config.loss_pct));
  if (plan.fault == "delay") args.push_back(std::to_string(config.spike_ms));
  return args;
}

// `up` for the plan: a delay needs the relay in the victim's link from the start (at 0 ms).
std::vector<std::string> UpArgs(const WirePlan& plan) {
  std::vector<std::string> args = {"up", std::to_string(plan.hosts), "--owner",
                                   std::to_string(::getpid())};
  if (plan.fault == "delay") args.insert(args.end(), {"--relay", StrCat("h", plan.victim_host)});
  return args;
}

// How long the fault lasts: --fault-for, else until the job ends; a delay spike, when not given,
// lasts as long as it holds each frame (a 2 s spike: frames arriving in 2 s are held 2 s more).
absl::Time ClearAt(const ChaosConfig& config, const WirePlan& plan, absl::Time fault_at) {
  double seconds = config.fault_for_s;
  if (seconds == 0 && plan.fault == "delay") seconds = config.spike_ms / 1000.0;
  return seconds > 0 ? fault_at + absl::Seconds(seconds) : absl::InfiniteFuture();
}

// How long after the fault a trial may run before it is cut off (and its stacks dumped): each
// run's timeout, the fault's own length, and room for a job the fault slows down — a minute, or
// eight times the clean run's length when that is more (under a flapping link a 4-rank join ran
// up to 70 s after the fault, against 13.6 s for its clean run; docs/reliability.md).
absl::Duration TrialCap(const ChaosConfig& config, const CleanRun& clean) {
  return absl::Seconds(config.timeout_s * (config.max_restarts + 1) + config.fault_for_s +
                       config.spike_ms / 1000.0) +
         std::max(absl::Seconds(60), 8 * clean.took);
}

struct NodeRun {
  pid_t pid = -1;
  std::optional<int> status;
  absl::Time ended = absl::InfiniteFuture();
};

// Waits for every node's launcher until `deadline`, lifting the fault at `clear_at`. False when
// some launcher was still running at the deadline (then `cut_off` runs, and it is killed).
bool WaitForNodes(std::vector<NodeRun>& nodes, absl::Time deadline, absl::Time clear_at,
                  const std::function<void()>& clear, const std::function<void()>& cut_off) {
  bool cleared = false;
  while (true) {
    bool running = false;
    for (NodeRun& node : nodes) {
      int status = 0;
      if (!node.status && ::waitpid(node.pid, &status, WNOHANG) == node.pid) {
        node.status = status;
        node.ended = absl::Now();
      }
      running = running || !node.status;
    }
    if (!running) return true;
    if (!cleared && absl::Now() >= clear_at) {
      cleared = true;
      clear();
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  cut_off();
  for (NodeRun& node : nodes) {
    if (node.status) continue;
    ::kill(-node.pid, SIGKILL);
    node.status = WaitUntil(node.pid, absl::Now() + absl::Seconds(5));
  }
  return false;
}

bool Crashed(const std::string& line) {
  for (const char* sign : {"terminate called", "Segmentation fault", "AddressSanitizer",
                           "runtime error:", "core dumped", "by signal 6 ", "by signal 11 "}) {
    if (line.find(sign) != std::string::npos) return true;
  }
  return false;
}

// The launchers' final lines that name the victim's node: missing from a restart round (the
// job's start included), silent, or (node 0) lost. A host cut off before its rank started, or
// before the launchers' round began, leaves its peers' launchers to name it, not their ranks.
int LaunchersNamingVictim(const std::vector<std::string>& lines, const WirePlan& plan) {
  const int v = plan.victim_host;
  const std::regex names_node(
      StrCat("^ddpkit launch: (job failed: )?.*(nodes? ([0-9]+, )*", v,
             "(, [0-9]+)* of [0-9]+ did not join|node ", v, ": its launcher sent no heartbeat",
             v == 0 ? "|lost node 0's launcher|could not reach node 0's launcher" : "", ")"));
  return static_cast<int>(std::count_if(lines.begin(), lines.end(), [&](const std::string& line) {
    return std::regex_search(line, names_node) &&
           line.find("stopping this node's ranks") == std::string::npos &&
           line.find("restarting every rank") == std::string::npos;
  }));
}

// The ranks on the other hosts that printed no error naming the victim and the collective. Under
// loss or a flapping link every rank may still reach the collective (none is unreachable, the
// data is late): then an error saying so names the fault. Launchers' final lines naming the
// victim's node stand in for as many silent ranks (one rank per host).
std::vector<int> SilentSurvivors(const std::vector<std::string>& lines, const WirePlan& plan) {
  const bool intermittent = plan.fault == "loss" || plan.fault == "flap" || plan.fault == "delay";
  const std::regex names_victim(StrCat("ranks? ([0-9]+, )*", plan.victim_host,
                                       "(, [0-9]+)*(, which hosts the store,)? did not|could not "
                                       "reach (one of )?ranks? ([0-9]+, )*",
                                       plan.victim_host, "\\b",
                                       intermittent ? "|every rank reached this collective" : ""));
  const std::regex names_collective(
      "allreduce|all_reduce|broadcast|allgather|all_gather|barrier|reduce_scatter|alltoall|"
      "rendezvous|store",
      std::regex::icase);
  std::vector<int> silent;
  for (int rank = 0; rank < plan.hosts; ++rank) {
    if (rank == plan.victim_host) continue;
    const std::string prefix = StrCat("[rank ", rank, "] ");
    const bool named = std::any_of(lines.begin(), lines.end(), [&](const std::string& line) {
      return line.starts_with(prefix) && std::regex_search(line, names_victim) &&
             std::regex_search(line, names_collective);
    });
    if (!named) silent.push_back(rank);
  }
  if (static_cast<int>(silent.size()) <= LaunchersNamingVictim(lines, plan)) silent.clear();
  return silent;
}

// The first error line of a rank on another host than the victim's (or of any rank).
std::string FirstError(const std::vector<std::string>& lines, const WirePlan& plan) {
  const std::string victim = StrCat("[rank ", plan.victim_host, "] ");
  std::string any;
  for (const std::string& line : lines) {
    if (line.find(StrCat("ddpkit ", plan.job, ": ")) == std::string::npos) continue;
    if (line.find("fail") == std::string::npos && line.find("timed out") == std::string::npos &&
        line.find("did not") == std::string::npos) {
      continue;  // the job's banner, not an error
    }
    if (!line.starts_with(victim)) return line;
    if (any.empty()) any = line;
  }
  return any;
}

// Completed and bitwise equal to the clean run, or failed clearly on every surviving rank.
void JudgeWire(const std::vector<std::string>& lines, const std::vector<NodeRun>& nodes,
               const std::string& weights, const std::string& clean_weights, const WirePlan& plan,
               ChaosTrial& row) {
  const bool completed = std::all_of(nodes.begin(), nodes.end(), [](const NodeRun& n) {
    return n.status && WIFEXITED(*n.status) && WEXITSTATUS(*n.status) == 0;
  });
  row.set_completed(completed);
  const bool crash = std::any_of(lines.begin(), lines.end(), Crashed);
  if (completed) {
    absl::StatusOr<std::string> got = ReadFileToString(weights);
    absl::StatusOr<std::string> want = ReadFileToString(clean_weights);
    row.set_bitwise_equal(got.ok() && want.ok() && *got == *want);
    row.set_clear_error(row.bitwise_equal() && !crash);
    row.set_diagnosis(row.bitwise_equal()
                          ? "completed; final weights bitwise equal to the clean run"
                          : "completed, but the final weights differ from the clean run");
    return;
  }
  const std::vector<int> silent = SilentSurvivors(lines, plan);
  const bool all_failed = std::all_of(nodes.begin(), nodes.end(), [](const NodeRun& n) {
    return n.status && !(WIFEXITED(*n.status) && WEXITSTATUS(*n.status) == 0);
  });
  row.set_clear_error(silent.empty() && !crash && all_failed);
  std::string diagnosis = FirstError(lines, plan).substr(0, 300);
  if (!silent.empty()) {
    diagnosis = StrCat("rank(s) ", absl::StrJoin(silent, ", "),
                       " did not name the unreachable rank and the collective: ", diagnosis);
  }
  if (!all_failed) diagnosis = StrCat("some node exited 0 while another failed: ", diagnosis);
  if (crash) diagnosis = StrCat("a rank crashed: ", diagnosis);
  row.set_diagnosis(diagnosis);
}

int CountRestarts(const std::vector<std::string>& lines) {
  return static_cast<int>(std::count_if(lines.begin(), lines.end(), [](const std::string& line) {
    return line.find("restarting every rank") != std::string::npos;
  }));
}

}  // namespace

absl::Status CheckHostsAvailable(const ChaosConfig& config) {
  const std::string prefix = StrCat("dkcprobe", ::getpid());
  DDPKIT_ASSIGN_OR_RETURN(
      CommandOutput up, Hosts(config, prefix, {"up", "1", "--owner", std::to_string(::getpid())}));
  DDPKIT_ASSIGN_OR_RETURN(CommandOutput down, Hosts(config, prefix, {"down"}));
  if (up.exit_code == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(StrCat("no test hosts (", config.netns_script, "): ",
                                              absl::StripTrailingAsciiWhitespace(up.output)));
}

absl::StatusOr<CleanRun> RunClean(const ChaosConfig& config, const WirePlan& plan) {
  const std::string weights =
      StrCat(config.log_dir, "/clean-", plan.job, "-", plan.hosts, ".safetensors");
  std::vector<std::string> argv = {config.program,
                                   "launch",
                                   "--standalone",
                                   "--nproc-per-node",
                                   std::to_string(plan.hosts),
                                   "--"};
  for (std::string& arg : JobArgs(config, plan, weights, "")) argv.push_back(arg);
  const absl::Time start = absl::Now();
  DDPKIT_ASSIGN_OR_RETURN(CommandOutput run, RunToEnd(argv));
  if (run.exit_code != 0) {
    return absl::InternalError(StrCat("the clean run over loopback failed: ", run.output));
  }
  return CleanRun{.weights = weights, .took = absl::Now() - start};
}

ChaosTrial RunWireTrial(const ChaosConfig& config, const WirePlan& plan, int index,
                        const std::string& mark, const CleanRun& clean) {
  ChaosTrial row;
  row.set_trial(index);
  row.set_job(plan.job);
  row.set_ranks(plan.hosts);
  row.set_fault(plan.fault);
  row.set_victim(plan.victim_host);
  const std::string base = StrCat(config.log_dir, "/trial-", index);
  row.set_log(StrCat(base, ".log"));
  const std::string prefix = StrCat("dkc", ::getpid(), "t", index);
  const std::string weights = StrCat(base, ".safetensors");
  const bool at_checkpoint = config.fault_when == "checkpoint";
  const std::string checkpoints = (config.max_restarts > 0 || at_checkpoint) && plan.job == "train"
                                      ? StrCat(base, ".ckpt")
                                      : "";
  // An earlier chaos run in the same log folder left its trial-N files: the job would resume
  // from its checkpoints, the nodes append to its log, and the judge would read another run's
  // lines and weights. Each trial starts from none.
  std::error_code ignored;
  if (!checkpoints.empty()) std::filesystem::remove_all(checkpoints, ignored);
  std::filesystem::remove(row.log(), ignored);
  std::filesystem::remove(weights, ignored);
  absl::StatusOr<CommandOutput> up = Hosts(config, prefix, UpArgs(plan));
  if (!up.ok() || up->exit_code != 0) {
    row.set_diagnosis(StrCat("no test hosts: ", up.ok() ? up->output : up.status().ToString()));
    return row;
  }
  const std::string token = comm::NewStoreToken().value_or(mark);
  const absl::Time start = absl::Now();
  std::vector<NodeRun> nodes(plan.hosts);
  for (int host = 0; host < plan.hosts; ++host) {
    absl::StatusOr<pid_t> pid = StartMarked(
        NodeArgs(config, plan, host, prefix, token, weights, checkpoints), mark, row.log(), true);
    if (pid.ok()) nodes[host].pid = *pid;
  }
  absl::SleepFor(absl::Seconds(plan.delay_s));
  const std::optional<std::string> in_flight =
      at_checkpoint ? WaitForCheckpointInFlight(checkpoints, absl::Now() + absl::Seconds(10))
                    : std::nullopt;
  const int64_t committed_at_fault = at_checkpoint ? NewestCommittedStep(checkpoints) : -1;
  const absl::Time fault_at = absl::Now();
  StartFault(config, plan, prefix, FaultArgs(config, plan));
  // Mid-checkpoint only if the folder being written outlived the fault's taking effect.
  if (in_flight && std::filesystem::exists(StrCat(checkpoints, "/", *in_flight))) {
    row.set_checkpoint_in_flight(*in_flight);
  }
  row.set_signal_at_s(absl::ToDoubleSeconds(fault_at - start));
  const absl::Time clear_at = ClearAt(config, plan, fault_at);
  const absl::Duration cap = TrialCap(config, clean);
  const std::string stacks = StrCat(base, ".stacks");  // slow or stuck: what each rank was doing
  row.set_hung(!WaitForNodes(
      nodes, fault_at + cap, clear_at,
      [&] {
        (void)Hosts(config, prefix, {"fault", StrCat("h", plan.victim_host), "clear"});
      },
      [&] { DumpStacks(mark, stacks); }));
  absl::Time last = start;
  for (const NodeRun& node : nodes) last = std::max(last, std::min(node.ended, absl::Now()));
  row.set_ended_after_s(absl::ToDoubleSeconds(last - fault_at));
  row.set_exit_code(0);
  for (const NodeRun& node : nodes) {
    const int code = node.status && WIFEXITED(*node.status) ? WEXITSTATUS(*node.status) : -1;
    if (code != 0 && row.exit_code() == 0) row.set_exit_code(code);
  }
  row.set_left_over(SweepLeftovers(mark));
  (void)Hosts(config, prefix, {"down"});
  absl::StatusOr<std::string> log_text = ReadFileToString(row.log());
  const std::vector<std::string> lines = absl::StrSplit(log_text.ok() ? *log_text : "", '\n');
  row.set_restarts(CountRestarts(lines));
  JudgeWire(lines, nodes, weights, clean.weights, plan, row);
  if (at_checkpoint) JudgeCheckpoints(checkpoints, lines, committed_at_fault, row);
  if (row.hung()) {
    row.set_clear_error(false);
    row.set_diagnosis(StrCat("hung; killed (stacks in ", stacks, "): ", row.diagnosis()));
  }
  return row;
}

}  // namespace ddpkit::jobs
