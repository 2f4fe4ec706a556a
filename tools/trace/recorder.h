// One rank's trace, recorded while the job runs: phases and hooks on the compute lane (from the
// job's loop and the reducer's trace events), collectives on the communication lane (from the
// process group's listener, with the tag saying what each is for).
//
// Recording allocates nothing once the recorder exists: records go into buffers reserved up
// front; when one is full, later records are counted as dropped instead (the trace says so).
// Compute records are written only by the rank's own thread; collective records by that thread
// (queued) and the communication thread (started, finished), under a mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "comm/collective_listener.h"
#include "reducer/trace.h"

namespace ddpkit::trace {

using TraceClock = std::chrono::steady_clock;

// What a compute-lane record is.
enum class ComputeKind : uint8_t {
  kForward,         // span: the job's forward (DDP forward and the loss)
  kBackward,        // span: the job's backward call (finalize runs at its end)
  kFinalize,        // span: the reducer waits for the buckets and writes .grad back
  kOptimizer,       // span: the optimizer step (ZeRO: with its broadcasts)
  kShadow,          // span: a joined rank shadowing one iteration of the active ranks
  kUnusedSearch,    // span: find_unused_parameters' graph search, inside forward
  kHook,            // instant: a parameter's gradient is ready (param, bucket)
  kBucketReady,     // instant: a bucket's last gradient arrived (bucket)
  kBucketLaunched,  // instant: the reducer handed the bucket to its comm hook or allreduce
  kBucketReduced,   // instant: the bucket's result completed, as finalize found it
  kRebuild,         // instant: buckets rebuilt in gradient-arrival order
  kNoSync,          // instant: a forward under no_sync (its backward only accumulates)
  kMarker,          // instant: the job says where it is ("bucket cap 5 MiB", "local + sum")
};

struct ComputeEvent {
  ComputeKind kind = ComputeKind::kForward;
  int32_t iteration = -1;
  int32_t micro_batch = -1;
  int32_t param = -1;
  int32_t bucket = -1;
  int32_t label = -1;                // kMarker: index into RankTrace::labels
  int64_t start_ns = 0, end_ns = 0;  // since the job's epoch; equal for instants
};

struct CollectiveEvent {
  uint64_t sequence_number = 0;
  comm::OpType op = comm::OpType::kBarrier;
  comm::ReduceOp reduce_op = comm::ReduceOp::kSum;
  DType dtype = DType::kFloat32;
  int64_t count = 0;
  comm::CollectiveTag tag;
  int32_t iteration = -1;
  int64_t queued_ns = -1, started_ns = -1, finished_ns = -1;  // -1: not (yet)
  bool ok = true;
};

// A rank's records after the run.
struct RankTrace {
  int rank = 0;
  std::vector<ComputeEvent> compute = {};
  std::vector<CollectiveEvent> collectives = {};
  std::vector<std::string> labels = {};  // the markers' texts
  int64_t dropped = 0;                   // records that did not fit
};

class TraceRecorder final : public reducer::TraceObserver, public comm::CollectiveListener {
 public:
  // `epoch`: time 0 of the job's clock, on this process's steady clock. Capacity: records kept.
  TraceRecorder(int rank, TraceClock::time_point epoch, size_t compute_capacity,
                size_t collective_capacity);

  // The job's loop: the iteration that records are stamped with from now on.
  void SetIteration(int iteration) { iteration_ = iteration; }
  int iteration() const { return iteration_; }
  void Span(ComputeKind kind, TraceClock::time_point start, TraceClock::time_point end,
            int micro_batch = -1);
  // A labelled instant (rare: it allocates its text).
  void Marker(std::string label);

  // reducer::TraceObserver (the rank's thread).
  void OnEvent(const reducer::TraceEvent& event) override;
  // comm::CollectiveListener.
  void OnQueued(const comm::Collective& c) override;
  void OnStarted(uint64_t sequence_number) override;
  void OnFinished(uint64_t sequence_number, bool ok) override;

  // The records so far (call once nothing is in flight).
  RankTrace Take();

 private:
  int64_t Since(TraceClock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - epoch_).count();
  }
  void Add(const ComputeEvent& record);
  CollectiveEvent* Find(uint64_t sequence_number);  // with mu_ held

  const int rank_;
  const TraceClock::time_point epoch_;
  int iteration_ = -1;
  std::vector<ComputeEvent> compute_;
  std::vector<std::string> labels_;
  int64_t dropped_compute_ = 0;
  std::mutex mu_;
  std::vector<CollectiveEvent> collectives_;  // guarded by mu_, in sequence order
  int64_t dropped_collectives_ = 0;           // guarded by mu_
};

// Times a compute-lane span for a recorder that may be null (tracing off: nothing happens).
class ScopedSpan {
 public:
  ScopedSpan(TraceRecorder* recorder, ComputeKind kind, int micro_batch = -1)
      : recorder_(recorder), kind_(kind), micro_batch_(micro_batch) {
    if (recorder_ != nullptr) start_ = TraceClock::now();
  }
  ~ScopedSpan() {
    if (recorder_ != nullptr) recorder_->Span(kind_, start_, TraceClock::now(), micro_batch_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  TraceRecorder* recorder_;
  ComputeKind kind_;
  int micro_batch_;
  TraceClock::time_point start_{};
};

}  // namespace ddpkit::trace
