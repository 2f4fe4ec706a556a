#include "autograd/memory_stats.h"

#include <atomic>

namespace ddpkit {
namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};

}  // namespace

TensorMemoryStats TensorMemory() {
  return {.live_bytes = live_bytes.load(std::memory_order_relaxed),
          .peak_bytes = peak_bytes.load(std::memory_order_relaxed)};
}

void ResetPeakTensorMemory() {
  peak_bytes.store(live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void NoteStorageAllocated(int64_t nbytes) {
  const int64_t now = live_bytes.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
  int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void NoteStorageFreed(int64_t nbytes) { live_bytes.fetch_sub(nbytes, std::memory_order_relaxed); }

}  // namespace ddpkit
