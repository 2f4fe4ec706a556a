// The scheduling policy of Gloo's event-loop thread, and why ddpkit changes it.
//
// Gloo's TCP device runs one thread that waits in epoll for every pair's socket. When bytes
// arrive while another thread of the process holds that pair's mutex (the thread running the
// collective posts its sends and receives under it), the loop's handler gives up (try_lock) and
// the level-triggered epoll hands it the same event at once: the loop spins. Its wake-up, as an
// ordinary thread's, preempts whatever runs on its core — on a machine with no spare core, often
// the very thread holding the mutex — and then it spins until the scheduler's next tick. `perf`
// showed the loop in epoll_wait for most of a 4 KiB allreduce's 1-4 ms (docs/performance.md).
//
// SCHED_BATCH gives a thread the same share of the CPU as SCHED_OTHER but stops its wake-ups
// from preempting the running thread, so the holder finishes, sleeps, and the loop then runs.
// Linux threads inherit the policy of the thread that creates them, and Gloo starts its loop
// thread in the device's constructor: the device is created under the batch policy.
//
// The group's communication thread runs under SCHED_BATCH too. The caller hands it each
// collective and sleeps in Work::Wait; an ordinary thread's wake-up would preempt whatever runs
// on its core (on a machine with no spare core, a Gloo loop mid-transfer, say), and the
// collective and the waiter's wake-up come late. Measured: a 4-32 KiB allreduce went from
// 1.15-1.25x raw Gloo (same context) to 0.96-1.05x (docs/performance.md "Allreduce").
//
// DDPKIT_GLOO_LOOP=batch (the default) or inherit (the loop and communication threads run as
// Gloo and the system make them, as in PyTorch's ProcessGroupGloo): the second is the reference
// the benchmarks compare against.
#pragma once

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/attr.h>

#include <memory>

#include "absl/status/statusor.h"

namespace ddpkit::comm {

enum class GlooLoopPolicy { kBatch, kInherit };

// DDPKIT_GLOO_LOOP, or kBatch when it is unset; an error naming the accepted values otherwise.
absl::StatusOr<GlooLoopPolicy> GlooLoopPolicyFromEnv();

// Gloo's TCP device whose loop thread runs under `policy`. The calling thread's own policy is
// put back before this returns (also when Gloo throws). Where the policy cannot be set (a
// sandbox that forbids it), the device is created as Gloo makes it.
std::shared_ptr<gloo::transport::Device> CreateGlooDevice(const gloo::transport::tcp::attr& attr,
                                                          GlooLoopPolicy policy);

// Under kBatch, puts the calling thread (the communication thread) under SCHED_BATCH for the
// rest of its life; an ordinary (SCHED_OTHER) thread only, as CreateGlooDevice. Where the policy
// cannot be set, the thread stays as it is.
void ScheduleCommThread(GlooLoopPolicy policy);

}  // namespace ddpkit::comm
