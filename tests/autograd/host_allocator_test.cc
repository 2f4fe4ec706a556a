// The host caching allocator: a freed block serves the next request of its size class, blocks
// are 64-byte aligned, and a training-like loop stops asking the system once warm.
#include "autograd/host_allocator.h"

#include <cstdint>

#include "autograd/ops.h"
#include "gtest/gtest.h"

namespace ddpkit {
namespace {

TEST(HostAllocatorTest, AFreedBlockServesTheNextRequestOfItsClass) {
  if (!GetHostAllocatorStats().caching)
    GTEST_SKIP() << "caching is off (ASan or DDPKIT_HOST_CACHE=0)";
  void* first = HostAllocate(100000);
  HostFree(first, 100000);
  const HostAllocatorStats before = GetHostAllocatorStats();
  void* second = HostAllocate(99000);  // same size class (a step of 8192 bytes at this size)
  const HostAllocatorStats after = GetHostAllocatorStats();
  EXPECT_EQ(second, first);
  EXPECT_EQ(after.cached_allocations, before.cached_allocations + 1);
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  HostFree(second, 99000);
  EmptyHostCache();
  EXPECT_EQ(GetHostAllocatorStats().cached_bytes, 0);
}

TEST(HostAllocatorTest, BlocksAreAlignedForEverySize) {
  for (size_t nbytes : {size_t{0}, size_t{1}, size_t{63}, size_t{4097}, size_t{1} << 20}) {
    void* block = HostAllocate(nbytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % 64, 0u) << nbytes;
    HostFree(block, nbytes);
  }
}

// Forward and backward of a small MLP, again and again: after the first pass every tensor comes
// from the cache.
TEST(HostAllocatorTest, AWarmLoopAsksTheSystemForNothing) {
  if (!GetHostAllocatorStats().caching)
    GTEST_SKIP() << "caching is off (ASan or DDPKIT_HOST_CACHE=0)";
  Tensor w = Tensor::Full({64, 32}, 0.01);
  Tensor x = Tensor::Full({16, 32}, 0.5);
  w.set_requires_grad(true);
  auto step = [&] {
    w.set_grad(Tensor());
    Sum(Tanh(Linear(x, w, Tensor()))).Backward();
  };
  step();
  step();
  const int64_t before = GetHostAllocatorStats().system_allocations;
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(GetHostAllocatorStats().system_allocations, before);
}

}  // namespace
}  // namespace ddpkit
