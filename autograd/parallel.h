// ParallelFor: an elementwise loop over [0, n) split across the rank's compute threads (the
// thread budget, autograd/compute_threads.h), as PyTorch's at::parallel_for splits its
// elementwise kernels. A large model's SGD step and DDP's bucket copies are passes over every
// parameter's bytes; with a budget of two threads they take half the time. Small loops, and a
// budget of one (each rank of a threads world on its own core), stay on the calling thread.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "autograd/compute_threads.h"

namespace ddpkit {

// Below this many elements a loop is not worth a team of threads.
inline constexpr int64_t kParallelGrain = 1 << 16;

// Calls body(begin, end) on disjoint ranges covering [0, n), possibly at once on several threads.
template <typename Body>
void ParallelFor(int64_t n, Body body) {
  const int threads = ComputeThreads();
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer cannot see libgomp's (uninstrumented) barriers: stay on one thread.
  const bool parallel = false;
#else
  const bool parallel = threads > 1 && n >= 2 * kParallelGrain;
#endif
  if (!parallel) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  const int teams = static_cast<int>(std::min<int64_t>(threads, n / kParallelGrain));
#pragma omp parallel for num_threads(teams) schedule(static)
  for (int t = 0; t < teams; ++t) body(n * t / teams, n * (t + 1) / teams);
}

}  // namespace ddpkit
