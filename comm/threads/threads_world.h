// The `threads` backend: N ranks as threads of one process (the default for `ddpkit train` and
// the tests).
//
// Each collective is a rendezvous on its sequence number: every rank posts its input in the
// world's slot for that number and waits — up to the group timeout — for the others. The first
// rank to see all of them compares the calls (op, dtype, counts; a mismatch fails every rank
// with the same message). Then:
//  * allreduce (float32/64, int32/64, from kChunkedMinBytes) works in place on the ranks' own
//    buffers, cut into slices of about kSliceBytes: each rank's communication thread claims the
//    next unclaimed slice, reduces it — every rank's buffer, in rank order — into its own buffer
//    and copies the result into the others', until none is left; then it waits for the slices
//    the others claimed. Whichever threads the scheduler runs do the work, so a rank whose
//    thread is off its core (compute threads outnumber cores during backward) delays no one —
//    where a reduce-scatter then all-gather in step would stall at every step. A slice is
//    reduced then copied while still in cache;
//  * every other collective, and a smaller allreduce, stages copies of the inputs, and each rank
//    computes its own output from them.
// Every wait spins briefly before it sleeps (comm/spin_wait.h): a hand-off between threads
// then takes a few µs, not a futex wake-up.
// Every element is reduced in rank order by exactly one rank, so results are exact,
// deterministic and bitwise identical on every rank, whatever the thread timing.
//
// CUDA tensors (N ranks on one GPU, which NCCL forbids) take the same steps on the device: each
// rank's kernels and copies run on its group's communication stream, after its input is ready
// (the collective's ready event), and every phase ends with that stream drained before the host
// barrier lets the other ranks read what it wrote. The sums are the host's, in rank order.
//
// A rank that fails can Abort the world so the others stop waiting at once instead of at the
// timeout; RunThreadsWorld does that for you.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "comm/process_group.h"
#include "comm/spin_wait.h"

namespace ddpkit::comm {

class ThreadsWorld {
 public:
  // Allreduces from this size are chunked; smaller ones staged.
  static constexpr int64_t kChunkedMinBytes = 32 << 10;
  // The chunked allreduce's slice: small enough that the result, just reduced, is still in cache
  // when it is copied to the other buffers; large enough that claiming one costs nothing.
  static constexpr int64_t kSliceBytes = 256 << 10;

  explicit ThreadsWorld(int size);
  int size() const { return size_; }

  // Marks `rank` as failed with `reason`: collectives that wait for it fail with Unavailable.
  void Abort(int rank, const absl::Status& reason);
  // Marks `rank` as finished: it will issue no more collectives, so any that wait for it fail
  // at once (Unavailable, naming it) instead of at the timeout.
  void Depart(int rank);

  // Called by ProcessGroupThreads on its communication thread.
  absl::Status Exchange(int rank, const Collective& c, absl::Duration timeout);

