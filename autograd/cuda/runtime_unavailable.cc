// runtime.h in a build without CUDA: no GPU is ever visible, and asking for one says why.
#include "autograd/base/error.h"
#include "autograd/cuda/runtime.h"

namespace ddpkit::cuda {
namespace {

constexpr std::string_view kWhy =
    "ddpkit was built without CUDA (configure with -DDDPKIT_CUDA=ON on a machine with the CUDA "
    "toolkit, NCCL and cuDNN, or CUDA_HOME pointing at them)";

[[noreturn]] void Unavailable(Device device) {
  throw Error(StrCat("[cuda] ", device.ToString(), " is not usable: ", kWhy));
}

}  // namespace

int DeviceCount() { return 0; }

absl::Status CheckUsable(Device device) {
  if (device.is_cpu()) return absl::OkStatus();
  return absl::FailedPreconditionError(StrCat(device.ToString(), " is not usable: ", kWhy));
}

std::string DeviceDescription(Device device) { Unavailable(device); }
void* Allocate(size_t, Device device, Stream) { Unavailable(device); }
void Free(void*, Device, Stream) noexcept {}
void Copy(void*, Device dst_device, const void*, Device src_device, size_t) {
  Unavailable(dst_device.is_cuda() ? dst_device : src_device);
}
void MemsetZero(void*, size_t, Device device) { Unavailable(device); }
Stream CurrentStream(Device device) { Unavailable(device); }
Stream PoolStream(Device device) { Unavailable(device); }
void Synchronize(Stream) {}
void SynchronizeAll() {}

StreamGuard::StreamGuard(Device device, Stream) : device_(device), previous_(nullptr) {
  Unavailable(device);
}
StreamGuard::~StreamGuard() = default;

Event::Event(Device device) : device_(device) { Unavailable(device); }
Event::~Event() = default;
void Event::Record(Stream) {}
void Event::Block(Stream) const {}
bool Event::Query() const { return true; }
void Event::Synchronize() const {}

}  // namespace ddpkit::cuda
