// Launching elementwise work: ForEach(t.device(), n, "name", [=] __device__(int64_t i) {...})
// runs the lambda for i in [0, n) on the current stream of that GPU, in a grid-stride loop.
#pragma once

#include <string_view>

#include "autograd/cuda/cuda_check.h"
#include "autograd/cuda/runtime.h"

namespace ddpkit::cuda {

template <typename F>
__global__ void ForEachKernel(int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    f(i);
  }
}

template <typename F>
void ForEach(Device device, int64_t n, std::string_view name, F f) {
  if (n == 0) return;
  DeviceScope scope(device);
  ForEachKernel<<<BlocksFor(n), kThreadsPerBlock, 0, CurrentStream(device)>>>(n, f);
  CheckLaunch(name);
}

}  // namespace ddpkit::cuda
