#include "tools/launch/proc_stat.h"

#include <fstream>
#include <sstream>
#include <string>

namespace ddpkit::launch {

std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  // "PID (COMMAND) STATE PPID ...": the command may hold spaces and parentheses.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return std::nullopt;
  std::istringstream rest(line.substr(paren + 2));
  ProcStat result;
  if (!(rest >> result.state >> result.parent)) return std::nullopt;
  return result;
}

}  // namespace ddpkit::launch
