#include "tools/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>

#include "autograd/error.h"

namespace ddpkit::tools {
namespace {

volatile std::sig_atomic_t pending_signal = 0;
void RecordSignal(int signal) { pending_signal = signal; }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;  // read ends; -1 once closed
  std::string out_partial, err_partial;
  bool running = true;
  int status = 0;
};

// Writes complete lines from `partial` + `data` with the rank prefix; keeps the unfinished tail.
void EmitLines(int rank, std::string& partial, std::string_view data, std::ostream& sink,
               bool flush_all) {
  partial.append(data);
  size_t start = 0, newline;
  while ((newline = partial.find('\n', start)) != std::string::npos) {
    sink << "[rank " << rank << "] "
         << std::string_view(partial).substr(start, newline - start + 1);
    start = newline + 1;
  }
  partial.erase(0, start);
  if (flush_all && !partial.empty()) {
    sink << "[rank " << rank << "] " << partial << "\n";
    partial.clear();
  }
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

}  // namespace

absl::StatusOr<int> PickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(StrCat("cannot find a free local port: ", std::strerror(errno)));
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options) {
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
  std::string master_addr = options.master_addr;
  int master_port = options.master_port;
  if (options.standalone) {
    if (options.nnodes != 1)
      return absl::InvalidArgumentError("--standalone runs on one node: drop --nnodes");
    master_addr = "127.0.0.1";
    DDPKIT_ASSIGN_OR_RETURN(master_port, PickFreePort());
  }
  const int world = options.nnodes * options.nproc_per_node;

  struct sigaction action {};
  action.sa_handler = RecordSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int, old_term;
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);

  std::vector<Child> children;
  for (int local = 0; local < options.nproc_per_node; ++local) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      return absl::UnavailableError(StrCat("pipe: ", std::strerror(errno)));
    }
    Child child;
    child.rank = options.node_rank * options.nproc_per_node + local;
    child.pid = ::fork();
    if (child.pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::setenv("MASTER_ADDR", master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
      ::setenv("RANK", std::to_string(child.rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node).c_str(), 1);
      ::setenv("GROUP_RANK", std::to_string(options.node_rank).c_str(), 1);
      std::vector<char*> argv;
      for (const std::string& arg : options.command) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "ddpkit launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    if (child.pid < 0) return absl::UnavailableError(StrCat("fork: ", std::strerror(errno)));
    child.out_fd = out[0];
    child.err_fd = err[0];
    children.push_back(child);
  }

  LaunchResult result;
  absl::Time teardown_at = absl::InfiniteFuture(), kill_at = absl::InfiniteFuture();
  bool terminated = false;
  auto signal_all = [&](int signal) {
    for (Child& c : children) {
      if (c.running) ::kill(c.pid, signal);
    }
  };

  while (true) {
    // Output first, so nothing a child printed is lost.
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is_stderr)
    for (Child& c : children) {
      if (c.out_fd >= 0) {
        fds.push_back({c.out_fd, POLLIN, 0});
        owners.push_back({&c, false});
      }
      if (c.err_fd >= 0) {
        fds.push_back({c.err_fd, POLLIN, 0});
        owners.push_back({&c, true});
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
      if (n <= 0) {
        EmitLines(child->rank, partial, "", is_err ? std::cerr : std::cout, /*flush_all=*/true);
        ::close(fd);
        fd = -1;
      } else {
        EmitLines(child->rank, partial, std::string_view(buffer, n), is_err ? std::cerr : std::cout,
                  false);
      }
    }

    bool any_running = false;
    for (Child& c : children) {
      if (c.running && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.running = false;
        if (Failed(c) && result.ok) {
          result.ok = false;
          result.failure = Describe(c);
          teardown_at = absl::Now() + options.teardown_grace;
        }
      }
      any_running = any_running || c.running;
    }
    const bool output_open = std::any_of(children.begin(), children.end(), [](const Child& c) {
      return c.out_fd >= 0 || c.err_fd >= 0;
    });
    if (!any_running && !output_open) break;
    if (!any_running) continue;  // drain what is left in the pipes

    if (pending_signal != 0) {
      const int signal = pending_signal;
      pending_signal = 0;
      signal_all(signal);
      if (result.ok) {
        result.ok = false;
        result.failure = StrCat("interrupted by signal ", signal, " (", strsignal(signal), ")");
      }
      kill_at = std::min(kill_at, absl::Now() + absl::Seconds(5));
    }
    if (!terminated && absl::Now() >= teardown_at) {
      terminated = true;
      signal_all(SIGTERM);
      kill_at = absl::Now() + absl::Seconds(5);
    }
    if (absl::Now() >= kill_at) signal_all(SIGKILL);
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace ddpkit::tools
