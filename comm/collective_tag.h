// What a collective is for — DDP's gradient bucket 3, the used-parameter map, Join's count of
// active ranks — said by the code that issues it and carried with the collective into the flight
// recorder, its dumps and traces, so a timeline or a post-mortem reads "bucket 3" rather than
// "ALLREDUCE float32[4096]".
//
//   comm::ScopedCollectiveTag tag({.purpose = CollectivePurpose::kGradientBucket, .bucket = 3});
//   group.Allreduce(bucket.gradients);   // and whatever a comm hook issues for it
//
// The tag is per thread and nests (an inner scope keeps the outer one's `shadow`); every
// collective issued on the thread inside the scope gets it. Plain data: tagging allocates
// nothing.
#pragma once

#include <cstdint>
#include <string_view>

namespace ddpkit::comm {

enum class CollectivePurpose : uint8_t {
  kUntagged,
  kModelCheck,       // DDP's construction: every rank holds the same model
  kModelBroadcast,   // DDP's construction: rank 0's parameters to all
  kBufferBroadcast,  // rank 0's buffers to all, each synced forward
  kGradientBucket,   // one bucket's reduction (an allreduce, or a comm hook's collectives)
  kUsedMap,          // which parameters some rank used (find_unused, static graph's first)
  kHookCounts,       // static graph's hook counts, under Join
  kRebuiltPlan,      // rank 0's rebuilt bucket plan
  kJoinCount,        // Join: the count of ranks still active
  kJoinThrowCheck,   // Join's throw mode: has some rank run out?
  kJoinPlan,         // DDP under Join: what this iteration issues
  kJoinFinalSync,    // Join's end: the last joiner's model to every rank
  kZeroShard,        // ZeRO-1: an owner's updated parameters to every rank
  kClockSync,        // a trace's clock alignment at startup
  kJob,              // a job's own bookkeeping (sharing losses, reports)
};

// "bucket", "used_map", ... (snake case, for traces and dumps).
std::string_view CollectivePurposeName(CollectivePurpose purpose);

struct CollectiveTag {
  CollectivePurpose purpose = CollectivePurpose::kUntagged;
  int32_t bucket = -1;  // kGradientBucket
  bool shadow = false;  // issued by a joined rank on behalf of the active ones
};

class ScopedCollectiveTag {
 public:
  explicit ScopedCollectiveTag(CollectiveTag tag);
  ~ScopedCollectiveTag();
  ScopedCollectiveTag(const ScopedCollectiveTag&) = delete;
  ScopedCollectiveTag& operator=(const ScopedCollectiveTag&) = delete;

  // The innermost tag on this thread (untagged outside any scope).
  static CollectiveTag Current();

 private:
  CollectiveTag previous_;
};

}  // namespace ddpkit::comm
