// A process's state and parent, as Linux's /proc/PID/stat gives them: what the launcher reads
// to tell a stopped rank, and `ddpkit chaos` to find a launcher's ranks.
#pragma once

#include <sys/types.h>

#include <optional>

namespace ddpkit::launch {

struct ProcStat {
  char state = '?';  // 'R' running, 'S' sleeping, 'T'/'t' stopped, 'Z' zombie, ...
  pid_t parent = -1;
};

// nullopt when the process is gone (or /proc cannot say).
std::optional<ProcStat> ReadProcStat(pid_t pid);

}  // namespace ddpkit::launch
