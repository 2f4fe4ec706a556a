#include "autograd/host_allocator.h"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "autograd/base/error.h"

namespace ddpkit {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMaxCachedBytes = size_t{1} << 30;  // idle blocks kept, at most

// The block size a request of `nbytes` gets: a multiple of 64 up to 4 KiB, then one of eight
// steps per power of two.
size_t SizeClass(size_t nbytes) {
  if (nbytes <= 4096) return nbytes <= kAlignment ? kAlignment : (nbytes + 63) / 64 * 64;
  const size_t step = std::bit_floor(nbytes - 1) / 8;
  return (nbytes + step - 1) / step * step;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang's spelling
#define DDPKIT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)  // gcc's
#define DDPKIT_ASAN 1
#endif

thread_local int64_t t_system_allocations = 0;

bool CachingEnabled() {
#if defined(DDPKIT_ASAN)
  return false;  // let ASan see every free
#else
  const char* value = std::getenv("DDPKIT_HOST_CACHE");
  return value == nullptr || std::strcmp(value, "0") != 0;
#endif
}

class Cache {
 public:
  void* Allocate(size_t nbytes) {
    const size_t size = SizeClass(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = idle_.find(size); caching_ && it != idle_.end() && !it->second.empty()) {
        void* block = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= size;
        ++stats_.cached_allocations;
        return block;
      }
      ++stats_.system_allocations;  // every request when not caching
    }
    ++t_system_allocations;
    void* block = std::aligned_alloc(kAlignment, size);
    DDPKIT_CHECK(block != nullptr, "[HostAllocate] out of memory allocating ", nbytes, " bytes");
    return block;
  }

  void Free(void* block, size_t nbytes) {
    const size_t size = SizeClass(nbytes);
    if (caching_) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + size <= kMaxCachedBytes) {
        idle_[size].push_back(block);
        cached_bytes_ += size;
        return;
      }
    }
    std::free(block);
  }

  HostAllocatorStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    HostAllocatorStats stats = stats_;
    stats.cached_bytes = static_cast<int64_t>(cached_bytes_);
    stats.caching = caching_;
    return stats;
  }

  void Empty() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : idle_) {
      for (void* block : blocks) std::free(block);
    }
    idle_.clear();
    cached_bytes_ = 0;
  }

 private:
  const bool caching_ = CachingEnabled();
  std::mutex mu_;
  absl::flat_hash_map<size_t, std::vector<void*>> idle_;  // guarded by mu_
  size_t cached_bytes_ = 0;                               // guarded by mu_
  HostAllocatorStats stats_;                              // guarded by mu_
};

// Never destroyed: tensors in static objects may be freed after main returns.
Cache& TheCache() {
  static Cache* cache = new Cache;
  return *cache;
}

}  // namespace

void* HostAllocate(size_t nbytes) { return TheCache().Allocate(nbytes); }
void HostFree(void* data, size_t nbytes) { TheCache().Free(data, nbytes); }
HostAllocatorStats GetHostAllocatorStats() { return TheCache().Stats(); }
void EmptyHostCache() { TheCache().Empty(); }
int64_t ThisThreadSystemAllocations() { return t_system_allocations; }

}  // namespace ddpkit
