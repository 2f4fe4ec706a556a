#include "autograd/compute_threads.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <thread>

#include "autograd/error.h"

namespace ddpkit {

int ComputeThreads() { return openblas_get_num_threads(); }

void SetComputeThreads(int threads) {
  DDPKIT_CHECK(threads >= 1, "compute threads must be >= 1, got ", threads);
  openblas_set_num_threads(threads);
}

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace ddpkit
