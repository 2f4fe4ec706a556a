// Trace events: what the reducer does during one iteration, with timestamps, for timeline
// tools. Register an observer with DistributedDataParallel::reducer().SetTraceObserver.
//
// Events are delivered on the rank's own thread (the one running forward and backward), in
// the order the reducer handles them. An allreduce's end is observed on the communication
// thread; it is delivered when finalize collects the bucket, stamped with the time it happened.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace ddpkit::reducer {

enum class TraceEventType {
  kForward,         // DDP forward started (synced iterations)
  kHookFired,       // a parameter's gradient hook ran (param_index; param_bucket: its bucket)
  kBucketReady,     // a bucket's pending counter reached zero (bucket_index)
  kAllreduceStart,  // a bucket's reduction was launched (bucket_index)
  kAllreduceEnd,    // a bucket's reduction completed (bucket_index)
  kRebuild,         // buckets were rebuilt in gradient-arrival order
  kFinalize,        // end of backward: results written back (a span: start = compute done)
  kNoSyncForward,   // a forward under no_sync: its backward only accumulates locally
  kShadowBackward,  // a joined rank shadowed one synced backward (a span)
  kUnusedSearch,    // find_unused_parameters' search of the graph after forward (a span)
};

std::string_view TraceEventName(TraceEventType type);  // "hook_fired", ...

// An index field of an event that names no parameter or bucket (a forward, a rebuild, ...).
inline constexpr int64_t kNoTraceIndex = -1;

struct TraceEvent {
  TraceEventType type;
  std::chrono::steady_clock::time_point time;   // when it happened (a span: when it ended)
  std::chrono::steady_clock::time_point start;  // a span's start; == time for the others
  int64_t iteration = 0;                        // DDP's synced-iteration counter
  int rank = 0;
  int64_t param_index = kNoTraceIndex;   // kHookFired
  int64_t bucket_index = kNoTraceIndex;  // bucket events
  int64_t param_bucket = kNoTraceIndex;  // kHookFired: the bucket holding the parameter's gradient
};

class TraceObserver {
 public:
  virtual ~TraceObserver() = default;
  virtual void OnEvent(const TraceEvent& event) = 0;
};

}  // namespace ddpkit::reducer
