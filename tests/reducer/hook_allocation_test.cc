// The reducer's per-hook path allocates nothing once buckets are built: a hook copies the
// gradient into its bucket view and counts down the bucket's pending counter. Only the hook
// that launches a bucket allocates (the collective's Work and its queue entry), and the last
// one queues the finalize callback. A warm PowerSGD comm hook allocates only its futures.
//
// This binary replaces the global operator new to count allocations made by the calling
// thread (allocation_counter.h); hooks registered before and after DDP's own bracket exactly
// DDP's hook.
#include "gtest/gtest.h"
#include "reducer/extras/powersgd_hook.h"
#include "tests/reducer/allocation_counter.h"
#include "tests/reducer/ddp_test_util.h"
#include "tests/reducer/quiet_hooks.h"

namespace ddpkit::reducer::testing {
namespace {

TEST(HookAllocationTest, HooksThatLaunchNothingAllocateNothing) {
  ExpectQuietHooksAllocateNothing(nullptr);
}

// Allocations of each PowerSGD hook call on an MLP of `widths` (one bucket, compressed from the
// third iteration), counted on the rank's thread.
std::vector<int64_t> PowerSgdCallAllocations(const std::vector<int64_t>& widths) {
  using testing_util::allocations_on_this_thread;
  std::vector<int64_t> per_call;
  RunWorld(1, [&](comm::ProcessGroup& group) {
    auto ddp = MakeDdp(nn::MakeMlp(widths, 1), group);
    auto state = PowerSgdState::Create(
        group, {.matrix_approximation_rank = 2, .start_iteration = 2, .min_compression_rate = 1});
    ASSERT_TRUE(state.ok()) << state.status();
    CommHook powersgd = MakePowerSgdHook(*state);
    ddp->RegisterCommHook(
        [&](GradBucket& bucket) {
          const int64_t before = allocations_on_this_thread;
          std::shared_ptr<comm::Future> future = powersgd(bucket);
          per_call.push_back(allocations_on_this_thread - before);
          return future;
        },
        "counted powersgd");
    Tensor x = Tensor::Full({8, widths.front()}, 0.5);
    Tensor y = Tensor::Zeros({8}, DType::kInt64);
    for (int iteration = 0; iteration < 6; ++iteration) {
      CrossEntropy(ddp->Forward(x), y).Backward();
    }
  });
  return per_call;
}

// Once its buffers exist (made at the first compressed call), a PowerSGD call allocates only its
// three collectives and their futures — a few dozen allocations (a few more when a future
// completes before its continuation is attached), however many gradients the bucket holds:
// 4 or 26 here, so anything allocated per gradient would show.
TEST(HookAllocationTest, WarmPowerSgdCallsAllocateOnlyTheirFutures) {
  const std::vector<int64_t> small = PowerSgdCallAllocations({16, 32, 4});
  std::vector<int64_t> widths = {16};
  widths.insert(widths.end(), 12, 32);
  widths.push_back(4);
  const std::vector<int64_t> large = PowerSgdCallAllocations(widths);
  ASSERT_EQ(small.size(), 6u);
  ASSERT_EQ(large.size(), 6u);
  EXPECT_GT(large[2], large[3] + 26);  // the first compressed call makes the buffers
  for (int call = 3; call < 6; ++call) {
    EXPECT_LE(small[call], 48) << call;
    EXPECT_LE(large[call], 48) << call;
  }
}

}  // namespace
}  // namespace ddpkit::reducer::testing
