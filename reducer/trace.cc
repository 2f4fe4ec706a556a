#include "reducer/trace.h"

namespace ddpkit::reducer {

std::string_view TraceEventName(TraceEventType type) {
  switch (type) {
    case TraceEventType::kForward: return "forward";
    case TraceEventType::kHookFired: return "hook_fired";
    case TraceEventType::kBucketReady: return "bucket_ready";
    case TraceEventType::kAllreduceStart: return "allreduce_start";
    case TraceEventType::kAllreduceEnd: return "allreduce_end";
    case TraceEventType::kRebuild: return "rebuild";
    case TraceEventType::kFinalize: return "finalize";
    case TraceEventType::kNoSyncForward: return "no_sync_forward";
    case TraceEventType::kShadowBackward: return "shadow_backward";
    case TraceEventType::kUnusedSearch: return "unused_search";
  }
  return "?";
}

}  // namespace ddpkit::reducer
