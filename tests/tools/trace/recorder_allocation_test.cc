// Tracing on, the hooks still allocate nothing: the recorder writes into buffers it reserved
// up front. Its own binary, because it replaces the global operator new (allocation_counter.h).
#include "gtest/gtest.h"
#include "tests/reducer/quiet_hooks.h"
#include "tools/trace/recorder.h"

namespace ddpkit::jobs {
namespace {

TEST(TraceRecorderAllocationTest, QuietHooksStillAllocateNothing) {
  trace::TraceRecorder recorder(0, trace::TraceClock::now(), /*compute_capacity=*/1 << 12,
                                /*collective_capacity=*/1 << 10);
  reducer::testing::ExpectQuietHooksAllocateNothing(&recorder);
  EXPECT_GT(recorder.Take().compute.size(), 0u);
}

TEST(TraceRecorderAllocationTest, AFullBufferDropsAndCounts) {
  trace::TraceRecorder recorder(0, trace::TraceClock::now(), 2, 1);
  for (int i = 0; i < 5; ++i)
    recorder.Span(trace::ComputeKind::kForward, trace::TraceClock::now(), trace::TraceClock::now());
  const int64_t before = testing_util::allocations_on_this_thread;
  recorder.Span(trace::ComputeKind::kBackward, trace::TraceClock::now(), trace::TraceClock::now());
  EXPECT_EQ(testing_util::allocations_on_this_thread, before);  // dropped, not grown
  const trace::RankTrace trace = recorder.Take();
  EXPECT_EQ(trace.compute.size(), 2u);
  EXPECT_EQ(trace.dropped, 4);
}

}  // namespace
}  // namespace ddpkit::jobs
