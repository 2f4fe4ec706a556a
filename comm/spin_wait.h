// SpinUntil: the short busy-wait a hand-off tries before it sleeps.
//
// Sleeping on a futex and being woken costs 5–50 µs on a virtual machine (the sleeper's idle
// vCPU must be interrupted back to life); a small collective in the threads world takes a few
// µs. So a thread waiting for a peer, its queue or a Work first polls its condition for a short
// budget, and only then blocks on its condition variable. It yields between polls: ranks and
// communication threads outnumber the cores on a small machine, and the thread it waits for may
// need this core to get there.
//
// DDPKIT_SPIN_US sets the budget in microseconds (default 100; 0 turns spinning off).
#pragma once

#include <sched.h>

#include <chrono>

namespace ddpkit::comm {

// The budget, read once from DDPKIT_SPIN_US.
std::chrono::nanoseconds SpinBudget();

// Polls `ready` until it returns true (then true) or the budget has passed (then false).
template <typename Ready>
bool SpinUntil(Ready&& ready) {
  const std::chrono::nanoseconds budget = SpinBudget();
  if (budget.count() == 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (int polls = 0;; ++polls) {
    if (ready()) return true;
    // Yield every few polls: measured on 2 cores with 4 threads in the hand-off (two ranks,
    // each with its communication thread), every 4th gives 8 µs per 1 KB allreduce where
    // every 16th gives 12, every poll 11, and pause-only spinning 30.
    if (polls % 4 == 3) {
      if (std::chrono::steady_clock::now() > deadline) return ready();
      sched_yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // tells the core this is a spin loop
#endif
    }
  }
}

}  // namespace ddpkit::comm
