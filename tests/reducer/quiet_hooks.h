// The check behind the allocation tests: on rebuilt buckets, a hook that launches no bucket
// allocates nothing — with the reducer's trace observer set to `observer` (null: none). Needs
// allocation_counter.h in the binary.
#pragma once

#include "tests/reducer/allocation_counter.h"
#include "tests/reducer/ddp_test_util.h"

namespace ddpkit::reducer::testing {

inline void ExpectQuietHooksAllocateNothing(TraceObserver* observer) {
  using testing_util::allocations_on_this_thread;
  RunWorld(1, [observer](comm::ProcessGroup& group) {
    auto model = nn::MakeMlp({16, 32, 32, 32, 4}, 1);
    const TensorList params = model->Parameters();
    std::vector<int64_t> before(params.size()), inside(params.size());
    for (size_t i = 0; i < params.size(); ++i) {  // before DDP's hook
      params[i].grad_accumulator()->AddPostHook(
          [&, i](const Tensor&) { before[i] = allocations_on_this_thread; });
    }
    // Small caps: several buckets after the rebuild, so most hooks only copy and count down.
    auto ddp = MakeDdp(model, group,
                       {.pytorch_version = {1, 13},  // a first bucket of its own
                        .bucket_cap_mb = 2000.0 / (1 << 20),
                        .first_bucket_mb = 600.0 / (1 << 20)});
    ddp->reducer().SetTraceObserver(observer);
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

}  // namespace ddpkit::reducer::testing
