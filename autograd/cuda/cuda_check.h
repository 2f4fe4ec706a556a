// Error checks for code that includes <cuda_runtime.h> (the .cu files and the CUDA-only .cc
// files). Every runtime call is checked; a failure throws ddpkit::Error naming the call and the
// CUDA error.
#pragma once

#include <cuda_runtime.h>

#include <string_view>

#include "autograd/base/error.h"
#include "autograd/device.h"

namespace ddpkit::cuda {

// Throws "[cuda] <what>: <CUDA's error text> (<error name>)" unless `status` is cudaSuccess.
void Check(cudaError_t status, std::string_view what);
// After a kernel launch: throws if the launch failed (bad configuration, no device).
void CheckLaunch(std::string_view kernel);

// Makes `device` the calling thread's current GPU for a scope (kernels launch on it).
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// Threads per block and blocks for an elementwise kernel over n elements (grid-stride loops
// cover the rest).
inline constexpr int kThreadsPerBlock = 256;
inline unsigned BlocksFor(int64_t n) {
  const int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

}  // namespace ddpkit::cuda
