#include "comm/collective_tag.h"

namespace ddpkit::comm {
namespace {

thread_local CollectiveTag current_tag;

}  // namespace

std::string_view PurposeName(const CollectiveTag& tag) {
  return tag.purpose.empty() ? "untagged" : tag.purpose;
}

ScopedCollectiveTag::ScopedCollectiveTag(CollectiveTag tag) : previous_(current_tag) {
  tag.shadow = tag.shadow || previous_.shadow;
  current_tag = tag;
}

ScopedCollectiveTag::~ScopedCollectiveTag() { current_tag = previous_; }

CollectiveTag ScopedCollectiveTag::Current() { return current_tag; }

}  // namespace ddpkit::comm
