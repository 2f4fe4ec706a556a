// Device: where a tensor's storage lives — the host ("cpu") or one GPU ("cuda:N").
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#ifndef DDPKIT_WITH_CUDA
#define DDPKIT_WITH_CUDA 0
#endif

namespace ddpkit {

// True in a build with the CUDA code (DDPKIT_CUDA=AUTO found the toolkit, or ON). Code that
// calls into autograd/cuda/ guards the call with `if constexpr (kWithCuda)`, so a build without
// CUDA needs none of those definitions; at run time such a build has no CUDA tensors at all.
inline constexpr bool kWithCuda = DDPKIT_WITH_CUDA;

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // the GPU's ordinal; 0 for the CPU

  static Device Cpu() { return {}; }
  static Device Cuda(int index = 0) { return {DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  std::string ToString() const;  // "cpu", "cuda:0"
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda" (= cuda:0) or "cuda:N". Parsing does not check that the GPU exists.
absl::StatusOr<Device> ParseDevice(std::string_view text);

}  // namespace ddpkit
