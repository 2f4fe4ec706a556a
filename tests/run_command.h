// Running a command (usually build/bin/ddpkit) from a test: its exit status and its output.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace ddpkit::testing_util {

struct CommandResult {
  int status = -1;  // the exit status, or -1 if it did not exit (a signal)
  std::string out;
  std::string err;  // empty when stderr was merged into `out`
};

inline std::string ReadAll(FILE* file) {
  std::string text;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file)) > 0) text.append(buffer.data(), n);
  return text;
}

inline CommandResult RunPiped(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  result.out = ReadAll(pipe);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs `command` through the shell, with stdout and stderr captured separately.
inline CommandResult RunCommand(const std::string& command) {
  // Unique per process and call: CTest runs the tests of one binary in parallel processes.
  static int calls = 0;
  const std::string err_path = ::testing::TempDir() + "/ddpkit_test_stderr." +
                               std::to_string(::getpid()) + "." + std::to_string(calls++);
  CommandResult result = RunPiped(command + " 2>" + err_path);
  if (FILE* err = std::fopen(err_path.c_str(), "r")) {
    result.err = ReadAll(err);
    std::fclose(err);
  }
  std::remove(err_path.c_str());
  return result;
}

// Runs `command` through the shell with stderr merged into `out`, in the order it was written
// (for processes whose logs interleave with their output).
inline CommandResult RunCommandMerged(const std::string& command) {
  return RunPiped(command + " 2>&1");
}

// Points DDPKIT_FR_DUMP_DIR at a fresh folder under the test's temporary directory, so failing
// jobs leave their flight-recorder dumps there rather than in the working directory. Returns it.
inline std::string SendFrDumpsToTempDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  ::setenv("DDPKIT_FR_DUMP_DIR", dir.c_str(), 1);
  return dir;
}

// A TCP port on 127.0.0.1 that was free a moment ago (for a job given --master-port).
inline int FreeLocalPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace ddpkit::testing_util
