#include "autograd/compute_threads.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "autograd/error.h"

namespace ddpkit {
namespace {

// 0 until SetComputeThreads: OpenBLAS's own choice (its environment variables, else every core).
std::atomic<int> g_threads{0};

}  // namespace

int ComputeThreads() {
  const int threads = g_threads.load(std::memory_order_relaxed);
  return threads > 0 ? threads : openblas_get_num_threads();
}

void SetComputeThreads(int threads) {
  DDPKIT_CHECK(threads >= 1, "compute threads must be >= 1, got ", threads);
  openblas_set_num_threads(threads);  // one pool for the process
  // oneDNN's OpenMP teams are per calling thread; each applies this at its next GEMM.
  g_threads.store(threads, std::memory_order_relaxed);
}

int AvailableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace ddpkit
