// Collective tags: what a collective is for, from the issuing thread's scope to the flight
// recorder and a group's listener.
#include "comm/collective_tag.h"

#include <mutex>
#include <vector>

#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

TEST(CollectiveTagTest, ScopesNestAndRestoreAndShadowIsInherited) {
  EXPECT_EQ(PurposeName(ScopedCollectiveTag::Current()), "untagged");
  {
    ScopedCollectiveTag shadow({.shadow = true});
    {
      ScopedCollectiveTag bucket({.purpose = "bucket", .bucket = 3});
      const CollectiveTag tag = ScopedCollectiveTag::Current();
      EXPECT_EQ(tag.purpose, "bucket");
      EXPECT_EQ(tag.bucket, 3);
      EXPECT_TRUE(tag.shadow);  // kept from the outer scope
    }
    EXPECT_EQ(PurposeName(ScopedCollectiveTag::Current()), "untagged");
    EXPECT_TRUE(ScopedCollectiveTag::Current().shadow);
  }
  EXPECT_FALSE(ScopedCollectiveTag::Current().shadow);
  EXPECT_EQ(PurposeName({.purpose = "used_map"}), "used_map");
}

// Records what a group reports, in order.
class RecordingListener final : public CollectiveListener {
 public:
  void OnQueued(const Collective& c) override {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back({'q', c.sequence_number, c.tag});
  }
  void OnStarted(uint64_t seq) override {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back({'s', seq, {}});
  }
  void OnFinished(uint64_t seq, bool ok) override {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back({ok ? 'f' : 'x', seq, {}});
  }
  struct Event {
    char what;
    uint64_t seq;
    CollectiveTag tag;
  };
  std::mutex mu;
  std::vector<Event> events;
};

TEST(CollectiveTagTest, TheFlightRecorderAndTheListenerSeeEachCollectivesTag) {
  ASSERT_TRUE(RunThreadsWorld(2, [](ProcessGroup& group) -> absl::Status {
                RecordingListener listener;
                group.SetListener(&listener);
                {
                  ScopedCollectiveTag tag({.purpose = "bucket", .bucket = 1});
                  DDPKIT_RETURN_IF_ERROR(group.Allreduce(Tensor::Full({4}, 1.0))->Wait());
                }
                DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
                group.SetListener(nullptr);
                const auto entries = group.flight_recorder().Entries();
                EXPECT_EQ(entries.size(), 2u);
                EXPECT_EQ(entries[0].tag.purpose, "bucket");
                EXPECT_EQ(entries[0].tag.bucket, 1);
                EXPECT_EQ(DescribeTag(entries[0].tag), "bucket 1");
                EXPECT_EQ(PurposeName(entries[1].tag), "untagged");
                EXPECT_EQ(entries[1].record_id, 1u);
                // Each collective: queued, started, finished, in that order.
                std::lock_guard<std::mutex> lock(listener.mu);
                EXPECT_EQ(listener.events.size(), 6u);
                for (uint64_t seq : {1u, 2u}) {
                  std::string order;
                  for (const auto& e : listener.events) {
                    if (e.seq == seq) order += e.what;
                  }
                  EXPECT_EQ(order, "qsf") << "sequence number " << seq;
                }
                EXPECT_EQ(listener.events[0].tag.bucket, 1);
                return absl::OkStatus();
              }).ok());
}

}  // namespace
}  // namespace ddpkit::comm
