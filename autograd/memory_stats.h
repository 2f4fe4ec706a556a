// Tensor memory accounting: the bytes every live Storage holds, and their high-water mark — the
// CPU analogue of torch.cuda.memory_allocated / max_memory_allocated.
//
// The counters are process-wide (a storage may be freed on another thread than the one that
// made it, e.g. by a communication thread), so a measurement means something only while one
// thread allocates: measure a step on its own, not inside a running threads world.
//
//   ResetPeakTensorMemory();
//   const int64_t before = TensorMemory().live_bytes;
//   ...forward and backward...
//   const int64_t activations_at_peak = TensorMemory().peak_bytes - before;
#pragma once

#include <cstdint>

namespace ddpkit {

struct TensorMemoryStats {
  int64_t live_bytes = 0;  // held by storages alive now
  int64_t peak_bytes = 0;  // the most live_bytes has been since the last reset
};

TensorMemoryStats TensorMemory();
// Starts a new high-water mark from what is live now.
void ResetPeakTensorMemory();

// Called by Storage only.
void NoteStorageAllocated(int64_t nbytes);
void NoteStorageFreed(int64_t nbytes);

}  // namespace ddpkit
