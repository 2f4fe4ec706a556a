// One library handle per thread and GPU, destroyed with the thread: cuBLAS's and cuDNN's handles
// are not meant to be shared between threads (gemm.cc, cudnn.cc).
#pragma once

#include <array>
#include <string_view>

#include "autograd/cuda/runtime.h"
#include "autograd/device.h"

namespace ddpkit::cuda {

template <typename Handle, auto Create, auto Destroy, auto SetStream>
struct ThreadHandles {
  std::array<Handle, 16> by_device{};
  ThreadHandles() = default;
  ThreadHandles(const ThreadHandles&) = delete;
  ThreadHandles& operator=(const ThreadHandles&) = delete;
  ~ThreadHandles() {
    for (Handle h : by_device) {
      if (h != nullptr) Destroy(h);
    }
  }
  // This thread's handle for `device` (created on first use), bound to its current stream;
  // `check(status, what)` throws on a failed call.
  template <typename Check>
  Handle For(Device device, Check check) {
    Handle& handle = by_device.at(device.index);
    if (handle == nullptr) check(Create(&handle), "creating a handle");
    check(SetStream(handle, CurrentStream(device)), "binding the handle to the stream");
    return handle;
  }
};

}  // namespace ddpkit::cuda
