// What a collective is for — a label its caller supplies ("bucket" 3, "used_map",
// "join_count"; comm knows none of them) — carried with the collective into the flight
// recorder, its dumps and traces, so a timeline or a post-mortem reads "bucket 3" rather than
// "ALLREDUCE float32[4096]".
//
//   comm::ScopedCollectiveTag tag({.purpose = "bucket", .bucket = 3});
//   group.Allreduce(bucket.gradients);   // and whatever a comm hook issues for it
//
// The tag is per thread and nests (an inner scope keeps the outer one's `shadow`); every
// collective issued on the thread inside the scope gets it. Plain data: tagging allocates
// nothing, so the label must be a string literal (the recorder keeps it after the scope ends).
#pragma once

#include <cstdint>
#include <string_view>

namespace ddpkit::comm {

struct CollectiveTag {
  std::string_view purpose = {};  // snake case, a string literal; "" untagged
  int32_t bucket = -1;            // the gradient bucket it reduces, if any
  bool shadow = false;            // issued by a joined rank on behalf of the active ones
};

// The purpose as traces and dumps print it: the label, or "untagged".
std::string_view PurposeName(const CollectiveTag& tag);

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
