// The host memory behind every CPU tensor, cached as PyTorch caches GPU memory.
//
// A training step frees and makes the same tensors every iteration: activations, gradients,
// GEMM outputs. From the system each of those is an mmap and, on first touch, a page fault per
// 4 KiB (a third of a large MLP's step went to the kernel before this cache). So a freed block
// is kept, by size class, and the next request of its class takes it back: once warm, a step
// asks the system for nothing. `system_allocations` counts the requests that missed.
//
// Size classes are multiples of 64 bytes up to 4 KiB, then eight per power of two (at most 12.5%
// of a block unused). Idle blocks are bounded (kMaxCachedBytes); a free beyond that goes back to
// the system. Under AddressSanitizer, or with DDPKIT_HOST_CACHE=0, nothing is cached, so a use
// after free is still caught. Thread-safe: a tensor may be freed by another thread than made it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddpkit {

// At least `nbytes` (0 is allowed), 64-byte aligned; throws when the system has no memory.
void* HostAllocate(size_t nbytes);
// Gives back a block HostAllocate returned for the same `nbytes`.
void HostFree(void* data, size_t nbytes);

struct HostAllocatorStats {
  int64_t system_allocations = 0;  // requests the cache could not serve (all, when not caching)
  int64_t cached_allocations = 0;  // requests served from the cache
  int64_t cached_bytes = 0;        // idle in the cache now
  bool caching = true;             // false under ASan or DDPKIT_HOST_CACHE=0
};
HostAllocatorStats GetHostAllocatorStats();
// system_allocations made by the calling thread alone: a rank thread's own count, which its
// peers' warm-up (in a threads world) does not disturb.
int64_t ThisThreadSystemAllocations();
// Returns every idle block to the system.
void EmptyHostCache();

}  // namespace ddpkit
