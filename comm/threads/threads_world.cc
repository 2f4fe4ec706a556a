#include "comm/threads/threads_world.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_join.h"
#include "autograd/base/log.h"
#include "comm/cuda/reduce.h"
#include "comm/reduce.h"
#include "comm/round_robin.h"
#include "comm/widen.h"

namespace ddpkit::comm {
namespace {

// Offset of rank r's segment when each rank has counts[rank] elements.
int64_t OffsetOf(const std::vector<int64_t>& counts, int r) {
  int64_t offset = 0;
  for (int i = 0; i < r; ++i) offset += counts[i];
  return offset;
}

std::byte* At(const Tensor& t, int64_t element) {
  return static_cast<std::byte*>(t.raw_data()) + element * ElementSize(t.dtype());
}

// Each raw step on the host, or on the GPU that holds the tensors.
void ReduceIntoOn(Device device, void* dst, const void* src, int64_t n, DType dtype, ReduceOp op) {
  if constexpr (kWithCuda) {
    if (device.is_cuda()) return cuda::ReduceInto(dst, src, n, dtype, op, device);
  }
  ReduceInto(dst, src, n, dtype, op);
}

void ReduceRankOrderOn(Device device, const std::vector<const void*>& inputs, void* out, int64_t n,
                       DType dtype, ReduceOp op) {
  if constexpr (kWithCuda) {
    if (device.is_cuda()) return cuda::ReduceRankOrder(inputs, out, n, dtype, op, device);
  }
  ReduceRankOrder(inputs, out, n, dtype, op);
}

void CopyBytesOn(Device device, void* dst, const void* src, size_t nbytes) {
  if (device.is_cuda()) return cuda::Copy(dst, device, src, device, nbytes);
  std::memcpy(dst, src, nbytes);
}

// Before a host barrier lets the other ranks read what this rank's GPU work wrote.
void DrainStream(Device device) {
  if (device.is_cuda()) cuda::Synchronize(cuda::CurrentStream(device));
}

// out <- op over the same `n` elements of every staged input at `offset`, in rank order.
// Reduces straight into `out` (only this rank reads or writes it), halves through float32
// (comm/widen.h).
void ReduceSegments(const std::vector<Tensor>& staged, int64_t offset, int64_t n, ReduceOp op,
                    const Tensor& out) {
  const int size = static_cast<int>(staged.size());
  const absl::Status reduced = ReduceWidened(out, op, size, [&](const Tensor& acc) {
    acc.CopyFrom(staged[0].Rows(offset, offset + n));
    for (int r = 1; r < size; ++r) {
      const Tensor part = AsType(staged[r].Rows(offset, offset + n), acc.dtype());
      ReduceIntoOn(out.device(), acc.raw_data(), part.raw_data(), n, acc.dtype(), op);
    }
    return absl::OkStatus();
  });
  DDPKIT_CHECK(reduced.ok(), reduced.message());
}

// A rank's flight recorder as its thread ended, and whether it dumped it itself.
struct RankRecord {
  std::vector<FlightRecorder::Entry> entries;
  bool dumped = false;
  static RankRecord Of(const ProcessGroup& group) {
    return {group.flight_recorder().Entries(), !group.flight_recorder_dump_path().empty()};
  }
};

// When some rank failed, every rank that did not dump its recorder itself (it finished, or it
// failed outside a collective) dumps it now, so `ddpkit fr analyze` sees every rank — a rank
// that departed early is the usual culprit.
void DumpTheRest(const std::vector<RankRecord>& records, const std::vector<absl::Status>& results,
                 const ProcessGroupOptions& options) {
  int failed = -1;
  for (int r = 0; r < static_cast<int>(results.size()) && failed < 0; ++r) {
    if (!results[r].ok()) failed = r;
  }
  if (failed < 0 || options.fr_dump_dir.empty()) return;
  for (int r = 0; r < static_cast<int>(records.size()); ++r) {
    if (records[r].dumped) continue;
    const std::string reason =
        results[r].ok()
            ? StrCat("rank ", r, " finished its work without an error (dumped after rank ", failed,
                     " failed)")
            : std::string(results[r].message());
    absl::StatusOr<std::string> path =
        WriteFlightRecorderDump(options.fr_dump_dir, records[r].entries,
                                {.rank = r,
                                 .world_size = static_cast<int>(records.size()),
                                 .backend = std::string(BackendName(Backend::kThreads)),
                                 .reason = reason,
                                 .timeout = options.timeout});
    if (!path.ok()) Log(LogLevel::kError, std::string(path.status().message()));
  }
}

}  // namespace

ThreadsWorld::ThreadsWorld(int size) : size_(size), departed_(size, false) {
  DDPKIT_CHECK(size >= 1, "[ThreadsWorld] world size must be >= 1, got ", size);
}

void ThreadsWorld::Depart(int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    departed_[rank] = true;
  }
  Notify();
}

