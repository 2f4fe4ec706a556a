// The four backends, and one table of what each is and can do. Everything that depends on the
// backend — parsing --backend, help and error text, how ranks are placed and started, the
// thread budget, traces — asks this table instead of comparing names.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ddpkit::comm {

enum class Backend { kThreads, kGloo, kMpi, kNccl };

// How the ranks of a world come to exist.
enum class Launcher {
  kNone,           // ranks are threads of this process
  kEnvRendezvous,  // one process per rank, env:// (`ddpkit launch`, or srun)
  kMpirun,         // one process per rank, started by mpirun (or srun) and joined by MPI
};

// Where the thread budget learns how many ranks share this host (comm/world/thread_budget.h).
enum class RanksHereFrom {
  kWorldSize,       // the threads world's size
  kLocalWorldSize,  // the launcher's LOCAL_WORLD_SIZE
  kMpi,             // the ranks MPI placed on this host
};

struct BackendInfo {
  Backend backend;
  std::string_view name;         // as --backend spells it
  std::string_view description;  // for --backend's help
  Launcher launcher;
  // Every rank is a thread of this one process: they share one clock, rank 0 reports for the
  // process, and a trace is one file.
  bool ranks_share_process;
  bool gpu_only;       // tensors on the rank's GPU only (host tensors are staged)
  bool needs_cuda;     // refused in a build without CUDA
  bool round_robin;    // takes --round-robin-groups > 1 (comm/round_robin.h)
  bool raw_allreduce;  // the library's own allreduce is there to bench against
  RanksHereFrom ranks_here;
};

inline constexpr BackendInfo kBackends[] = {
    {Backend::kThreads, "threads", "ranks as threads of this process", Launcher::kNone,
     /*ranks_share_process=*/true, /*gpu_only=*/false, /*needs_cuda=*/false,
     /*round_robin=*/true, /*raw_allreduce=*/false, RanksHereFrom::kWorldSize},
    {Backend::kGloo, "gloo", "CPU tensors, one process per rank, under `ddpkit launch` or srun",
     Launcher::kEnvRendezvous, false, false, false, true, true, RanksHereFrom::kLocalWorldSize},
    {Backend::kMpi, "mpi",
     "CPU tensors, one process per rank, under mpirun or srun; shared memory between ranks on a "
     "host",
     Launcher::kMpirun, false, false, false, true, true, RanksHereFrom::kMpi},
    {Backend::kNccl, "nccl",
     "GPU tensors, one process and one GPU per rank, cuda:LOCAL_RANK, under `ddpkit launch`; "
     "needs a CUDA build",
     Launcher::kEnvRendezvous, false, true, true, false, false, RanksHereFrom::kLocalWorldSize},
};

constexpr const BackendInfo& InfoOf(Backend backend) {
  return kBackends[static_cast<int>(backend)];
}
constexpr std::string_view BackendName(Backend backend) { return InfoOf(backend).name; }

// InvalidArgument for a name that is no backend; the message lists them all.
absl::StatusOr<Backend> ParseBackend(std::string_view name);
// "threads, gloo, mpi or nccl".
std::string BackendList();
// "threads (ranks as ...), gloo (...), mpi (...) or nccl (...)": --backend's help.
std::string BackendHelp();

}  // namespace ddpkit::comm
