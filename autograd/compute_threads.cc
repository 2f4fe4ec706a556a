#include "autograd/compute_threads.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "autograd/base/error.h"

namespace ddpkit {
namespace {

// 0 until SetComputeThreads: OpenBLAS's own choice (its environment variables, else every core).
// After it, the budget for OpenMP, and OpenBLAS on one thread.
std::atomic<int> g_threads{0};

}  // namespace

int ComputeThreads() {
  const int threads = g_threads.load(std::memory_order_relaxed);
  return threads > 0 ? threads : openblas_get_num_threads();
}

void SetComputeThreads(int threads) {
  DDPKIT_CHECK(threads >= 1, "compute threads must be >= 1, got ", threads);
  // The budget is spent by OpenMP teams: oneDNN's GEMMs and the elementwise loops
  // (autograd/parallel.h), each thread applying it at its next call. OpenBLAS, left with float64
  // and thin products, runs on the calling thread: its own pool of spinning workers, on the same
  // cores as OpenMP's, left a team's last thread waiting for a scheduler tick (a world-1 step of
  // the large MLP took 12.0 ms instead of 8.5).
  openblas_set_num_threads(1);
  g_threads.store(threads, std::memory_order_relaxed);
}

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace ddpkit
