// Work: what a collective call returns — bounded waits, completion callbacks, its duration.
#include "comm/work.h"

#include <atomic>

#include "comm/threads/threads_world.h"
#include "gtest/gtest.h"

namespace ddpkit::comm {
namespace {

TEST(WorkTest, ReportsDurationCallbacksAndBoundedWaits) {
  ASSERT_TRUE(RunThreadsWorld(2, [](ProcessGroup& group) -> absl::Status {
                if (group.rank() == 1) absl::SleepFor(absl::Milliseconds(100));
                auto work = group.Barrier();
                std::atomic<bool> called{false};
                if (group.rank() == 0) {
                  EXPECT_EQ(work->Wait(absl::Milliseconds(1)).code(),
                            absl::StatusCode::kDeadlineExceeded);
                  EXPECT_FALSE(work->IsCompleted());
                }
                work->OnCompletion([&](const absl::Status& s) { called = s.ok(); });
                DDPKIT_RETURN_IF_ERROR(work->Wait());
                EXPECT_TRUE(called);
                EXPECT_GT(work->duration(), absl::ZeroDuration());
                EXPECT_EQ(work->op(), OpType::kBarrier);
                return absl::OkStatus();
              }).ok());
}

}  // namespace
}  // namespace ddpkit::comm
