// The reducer's per-hook path allocates nothing once buckets are built: a hook copies the
// gradient into its bucket view and counts down the bucket's pending counter. Only the hook
// that launches a bucket allocates (the collective's Work and its queue entry), and the last
// one queues the finalize callback.
//
// This binary replaces the global operator new to count allocations made by the calling
// thread (allocation_counter.h); hooks registered before and after DDP's own bracket exactly
// DDP's hook.
#include "gtest/gtest.h"
#include "tests/reducer/allocation_counter.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/quiet_hooks.h"

namespace ddpkit::reducer::testing {
namespace {

TEST(HookAllocationTest, HooksThatLaunchNothingAllocateNothing) {
  ExpectQuietHooksAllocateNothing(nullptr);
}

}  // namespace
}  // namespace ddpkit::reducer::testing
