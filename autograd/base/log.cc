#include "autograd/base/log.h"

#include <iostream>
#include <mutex>

namespace ddpkit {
namespace {
thread_local std::string log_prefix;
std::mutex& LogMutex() {
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}
}  // namespace

void SetThreadLogPrefix(std::string prefix) { log_prefix = std::move(prefix); }

void Log(LogLevel level, std::string_view message) {
  const char* name = level == LogLevel::kInfo      ? "INFO"
                     : level == LogLevel::kWarning ? "WARNING"
                                                   : "ERROR";
  std::string line = log_prefix.empty() ? std::string("ddpkit ") : "ddpkit[" + log_prefix + "] ";
  line.append(name).append(" ").append(message).append("\n");
  std::lock_guard<std::mutex> lock(LogMutex());
  std::cerr << line << std::flush;
}

}  // namespace ddpkit