absl::Status ThreadsWorld::Blocker(const Slot& slot, const std::string& what) const {
  if (!aborted_.ok()) {
    return absl::UnavailableError(StrCat(what, " cannot complete: ", aborted_.message()));
  }
  std::vector<int> gone;
  for (int r = 0; r < size_; ++r) {
    if (!slot.arrived[r] && departed_[r]) gone.push_back(r);
  }
  if (gone.empty()) return absl::OkStatus();
  return absl::UnavailableError(StrCat(
      what, " cannot complete: rank", gone.size() > 1 ? "s " : " ", absl::StrJoin(gone, ", "),
      gone.size() > 1 ? " have" : " has",
      " finished without issuing it (uneven inputs? `ddpkit join` shows how Join handles them)"));
}

void ThreadsWorld::Abort(int rank, const absl::Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) {
      aborted_ = absl::UnavailableError(StrCat("rank ", rank, " failed: ", reason.message()));
    }
  }
  Notify();
}

Tensor ThreadsWorld::AcquireStaging(DType dtype, int64_t numel, Device device) {
  const size_t nbytes = numel * ElementSize(dtype);
  std::shared_ptr<Storage> storage;
  // The smallest idle buffer on `device` that fits.
  auto best = pool_.end();
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if ((*it)->device() == device && (*it)->nbytes() >= nbytes &&
        (best == pool_.end() || (*it)->nbytes() < (*best)->nbytes()))
      best = it;
  }
  if (best != pool_.end()) {
    storage = std::move(*best);
    pool_.erase(best);
  } else {
    storage = std::make_shared<Storage>(nbytes, device);
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = {numel};
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void ThreadsWorld::RecycleStaging(Slot& slot) {
  constexpr size_t kMaxPooled = 16;
  auto recycle = [&](Tensor& t) {
    // Only buffers the world allocated (sole owner: not a caller's input tensor).
    if (t.defined() && t.impl()->storage.use_count() == 1 && pool_.size() < kMaxPooled) {
      pool_.push_back(t.impl()->storage);
    }
    t = Tensor();
  };
  for (Tensor& t : slot.staged) recycle(t);
}

absl::Status ThreadsWorld::Exchange(int rank, const Collective& c, absl::Duration timeout) {
  // A world of one: in-place collectives leave the tensor as it is (nothing to stage or copy).
  if (size_ == 1 &&
      (c.op == OpType::kAllreduce || c.op == OpType::kBroadcast || c.op == OpType::kBarrier)) {
    return absl::OkStatus();
  }
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  // Chunked allreduce reads the inputs in place; everything else reads private copies. A small
  // allreduce is cheaper staged: each rank then reduces all of it alone, with no barrier after.
  const bool chunked = c.op == OpType::kAllreduce && !IsHalf(c.input.dtype()) && size_ > 1 &&
                       c.input.nbytes() >= kChunkedMinBytes &&
                       (c.device.is_cpu() || size_ <= cuda::kMaxRankOrderInputs);
  // The other ranks read this rank's GPU input directly: it must be complete, not just queued.
  if (c.ready) c.ready->Synchronize();
  std::unique_lock<std::mutex> lock(mu_);
  Slot& slot = Arrive(rank, c, chunked, lock);
  if (absl::Status failure = AwaitEveryone(slot, c, deadline, timeout, lock); !failure.ok()) {
    lock.unlock();
    Notify();  // others waiting on this slot fail with it too
    return failure;
  }
  if (!slot.checked) {
    slot.verdict = CheckCollectivesMatch(slot.prints);
    slot.checked = true;
  }
  const absl::Status verdict = slot.verdict;
  if (verdict.ok() && chunked) {
    ChunkedAllreduce(rank, c, slot, lock);
  } else if (verdict.ok()) {
    // The slot cannot go away while this rank computes: it is erased only when every rank
    // is done with it, and node_hash_map keeps its address.
    lock.unlock();  // compute without holding the world lock
    Compute(rank, c, slot.prints, slot.staged);
    DrainStream(c.device);
    lock.lock();
  }
  if (++slot.num_done == size_) {
    RecycleStaging(slot);
    slots_.erase(c.sequence_number);
  }
  return verdict;
}

ThreadsWorld::Slot& ThreadsWorld::Arrive(int rank, const Collective& c, bool chunked,
                                         std::unique_lock<std::mutex>& lock) {
  Tensor staged = chunked ? c.input : Tensor();
  if (c.input.defined() && !chunked) {
    staged = AcquireStaging(c.input.dtype(), c.input.numel(), c.device);
    lock.unlock();  // copy without holding the world lock
    staged.CopyFrom(c.input);
    DrainStream(c.device);
    lock.lock();
  }
  Slot& slot = slots_[c.sequence_number];
  if (slot.prints.empty()) {
    slot.prints.resize(size_);
    slot.staged.resize(size_);
    slot.arrived.assign(size_, false);
  }
  slot.prints[rank] = CollectiveFingerprint::Of(c);
  slot.staged[rank] = staged;
  slot.arrived[rank] = true;
  ++slot.num_arrived;
  Notify();
  return slot;
}

absl::Status ThreadsWorld::AwaitEveryone(Slot& slot, const Collective& c,
                                         std::chrono::steady_clock::time_point deadline,
                                         absl::Duration timeout,
                                         std::unique_lock<std::mutex>& lock) {
  const std::string what = StrCat(OpTypeName(c.op), " (sequence number ", c.sequence_number,
                                  ", world size ", size_, ")");
  WaitUntil(lock, deadline, [&] {
    return slot.num_arrived == size_ || !slot.failure.ok() || !Blocker(slot, what).ok();
  });
  // A failed slot stays in the map, so a rank arriving late fails at once with the same error.
  if (slot.num_arrived == size_ || !slot.failure.ok()) return slot.failure;
  slot.failure = Blocker(slot, what);
  if (!slot.failure.ok()) return slot.failure;
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (!slot.arrived[r]) missing.push_back(r);
  }
  slot.failure = absl::DeadlineExceededError(
      StrCat(what, " timed out after ", absl::FormatDuration(timeout), ": rank",
             missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "),
             " did not arrive; they may have failed, finished early or issued different "
             "collectives"));
  return slot.failure;
}

