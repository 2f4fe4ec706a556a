// The thread budget: how many compute (BLAS) threads each rank gets. Ranks on one host share its
// cores; if each rank's GEMMs used every core, two ranks would run twice the threads there are
// cores and spend the difference waiting. So a rank gets cores ÷ ranks on this host (at least
// one), as torchrun sets OMP_NUM_THREADS for its processes.
//
// Who decides, first match wins: --threads-per-rank; OPENBLAS_NUM_THREADS; OMP_NUM_THREADS (which
// `ddpkit launch` exports to cores ÷ --nproc-per-node when it is unset); for mpi, the cores
// mpirun bound this rank to, when it did; cores ÷ ranks here.
// "Ranks here": world_size for a threads world, LOCAL_WORLD_SIZE (the launcher's) for gloo and
// nccl processes, the ranks MPI places on this host for mpi.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "comm/world/world_spec.h"

namespace ddpkit::comm {

struct ThreadBudget {
  int threads = 1;          // per rank
  int cores = 1;            // this process may run on (its affinity)
  int ranks_here = 1;       // ranks sharing them
  std::string source = {};  // "--threads-per-rank", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                            // "cores bound to this rank" or "cores / ranks"
  // "1 compute thread per rank (2 cores / 2 ranks here)".
  std::string ToString() const;
};

// InvalidArgument naming the variable for an environment value that is not a positive integer.
absl::StatusOr<ThreadBudget> ResolveThreadBudget(const WorldSpec& world);

// What a launcher exports as OMP_NUM_THREADS for `nproc_per_node` processes on this host.
int ThreadsPerProcess(int nproc_per_node);

}  // namespace ddpkit::comm
