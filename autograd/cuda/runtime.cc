// The CUDA build of runtime.h.
#include "autograd/cuda/runtime.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>

#include "absl/strings/str_format.h"
#include "autograd/cuda/cuda_check.h"

namespace ddpkit::cuda {
namespace {

constexpr int kMaxDevices = 16;
constexpr int kPoolStreams = 32;  // per GPU, as PyTorch's stream pool

struct StreamPool {
  std::once_flag created;
  std::array<Stream, kPoolStreams> streams{};
  std::atomic<unsigned> next{0};
};

StreamPool& PoolOf(Device device) {
  static std::array<StreamPool, kMaxDevices>* pools = new std::array<StreamPool, kMaxDevices>();
  StreamPool& pool = (*pools)[device.index];
  std::call_once(pool.created, [&] {
    DeviceScope scope(device);
    for (Stream& s : pool.streams) {
      cudaStream_t stream;
      Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      s = stream;
    }
    // Keep freed blocks in the pool instead of handing them back to the driver at every
    // synchronisation: allocation then costs what PyTorch's caching allocator costs.
    cudaMemPool_t mempool;
    Check(cudaDeviceGetDefaultMemPool(&mempool, device.index), "cudaDeviceGetDefaultMemPool");
    uint64_t keep = std::numeric_limits<uint64_t>::max();
    Check(cudaMemPoolSetAttribute(mempool, cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute");
  });
  return pool;
}

thread_local std::array<Stream, kMaxDevices> current_streams{};
std::atomic<uint32_t> used_devices{0};  // bit i: cuda:i has a stream pool

void CheckIndex(Device device) {
  DDPKIT_CHECK(device.is_cuda(), "[cuda] ", device.ToString(), " is not a GPU");
  DDPKIT_CHECK(device.index >= 0 && device.index < kMaxDevices, "[cuda] ", device.ToString(),
               ": ddpkit handles GPUs 0..", kMaxDevices - 1);
}

}  // namespace

void Check(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so the next call starts clean
  throw Error(StrCat("[cuda] ", what, ": ", cudaGetErrorString(status), " (",
                     cudaGetErrorName(status), ")"));
}

DeviceScope::DeviceScope(Device device) {
  Check(cudaGetDevice(&previous_), "cudaGetDevice");
  restore_ = previous_ != device.index;
  if (restore_) Check(cudaSetDevice(device.index), StrCat("cudaSetDevice(", device.index, ")"));
}

DeviceScope::~DeviceScope() {
  if (restore_) cudaSetDevice(previous_);
}

void CheckLaunch(std::string_view kernel) {
  Check(cudaGetLastError(), StrCat("launching ", kernel));
}

int DeviceCount() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

absl::Status CheckUsable(Device device) {
  if (device.is_cpu()) return absl::OkStatus();
  int n = 0;
  if (cudaError_t status = cudaGetDeviceCount(&n); status != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        StrCat(device.ToString(), " is not usable: no CUDA device (", cudaGetErrorString(status),
               "); run on a machine with an NVIDIA GPU and driver, or use --device cpu"));
  }
  if (device.index < 0 || device.index >= n || device.index >= kMaxDevices) {
    return absl::FailedPreconditionError(StrCat(device.ToString(), " does not exist: ", n, " GPU",
                                                n == 1 ? " is" : "s are",
                                                " visible (CUDA_VISIBLE_DEVICES narrows them)"));
  }
  return absl::OkStatus();
}

std::string DeviceDescription(Device device) {
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, device.index), "cudaGetDeviceProperties");
  return absl::StrFormat("%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                         prop.totalGlobalMem / double(1 << 30));
}

void* Allocate(size_t nbytes, Device device, Stream stream) {
  CheckIndex(device);
  void* ptr = nullptr;
  if (nbytes == 0) return nullptr;
  DeviceScope scope(device);
  const cudaError_t status = cudaMallocAsync(&ptr, nbytes, stream);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    throw Error(absl::StrFormat(
        "[cuda] out of memory on %s: asked for %.3f GiB, %.3f GiB free of %.3f GiB; use a "
        "smaller batch or model",
        device.ToString(), nbytes / double(1 << 30), free_bytes / double(1 << 30),
        total / double(1 << 30)));
  }
  Check(status, StrCat("allocating ", nbytes, " bytes on ", device.ToString()));
  return ptr;
}

void Free(void* ptr, Device device, Stream stream) noexcept {
  if (ptr == nullptr) return;
  // At process exit the runtime may already be gone; nothing is left to release then.
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != device.index) cudaSetDevice(device.index);
  if (cudaFreeAsync(ptr, stream) != cudaSuccess) cudaGetLastError();
  if (previous != device.index) cudaSetDevice(previous);
}

void Copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  const Device gpu = dst_device.is_cuda() ? dst_device : src_device;
  DeviceScope scope(gpu);
  const Stream stream = CurrentStream(gpu);
  Check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream),
        StrCat("copying ", nbytes, " bytes from ", src_device.ToString(), " to ",
               dst_device.ToString()));
  if (dst_device.is_cpu() || src_device.is_cpu()) Check(cudaStreamSynchronize(stream), "copy");
}

void MemsetZero(void* ptr, size_t nbytes, Device device) {
  if (nbytes == 0) return;
  DeviceScope scope(device);
  Check(cudaMemsetAsync(ptr, 0, nbytes, CurrentStream(device)), "cudaMemsetAsync");
}

Stream CurrentStream(Device device) {
  CheckIndex(device);
  Stream& current = current_streams[device.index];
  if (current == nullptr) current = PoolStream(device);
  return current;
}

Stream PoolStream(Device device) {
  CheckIndex(device);
  if (absl::Status usable = CheckUsable(device); !usable.ok()) ThrowStatus(usable);
  StreamPool& pool = PoolOf(device);
  used_devices.fetch_or(1u << device.index);
  return pool.streams[pool.next.fetch_add(1) % kPoolStreams];
}

void Synchronize(Stream stream) { Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }

void SynchronizeAll() {
  const uint32_t used = used_devices.load();
  for (int i = 0; i < kMaxDevices; ++i) {
    if ((used >> i & 1u) == 0) continue;
    DeviceScope scope(Device::Cuda(i));
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
}

StreamGuard::StreamGuard(Device device, Stream stream)
    : device_(device), previous_(CurrentStream(device)) {
  current_streams[device.index] = stream;
}

StreamGuard::~StreamGuard() { current_streams[device_.index] = previous_; }

Event::Event(Device device) : device_(device) {
  DeviceScope scope(device);
  cudaEvent_t event;
  Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  event_ = event;
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

void Event::Record(Stream stream) {
  DeviceScope scope(device_);
  Check(cudaEventRecord(event_, stream), "cudaEventRecord");
}

void Event::Block(Stream stream) const {
  DeviceScope scope(device_);
  Check(cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent");
}

bool Event::Query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  Check(status, "cudaEventQuery");
  return true;
}

void Event::Synchronize() const { Check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }

}  // namespace ddpkit::cuda