void ThreadsWorld::ChunkedAllreduce(int rank, const Collective& c, Slot& slot,
                                    std::unique_lock<std::mutex>& lock) {
  // Every rank is in this slot already; it stays until all have left, and so do the buffers.
  const int64_t n = c.input.numel();
  const DType dtype = c.input.dtype();
  const Device device = c.device;
  const size_t element = ElementSize(dtype);
  // Slices that stay in cache on the host; one per rank on a GPU (each ends in a stream drain).
  const int64_t num_slices =
      device.is_cuda() ? size_
                       : std::clamp<int64_t>(n * element / kSliceBytes, size_, n / size_ + 1);
  auto bounds = [&](int64_t s) {
    return std::pair<int64_t, int64_t>{n * s / num_slices, n * (s + 1) / num_slices};
  };
  lock.unlock();
  std::vector<const void*> inputs(size_);
  // Claim the next unclaimed slice, reduce it (every rank's buffer in rank order) into this
  // rank's buffer, copy the result into every other rank's; until none is left. Only the
  // claimer touches a slice, so no other locking is needed.
  for (int64_t s; (s = slot.next_slice.fetch_add(1, std::memory_order_relaxed)) < num_slices;) {
    auto [begin, end] = bounds(s);
    for (int r = 0; r < size_; ++r) inputs[r] = At(slot.staged[r], begin);
    void* own = At(c.output, begin);
    ReduceRankOrderOn(device, inputs, own, end - begin, dtype, c.reduce_op);
    if (c.reduce_op == ReduceOp::kAvg) DivideInPlaceOn(device, own, end - begin, dtype, size_);
    for (int r = 0; r < size_; ++r) {
      if (r != rank) CopyBytesOn(device, At(slot.staged[r], begin), own, (end - begin) * element);
    }
    DrainStream(device);
    if (slot.slices_done.fetch_add(1, std::memory_order_acq_rel) + 1 == num_slices) {
      lock.lock();
      Notify();
      lock.unlock();
    }
  }
  // Wait for the slices other ranks claimed: then every buffer holds the whole result, and no
  // one reads or writes any of them again.
  lock.lock();
  WaitUntil(lock, std::chrono::steady_clock::time_point::max(),
            [&] { return slot.slices_done.load(std::memory_order_acquire) == num_slices; });
}

