// One-line diagnostics on stderr, "ddpkit[<prefix>] <LEVEL> <message>", safe from any thread.
// The prefix is per thread ("rank 3"), so lines from an in-process world say which rank spoke.
#pragma once

#include <string>
#include <string_view>

namespace ddpkit {

enum class LogLevel { kInfo, kWarning, kError };

void Log(LogLevel level, std::string_view message);
// Sets this thread's prefix; an empty prefix prints "ddpkit <LEVEL> ...".
void SetThreadLogPrefix(std::string prefix);

}  // namespace ddpkit
