// The part of the CUDA runtime ddpkit uses: devices, stream-ordered memory, copies, streams and
// events. Declared without <cuda_runtime.h>, so host code includes it in any build; a build
// without CUDA reports zero GPUs and CheckUsable says why, and nothing else here is reached.
//
// Streams. Every thread has a current stream per GPU, taken from a fixed pool the first time the
// thread asks (PyTorch would hand every thread the one default stream; here each rank of an
// in-process world computes on a stream of its own). Kernels, copies and allocations of a
// thread go on its current stream; StreamGuard switches it for a scope.
//
// Memory. Storage is allocated and freed in stream order from the driver's pool, which keeps
// freed blocks for reuse (what PyTorch's caching allocator does): a free is safe once the
// stream that allocated the block is done with it, and the code that hands a tensor to another
// stream (the process groups) keeps it alive until that stream is done too.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "autograd/device.h"

struct CUstream_st;
struct CUevent_st;

namespace ddpkit::cuda {

using Stream = CUstream_st*;  // cudaStream_t

// GPUs visible to this process; 0 in a build without CUDA or without a driver.
int DeviceCount();
// OK when `device` can hold tensors; otherwise what stands in the way, and what to do.
absl::Status CheckUsable(Device device);
// "NVIDIA H100 80GB HBM3 (sm_90, 79.2 GiB)" for a usable GPU.
std::string DeviceDescription(Device device);

// --- Memory ---------------------------------------------------------------------------------
void* Allocate(size_t nbytes, Device device, Stream stream);
void Free(void* ptr, Device device, Stream stream) noexcept;
// Scratch memory on `device` for the work queued on `stream` while it lives: freed in stream
// order (after that work) when it goes out of scope, also when a launch in between throws.
class Scratch {
 public:
  Scratch(size_t nbytes, Device device, Stream stream)
      : device_(device), stream_(stream), nbytes_(nbytes), ptr_(Allocate(nbytes, device, stream)) {}
  ~Scratch() { Free(ptr_, device_, stream_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }
  size_t size() const { return nbytes_; }

 private:
  Device device_;
  Stream stream_;
  size_t nbytes_;
  void* ptr_;
};
// Copies between any two devices. A copy that involves the host waits until it is done (as
// PyTorch's non_blocking=False); one between GPUs is queued on the current stream.
void Copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
void MemsetZero(void* ptr, size_t nbytes, Device device);

// --- Streams --------------------------------------------------------------------------------
Stream CurrentStream(Device device);
// A stream from the pool (the pool never destroys its streams, so a handle stays valid for the
// life of the process, whichever thread holds it).
Stream PoolStream(Device device);
void Synchronize(Stream stream);
// Waits for all work on every GPU this process used (before threads hand tensors over).
void SynchronizeAll();

// Makes `stream` the calling thread's current stream on `device` for a scope.
class StreamGuard {
 public:
  StreamGuard(Device device, Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device device_;
  Stream previous_;
};

// A CUDA event without timing: a marker in a stream that other streams, or the host, wait on.
class Event {
 public:
  explicit Event(Device device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void Record(Stream stream);
  // Work queued on `stream` from now on runs after the recorded point (the host does not wait).
  void Block(Stream stream) const;
  bool Query() const;  // true once the recorded work is done
  void Synchronize() const;

 private:
  Device device_;
  CUevent_st* event_ = nullptr;
};

}  // namespace ddpkit::cuda