void ThreadsWorld::Compute(int rank, const Collective& c,
                           const std::vector<CollectiveFingerprint>& prints,
                           const std::vector<Tensor>& staged) {
  const int size = static_cast<int>(staged.size());
  switch (c.op) {
    case OpType::kAllreduce:
      ReduceSegments(staged, 0, c.output.numel(), c.reduce_op, c.output);
      return;
    case OpType::kBroadcast: c.output.CopyFrom(staged[c.root]); return;
    case OpType::kAllgather:
    case OpType::kAllgatherV: {
      int64_t offset = 0;
      for (int r = 0; r < size; ++r) {
        const int64_t n = staged[r].numel();
        c.output.Rows(offset, offset + n).CopyFrom(staged[r]);
        offset += n;
      }
      return;
    }
    case OpType::kReduceScatter:
      ReduceSegments(staged, OffsetOf(c.counts, rank), c.counts[rank], c.reduce_op, c.output);
      return;
    case OpType::kAllToAllV: {
      int64_t out_offset = 0;
      for (int peer = 0; peer < size; ++peer) {
        const int64_t n = c.recv_counts[peer];
        const int64_t in_offset = OffsetOf(prints[peer].counts, rank);
        CopyBytesOn(c.device, At(c.output, out_offset), At(staged[peer], in_offset),
                    n * ElementSize(c.output.dtype()));
        out_offset += n;
      }
      return;
    }
    case OpType::kBarrier: return;
  }
}

ProcessGroupThreads::ProcessGroupThreads(std::shared_ptr<ThreadsWorld> world, int rank,
                                         ProcessGroupOptions options,
                                         std::function<void(const ProcessGroup&)> on_closed)
    : ProcessGroup(rank, world->size(), options),
      world_(std::move(world)),
      on_closed_(std::move(on_closed)) {
  StartCommThread();
}

ProcessGroupThreads::~ProcessGroupThreads() {
  StopCommThread();
  if (on_closed_) on_closed_(*this);
}

absl::Status ProcessGroupThreads::Execute(const Collective& c) {
  return world_->Exchange(rank(), c, options().timeout);
}

namespace {

// This rank's group: one group of worlds[0], or a round-robin composite over one group of each
// world. `on_closed` sees the group the body got, once it has run everything queued.
std::unique_ptr<ProcessGroup> MakeRankGroup(
    const std::vector<std::shared_ptr<ThreadsWorld>>& worlds, int rank,
    const ProcessGroupOptions& options, std::function<void(const ProcessGroup&)> on_closed) {
  if (worlds.size() == 1) {
    return std::make_unique<ProcessGroupThreads>(worlds[0], rank, options, std::move(on_closed));
  }
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  for (const auto& world : worlds) {
    groups.push_back(std::make_unique<ProcessGroupThreads>(world, rank, options));
  }
  return std::make_unique<ProcessGroupRoundRobin>(std::move(groups), std::move(on_closed));
}

}  // namespace

absl::Status RunThreadsWorld(int size, const std::function<absl::Status(ProcessGroup&)>& body,
                             ProcessGroupOptions options, int round_robin_groups) {
  DDPKIT_CHECK(round_robin_groups >= 1, "[RunThreadsWorld] round_robin_groups must be >= 1, got ",
               round_robin_groups);
  std::vector<std::shared_ptr<ThreadsWorld>> worlds;
  for (int i = 0; i < round_robin_groups; ++i) {
    worlds.push_back(std::make_shared<ThreadsWorld>(size));
  }
  std::vector<absl::Status> results(size);
  std::vector<RankRecord> records(size);
  std::vector<std::thread> threads;
  // GPU tensors made by this thread are finished before the ranks use them on their own streams
  // (and each rank's are finished before this thread reads them after the join).
  cuda::SynchronizeAll();
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      SetThreadLogPrefix(StrCat("rank ", rank));
      absl::Status status;
      // The recorder is taken once the group has run what the body left queued.
      auto keep_record = [&records, rank](const ProcessGroup& g) {
        records[rank] = RankRecord::Of(g);
      };
      try {
        std::unique_ptr<ProcessGroup> group =
            MakeRankGroup(worlds, rank, options,
                          options.fr_dump_dir.empty() ? nullptr : std::function(keep_record));
        status = body(*group);
        cuda::SynchronizeAll();
      } catch (const Error& e) {
        status = e.ToStatus();
      } catch (const std::exception& e) {
        status = absl::InternalError(e.what());
      }
      for (const auto& world : worlds) {
        if (!status.ok()) {
          world->Abort(rank, status);
        } else {
          world->Depart(rank);
        }
      }
      results[rank] = status;
    });
  }
  for (std::thread& t : threads) t.join();
  DumpTheRest(records, results, options);
  for (int rank = 0; rank < size; ++rank) {
    if (!results[rank].ok()) {
      return absl::Status(results[rank].code(),
                          StrCat("rank ", rank, ": ", results[rank].message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ddpkit::comm