 private:
  struct Slot {
    std::vector<CollectiveFingerprint> prints;  // per rank, valid where arrived[r]
    std::vector<Tensor> staged;                 // per rank: its input, or a copy of it
    // Chunked allreduce, used without mu_: the next slice to claim, and the slices finished.
    std::atomic<int64_t> next_slice{0};
    std::atomic<int64_t> slices_done{0};
    std::vector<bool> arrived;
    int num_arrived = 0;
    int num_done = 0;
    bool checked = false;
    absl::Status verdict;
    // Set by the first rank whose wait ended without everyone: every rank of this slot, waiting
    // or arriving later, fails with this same error.
    absl::Status failure;
  };
  // The steps of Exchange, with mu_ held through `lock`. Arrive stages this rank's input in the
  // slot of the collective's sequence number; AwaitEveryone waits for the other ranks and
  // returns the slot's failure (the same for every rank of it) when they cannot all come;
  // ChunkedAllreduce is the in-place allreduce of large buffers (see above).
  Slot& Arrive(int rank, const Collective& c, bool chunked, std::unique_lock<std::mutex>& lock);
  absl::Status AwaitEveryone(Slot& slot, const Collective& c,
                             std::chrono::steady_clock::time_point deadline, absl::Duration timeout,
                             std::unique_lock<std::mutex>& lock);
  void ChunkedAllreduce(int rank, const Collective& c, Slot& slot,
                        std::unique_lock<std::mutex>& lock);
  // Every change a waiter may be waiting for: bumps epoch_ (what spinning waiters poll), then
  // wakes the sleeping ones.
  void Notify() {
    epoch_.fetch_add(1, std::memory_order_release);
    changed_.notify_all();
  }
  // changed_.wait_until(lock, deadline, done), after spinning on epoch_ for a while (no
  // deadline: time_point::max()).
  template <typename Done>
  bool WaitUntil(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline,
                 Done done) {
    if (done()) return true;
    uint64_t seen = epoch_.load(std::memory_order_acquire);
    lock.unlock();
    const bool changed = SpinUntil([&] { return epoch_.load(std::memory_order_acquire) != seen; });
    lock.lock();
    if (changed && done()) return true;
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      changed_.wait(lock, done);
      return true;
    }
    return changed_.wait_until(lock, deadline, done);
  }
  // Why `slot` cannot complete now (departed or aborted ranks), or OK while it still may.
  absl::Status Blocker(const Slot& slot, const std::string& what) const;  // with mu_ held
  static void Compute(int rank, const Collective& c,
                      const std::vector<CollectiveFingerprint>& prints,
                      const std::vector<Tensor>& staged);
  // Staging buffers are recycled once every rank has read a slot, so steady-state collectives
  // allocate nothing (fresh pages would cost more than the copy itself). With mu_ held.
  Tensor AcquireStaging(DType dtype, int64_t numel, Device device);
  void RecycleStaging(Slot& slot);

  const int size_;
  std::mutex mu_;
  std::condition_variable changed_;  // a rank arrived, failed or departed
  std::atomic<uint64_t> epoch_{0};   // bumped with every notify of changed_
  // Guarded by mu_. node_hash_map: a waiting rank holds a Slot& while others insert slots.
  absl::node_hash_map<uint64_t, Slot> slots_;
  absl::Status aborted_;  // the first rank failure
  std::vector<bool> departed_;
  std::vector<std::shared_ptr<Storage>> pool_;  // idle staging storage
};

class ProcessGroupThreads final : public ProcessGroup {
 public:
  // `on_closed`, if set, runs in the destructor once every queued collective has finished (so it
  // sees the final flight recorder, failures during that drain included).
  ProcessGroupThreads(std::shared_ptr<ThreadsWorld> world, int rank,
                      ProcessGroupOptions options = {},
                      std::function<void(const ProcessGroup&)> on_closed = nullptr);
  ~ProcessGroupThreads() override;
  std::string_view backend_name() const override { return BackendName(Backend::kThreads); }
  bool SupportsDevice(Device) const override { return true; }

 private:
  absl::Status Execute(const Collective& c) override;
  // Exchange compares the calls on every collective, at every debug level.
  absl::Status VerifyCallsMatch(const Collective&) override { return absl::OkStatus(); }

  std::shared_ptr<ThreadsWorld> world_;
  std::function<void(const ProcessGroup&)> on_closed_;
};

// Runs body(group) for every rank on its own thread, each with its own group of one shared
// world, and returns OK or the lowest failing rank's error prefixed "rank R: ". A rank that
// fails (an error or an exception) aborts the world, and a rank that finishes departs from it,
// so the others never wait for the timeout on a rank that is gone. With round_robin_groups
// K > 1, K worlds: each rank's group is a ProcessGroupRoundRobin (comm/round_robin.h) over its
// group of each.
absl::Status RunThreadsWorld(int size, const std::function<absl::Status(ProcessGroup&)>& body,
                             ProcessGroupOptions options = {}, int round_robin_groups = 1);

}  // namespace ddpkit::comm
