// The reducer's per-hook path allocates nothing once buckets are built: a hook copies the
// gradient into its bucket view and counts down the bucket's pending counter. Only the hook
// that launches a bucket allocates (the collective's Work and its queue entry), and the last
// one queues the finalize callback.
//
// This binary replaces the global operator new to count allocations made by the calling
// thread; hooks registered before and after DDP's own bracket exactly DDP's hook.
#include <atomic>
#include <cstdlib>
#include <new>

#include "gtest/gtest.h"
#include "tests/reducer/ddp_test_util.h"

namespace {
thread_local int64_t allocations_on_this_thread = 0;
}  // namespace

void* operator new(std::size_t size) {
  ++allocations_on_this_thread;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace ddpkit::reducer::testing {
namespace {

TEST(HookAllocationTest, HooksThatLaunchNothingAllocateNothing) {
  RunWorld(1, [](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({16, 32, 32, 32, 4}, 1);
    const TensorList params = model->Parameters();
    std::vector<int64_t> before(params.size()), inside(params.size());
    for (size_t i = 0; i < params.size(); ++i) {  // before DDP's hook
      params[i].grad_accumulator()->AddPostHook(
          [&, i](const Tensor&) { before[i] = allocations_on_this_thread; });
    }
    // Small caps: several buckets after the rebuild, so most hooks only copy and count down.
    auto ddp = MakeDdp(model, group,
                       {.bucket_cap_mb = 2000.0 / (1 << 20), .first_bucket_mb = 600.0 / (1 << 20)});
    for (size_t i = 0; i < params.size(); ++i) {  // after DDP's hook
      params[i].grad_accumulator()->AddPostHook(
          [&, i](const Tensor&) { inside[i] = allocations_on_this_thread - before[i]; });
    }
    Tensor x = Tensor::Full({8, 16}, 0.5);
    Tensor y = Tensor::Zeros({8}, DType::kInt64);
    for (int iteration = 1; iteration <= 4; ++iteration) {
      CrossEntropy(ddp->Forward(x), y).Backward();
    }
    // Iteration 4 runs on the rebuilt buckets. Count hooks that launched a bucket: the last
    // parameter of each bucket in arrival order.
    const Reducer& reducer = ddp->reducer();
    ASSERT_GE(reducer.buckets().size(), 3u);
    std::vector<bool> launches(params.size(), false);
    for (const Bucket& bucket : reducer.buckets()) launches[bucket.variable_indices.back()] = true;
    int quiet_hooks = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      if (launches[i]) {
        EXPECT_LE(inside[i], 12) << "parameter " << i << " launched a bucket";
      } else {
        EXPECT_EQ(inside[i], 0) << "parameter " << i << " (" << reducer.parameters()[i].first
                                << ")";
        ++quiet_hooks;
      }
    }
    EXPECT_GT(quiet_hooks, 0);
  });
}

}  // namespace
}  // namespace ddpkit::reducer::testing
