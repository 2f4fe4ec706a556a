#include "tools/trace/recorder.h"

namespace ddpkit::trace {

TraceRecorder::TraceRecorder(int rank, TraceClock::time_point epoch, size_t compute_capacity,
                             size_t collective_capacity)
    : rank_(rank), epoch_(epoch) {
  compute_.reserve(compute_capacity);
  collectives_.reserve(collective_capacity);
}

void TraceRecorder::Add(const ComputeEvent& record) {
  if (compute_.size() == compute_.capacity()) {
    ++dropped_compute_;
    return;
  }
  compute_.push_back(record);
}

void TraceRecorder::Span(ComputeKind kind, TraceClock::time_point start, TraceClock::time_point end,
                         int micro_batch) {
  Add({.kind = kind,
       .iteration = iteration_,
       .micro_batch = micro_batch,
       .start_ns = Since(start),
       .end_ns = Since(end)});
}

void TraceRecorder::Marker(std::string label) {
  if (compute_.size() == compute_.capacity()) {  // dropped: keep no label for it either
    ++dropped_compute_;
    return;
  }
  const int64_t now = Since(TraceClock::now());
  labels_.push_back(std::move(label));
  Add({.kind = ComputeKind::kMarker,
       .iteration = iteration_,
       .label = static_cast<int32_t>(labels_.size() - 1),
       .start_ns = now,
       .end_ns = now});
}

void TraceRecorder::OnEvent(const reducer::TraceEvent& e) {
  using reducer::TraceEventType;
  ComputeEvent r{.iteration = iteration_,
                 .param = static_cast<int32_t>(e.param_index),
                 .bucket = static_cast<int32_t>(e.bucket_index),
                 .start_ns = Since(e.start),
                 .end_ns = Since(e.time)};
  switch (e.type) {
    case TraceEventType::kHookFired:
      r.kind = ComputeKind::kHook;
      r.bucket = static_cast<int32_t>(e.param_bucket);
      break;
    case TraceEventType::kBucketReady: r.kind = ComputeKind::kBucketReady; break;
    // The reducer's own stamps of a bucket's communication: DDP's logging data is timed from
    // these, so the trace's ddp_* figures (stats.cc) are computed from the very same instants.
    case TraceEventType::kAllreduceStart: r.kind = ComputeKind::kBucketLaunched; break;
    case TraceEventType::kAllreduceEnd: r.kind = ComputeKind::kBucketReduced; break;
    case TraceEventType::kRebuild: r.kind = ComputeKind::kRebuild; break;
    case TraceEventType::kFinalize: r.kind = ComputeKind::kFinalize; break;
    case TraceEventType::kNoSyncForward: r.kind = ComputeKind::kNoSync; break;
    case TraceEventType::kShadowBackward: r.kind = ComputeKind::kShadow; break;
    case TraceEventType::kUnusedSearch: r.kind = ComputeKind::kUnusedSearch; break;
    // The job's forward span covers this one.
    case TraceEventType::kForward: return;
  }
  Add(r);
}

void TraceRecorder::OnQueued(const comm::Collective& c) {
  CollectiveEvent r{.sequence_number = c.sequence_number,
                    .op = c.op,
                    .reduce_op = c.reduce_op,
                    .dtype = c.input.defined() ? c.input.dtype() : DType::kFloat32,
                    .count = c.input.defined() ? c.input.numel() : 0,
                    .tag = c.tag,
                    .iteration = iteration_,
                    .queued_ns = Since(TraceClock::now())};
  std::lock_guard<std::mutex> lock(mu_);
  if (collectives_.size() == collectives_.capacity()) {
    ++dropped_collectives_;
    return;
  }
  collectives_.push_back(r);
}

CollectiveEvent* TraceRecorder::Find(uint64_t sequence_number) {
  // Sequence numbers are consecutive, so the record is at a known distance from the last one.
  if (collectives_.empty()) return nullptr;
  const uint64_t last = collectives_.back().sequence_number;
  if (sequence_number > last || last - sequence_number >= collectives_.size()) return nullptr;
  CollectiveEvent& r = collectives_[collectives_.size() - 1 - (last - sequence_number)];
  return r.sequence_number == sequence_number ? &r : nullptr;
}

void TraceRecorder::OnStarted(uint64_t sequence_number) {
  const int64_t now = Since(TraceClock::now());
  std::lock_guard<std::mutex> lock(mu_);
  if (CollectiveEvent* r = Find(sequence_number)) r->started_ns = now;
}

void TraceRecorder::OnFinished(uint64_t sequence_number, bool ok) {
  const int64_t now = Since(TraceClock::now());
  std::lock_guard<std::mutex> lock(mu_);
  if (CollectiveEvent* r = Find(sequence_number)) {
    r->finished_ns = now;
    r->ok = ok;
  }
}

RankTrace TraceRecorder::Take() {
  RankTrace trace{.rank = rank_,
                  .compute = std::move(compute_),
                  .labels = std::move(labels_),
                  .dropped = dropped_compute_};
  std::lock_guard<std::mutex> lock(mu_);
  trace.collectives = std::move(collectives_);
  trace.dropped += dropped_collectives_;
  return trace;
}

}  // namespace ddpkit::trace
