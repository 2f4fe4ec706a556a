#include "tools/jobs/chaos/trial_processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "autograd/base/error.h"
#include "autograd/base/file_util.h"

namespace ddpkit::jobs {
namespace {

// In the forked child: the output to `fd`, then the program. Never returns.
[[noreturn]] void ExecWithOutput(const std::vector<std::string>& argv, int fd) {
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "cannot run '%s': %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}

// /proc/PID/environ as NAME=VALUE strings (empty for a zombie or a process that is gone).
std::vector<std::string> Environment(pid_t pid) {
  absl::StatusOr<std::string> text = ReadFileToString(StrCat("/proc/", pid, "/environ"));
  if (!text.ok()) return {};
  return absl::StrSplit(*text, '\0', absl::SkipEmpty());
}

// Every thread's kernel stack (/proc/PID/task/TID/stack; root only) and where it sleeps.
std::string KernelStacks(pid_t pid) {
  std::string out;
  DIR* tasks = ::opendir(StrCat("/proc/", pid, "/task").c_str());
  if (tasks == nullptr) return out;
  while (dirent* entry = ::readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const std::string dir = StrCat("/proc/", pid, "/task/", entry->d_name);
    StrAppend(&out, "-- thread ", entry->d_name, " (",
              absl::StripTrailingAsciiWhitespace(ReadFileToString(dir + "/comm").value_or("?")),
              "), waiting in ", ReadFileToString(dir + "/wchan").value_or("?"), "\n",
              ReadFileToString(dir + "/stack").value_or("(no kernel stack)\n"));
  }
  ::closedir(tasks);
  return out;
}

// rchar + wchar of /proc/PID/io: every byte its system calls read or wrote, sockets included.
int64_t BytesMoved(pid_t pid) {
  int64_t total = 0;
  const std::string io = ReadFileToString(StrCat("/proc/", pid, "/io")).value_or("");
  for (absl::string_view line : absl::StrSplit(io, '\n')) {
    int64_t n = 0;
    if ((absl::ConsumePrefix(&line, "rchar: ") || absl::ConsumePrefix(&line, "wchar: ")) &&
        absl::SimpleAtoi(line, &n)) {
      total += n;
    }
  }
  return total;
}

// Slow or stuck: the bytes each process moved over one second.
std::string Progress(const std::vector<pid_t>& pids) {
  std::vector<int64_t> before;
  for (pid_t pid : pids) before.push_back(BytesMoved(pid));
  absl::SleepFor(absl::Seconds(1));
  std::string out = "bytes each process read and wrote over one second (rchar + wchar):\n";
  for (size_t i = 0; i < pids.size(); ++i) {
    StrAppend(&out, "  pid ", pids[i], ": ", BytesMoved(pids[i]) - before[i], "\n");
  }
  return out;
}

}  // namespace

absl::StatusOr<pid_t> StartMarked(const std::vector<std::string>& argv, const std::string& mark,
                                  const std::string& log, bool append) {
  const int fd =
      ::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) return absl::UnavailableError(StrCat("cannot write ", log, ": ", strerror(errno)));
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::setenv(kTrialEnv, mark.c_str(), 1);
    ::setenv("DDPKIT_FR_DUMP_DIR", StrCat(log, ".fr").c_str(), 1);  // not the caller's folder
    ExecWithOutput(argv, fd);
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

std::optional<std::string> EnvValue(pid_t pid, std::string_view name) {
  const std::string prefix = StrCat(name, "=");
  for (const std::string& entry : Environment(pid)) {
    if (entry.starts_with(prefix)) return entry.substr(prefix.size());
  }
  return std::nullopt;
}

std::vector<pid_t> TrialProcesses(const std::string& mark) {
  std::vector<pid_t> found;
  for (pid_t pid : AllPids()) {
    if (EnvValue(pid, kTrialEnv) == mark) found.push_back(pid);
  }
  return found;
}

std::optional<int> WaitUntil(pid_t pid, absl::Time deadline) {
  while (absl::Now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return std::nullopt;
}

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

void DumpStacks(const std::string& mark, const std::string& path) {
  const std::vector<pid_t> pids = TrialProcesses(mark);
  std::string out = Progress(pids);
  for (pid_t pid : pids) {
    std::string command = ReadFileToString(StrCat("/proc/", pid, "/cmdline")).value_or("");
    std::replace(command.begin(), command.end(), '\0', ' ');
    StrAppend(&out, "==== pid ", pid, ": ", command, "\n", KernelStacks(pid));
    const std::string name = std::string(absl::StripTrailingAsciiWhitespace(
        ReadFileToString(StrCat("/proc/", pid, "/comm")).value_or("")));
    if (name != "ddpkit" || !EnvValue(pid, "RANK")) continue;
    absl::StatusOr<CommandOutput> gdb =
        RunToEnd({"gdb", "-p", std::to_string(pid), "-batch", "-nx", "-ex", "thread apply all bt"});
    StrAppend(&out, "-- gdb:\n", gdb.ok() ? gdb->output : gdb.status().ToString(), "\n");
  }
  (void)WriteFileAtomically(path, out);
}

absl::StatusOr<CommandOutput> RunToEnd(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::UnavailableError(StrCat("pipe: ", strerror(errno)));
  }
  const pid_t pid = ::fork();
  if (pid == 0) ExecWithOutput(argv, pipe_fds[1]);
  ::close(pipe_fds[1]);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    return absl::UnavailableError(StrCat("fork: ", strerror(errno)));
  }
  CommandOutput result;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) result.output.append(buffer, n);
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace ddpkit::jobs
