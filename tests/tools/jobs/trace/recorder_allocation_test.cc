// Tracing on, the hooks still allocate nothing: the recorder writes into buffers it reserved
// up front. Its own binary, because it replaces the global operator new (allocation_counter.h).
#include "gtest/gtest.h"
#include "tests/reducer/quiet_hooks.h"
#include "tools/jobs/trace/recorder.h"

namespace ddpkit::jobs {
namespace {

TEST(TraceRecorderAllocationTest, QuietHooksStillAllocateNothing) {
  TraceRecorder recorder(0, TraceClock::now(), /*compute_capacity=*/1 << 12,
                         /*collective_capacity=*/1 << 10);
  reducer::testing::ExpectQuietHooksAllocateNothing(&recorder);
  EXPECT_GT(recorder.Take().compute.size(), 0u);
}

TEST(TraceRecorderAllocationTest, AFullBufferDropsAndCounts) {
  TraceRecorder recorder(0, TraceClock::now(), 2, 1);
  for (int i = 0; i < 5; ++i)
    recorder.Span(ComputeKind::kForward, TraceClock::now(), TraceClock::now());
  const int64_t before = testing_util::allocations_on_this_thread;
  recorder.Span(ComputeKind::kBackward, TraceClock::now(), TraceClock::now());
  EXPECT_EQ(testing_util::allocations_on_this_thread, before);  // dropped, not grown
  const RankTrace trace = recorder.Take();
  EXPECT_EQ(trace.compute.size(), 2u);
  EXPECT_EQ(trace.dropped, 4);
}

}  // namespace
}  // namespace ddpkit::jobs
