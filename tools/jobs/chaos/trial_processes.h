// The processes of one chaos trial: started with the trial's mark in their environment (which
// everything they start inherits), found by it, and swept once the trial is over.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ddpkit::jobs {

inline constexpr char kTrialEnv[] = "DDPKIT_CHAOS_TRIAL";

// Starts `argv` in a process group of its own, its output into `log` (appended to when
// `append`), `mark` as DDPKIT_CHAOS_TRIAL in its environment.
absl::StatusOr<pid_t> StartMarked(const std::vector<std::string>& argv, const std::string& mark,
                                  const std::string& log, bool append = false);

// One variable of a process's environment (nullopt for a zombie or a process that is gone).
std::optional<std::string> EnvValue(pid_t pid, std::string_view name);

// Every live process, by pid.
std::vector<pid_t> AllPids();

// The processes that carry `mark`.
std::vector<pid_t> TrialProcesses(const std::string& mark);

// The process's exit status once it exits, or nullopt at `deadline`.
std::optional<int> WaitUntil(pid_t pid, absl::Time deadline);

// Counts what is left of the trial a second after its launchers exited (dying with the launcher
// takes the kernel a moment), then kills it so the next trial starts clean.
int SweepLeftovers(const std::string& mark);

// For a trial cut off at its cap, what each of its processes was doing, written to `path`: the
// bytes each moved over one second (slow or stuck), its command line, every thread's kernel stack,
// and for each rank (a ddpkit process with RANK set) gdb's backtrace of every thread where gdb is
// installed.
void DumpStacks(const std::string& mark, const std::string& path);

// Runs `argv` to its end: its exit code (-1: killed by a signal) and its output, both streams.
struct CommandOutput {
  int exit_code = -1;
  std::string output;
};
absl::StatusOr<CommandOutput> RunToEnd(const std::vector<std::string>& argv);

}  // namespace ddpkit::jobs
