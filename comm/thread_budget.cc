#include "comm/thread_budget.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "autograd/compute_threads.h"
#include "autograd/error.h"
#include "comm/world.h"

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
  if (world.backend == "threads") return std::max(1, world.world_size);
  DDPKIT_ASSIGN_OR_RETURN(const int local, PositiveFromEnv("LOCAL_WORLD_SIZE"));
  return std::max(1, local);
}

}  // namespace

std::string ThreadBudget::ToString() const {
  const std::string threads_text =
      StrCat(threads, " compute thread", threads == 1 ? "" : "s", " per rank");
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
  budget.threads = std::max(1, budget.cores / budget.ranks_here);
  budget.source = "cores / ranks";
  return budget;
}

int ThreadsPerProcess(int nproc_per_node) {
  return std::max(1, AvailableCores() / std::max(1, nproc_per_node));
}

}  // namespace ddpkit::comm
