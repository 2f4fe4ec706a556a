#include "comm/collective_tag.h"

namespace ddpkit::comm {
namespace {

thread_local CollectiveTag current_tag;

}  // namespace

std::string_view CollectivePurposeName(CollectivePurpose purpose) {
  switch (purpose) {
    case CollectivePurpose::kUntagged: return "untagged";
    case CollectivePurpose::kModelCheck: return "model_check";
    case CollectivePurpose::kModelBroadcast: return "model_broadcast";
    case CollectivePurpose::kBufferBroadcast: return "buffer_broadcast";
    case CollectivePurpose::kGradientBucket: return "bucket";
    case CollectivePurpose::kUsedMap: return "used_map";
    case CollectivePurpose::kHookCounts: return "hook_counts";
    case CollectivePurpose::kRebuiltPlan: return "rebuilt_plan";
    case CollectivePurpose::kJoinCount: return "join_count";
    case CollectivePurpose::kJoinThrowCheck: return "join_throw_check";
    case CollectivePurpose::kJoinPlan: return "join_plan";
    case CollectivePurpose::kJoinFinalSync: return "join_final_sync";
    case CollectivePurpose::kZeroShard: return "zero_shard";
    case CollectivePurpose::kClockSync: return "clock_sync";
    case CollectivePurpose::kJob: return "job";
  }
  return "?";
}

ScopedCollectiveTag::ScopedCollectiveTag(CollectiveTag tag) : previous_(current_tag) {
  tag.shadow = tag.shadow || previous_.shadow;
  current_tag = tag;
}

ScopedCollectiveTag::~ScopedCollectiveTag() { current_tag = previous_; }

CollectiveTag ScopedCollectiveTag::Current() { return current_tag; }

}  // namespace ddpkit::comm
