// The flight recorder: each rank's last collectives, oldest first, with their states.
#include "comm/flight_recorder.h"

#include "absl/strings/match.h"
#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

TEST(FlightRecorderTest, KeepsTheLastCollectives) {
  ASSERT_TRUE(
      RunThreadsWorld(2,
                      [](ProcessGroup& group) -> absl::Status {
                        for (int i = 0; i < 5; ++i)
                          DDPKIT_RETURN_IF_ERROR(group.Allreduce(Tensor::Full({3}, 1.0))->Wait());
                        DDPKIT_RETURN_IF_ERROR(group.Barrier()->Wait());
                        auto entries = group.flight_recorder().Entries();
                        EXPECT_EQ(entries.size(), 6u);
                        EXPECT_EQ(entries.back().op, OpType::kBarrier);
                        EXPECT_EQ(entries.back().sequence_number, 6u);
                        EXPECT_EQ(entries.front().state, FlightRecorder::State::kCompleted);
                        EXPECT_TRUE(absl::StrContains(group.flight_recorder().Dump(), "ALLREDUCE"));
                        return absl::OkStatus();
                      },
                      {.timeout = absl::Seconds(10),
                       .debug_level = DebugLevel::kOff,
                       .flight_recorder_size = 8})
          .ok());
  FlightRecorder small(3);
  for (uint64_t s = 1; s <= 5; ++s) small.Queued({.op = OpType::kBarrier, .sequence_number = s});
  auto entries = small.Entries();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries.front().sequence_number, 3u);  // oldest kept first
}

}  // namespace
}  // namespace ddpkit::comm
