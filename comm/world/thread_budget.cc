#include "comm/world/thread_budget.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "autograd/base/error.h"
#include "autograd/compute_threads.h"
#include "comm/mpi/mpi_runtime.h"

namespace ddpkit::comm {
namespace {

// A positive integer from the environment; 0 when `name` is unset or empty.
absl::StatusOr<int> PositiveFromEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return 0;
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 1) {
    return absl::InvalidArgumentError(StrCat(name, "='", value,
                                             "' is not a thread count; set it to an integer >= 1 "
                                             "or unset it"));
  }
  return n;
}

absl::StatusOr<int> RanksHere(const WorldSpec& world) {
  switch (InfoOf(world.backend).ranks_here) {
    case RanksHereFrom::kWorldSize: return std::max(1, world.world_size);
    case RanksHereFrom::kMpi:  // MPI knows which of its ranks share this host
      DDPKIT_RETURN_IF_ERROR(mpi::EnsureInitialized());
      return mpi::RanksOnThisHost();
    case RanksHereFrom::kLocalWorldSize: break;
  }
  DDPKIT_ASSIGN_OR_RETURN(const int local, PositiveFromEnv("LOCAL_WORLD_SIZE"));
  return std::max(1, local);
}

}  // namespace

std::string ThreadBudget::ToString() const {
  const std::string threads_text =
      StrCat(threads, " compute thread", threads == 1 ? "" : "s", " per rank");
  if (source == "cores bound to this rank") {
    return StrCat(threads_text, " (", cores, " core", cores == 1 ? "" : "s",
                  " bound to this rank by its launcher)");
  }
  if (source == "cores / ranks") {
    return StrCat(threads_text, " (", cores, " cores / ", ranks_here, " rank",
                  ranks_here == 1 ? "" : "s", " here)");
  }
  return StrCat(threads_text, " (from ", source, "; ", cores, " cores, ", ranks_here, " rank",
                ranks_here == 1 ? "" : "s", " here)");
}

absl::StatusOr<ThreadBudget> ResolveThreadBudget(const WorldSpec& world) {
  ThreadBudget budget{.cores = AvailableCores()};
  DDPKIT_ASSIGN_OR_RETURN(budget.ranks_here, RanksHere(world));
  if (world.threads_per_rank > 0) {
    budget.threads = world.threads_per_rank;
    budget.source = "--threads-per-rank";
    return budget;
  }
  for (const char* name : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}) {
    DDPKIT_ASSIGN_OR_RETURN(const int n, PositiveFromEnv(name));
    if (n > 0) {
      budget.threads = n;
      budget.source = name;
      return budget;
    }
  }
  // mpirun binds each rank to its own cores by default: the affinity is already its share.
  if (InfoOf(world.backend).launcher == Launcher::kMpirun &&
      budget.cores < static_cast<int>(std::thread::hardware_concurrency())) {
    budget.threads = budget.cores;
    budget.source = "cores bound to this rank";
    return budget;
  }
  budget.threads = std::max(1, budget.cores / budget.ranks_here);
  budget.source = "cores / ranks";
  return budget;
}

int ThreadsPerProcess(int nproc_per_node) {
  return std::max(1, AvailableCores() / std::max(1, nproc_per_node));
}

}  // namespace ddpkit::comm
