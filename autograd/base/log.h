// One-line diagnostics on stderr, "ddpkit[<prefix>] <LEVEL> <message>", safe from any thread.
// The prefix is per thread ("rank 3"), so a line says which rank spoke: each rank thread of an
// in-process world, and the main thread of a gloo, mpi or nccl rank (comm/world/world.cc).
#pragma once

#include <string>
#include <string_view>

namespace ddpkit {

enum class LogLevel { kInfo, kWarning, kError };

void Log(LogLevel level, std::string_view message);
// Sets this thread's prefix; an empty prefix prints "ddpkit <LEVEL> ...".
void SetThreadLogPrefix(std::string prefix);

}  // namespace ddpkit
