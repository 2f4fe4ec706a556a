#include "autograd/device.h"

#include <charconv>

#include "autograd/base/error.h"

namespace ddpkit {

std::string Device::ToString() const {
  return is_cpu() ? std::string("cpu") : StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(std::string_view text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int index = -1;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data() + 5, end, index);
    if (ec == std::errc() && ptr == end && index >= 0) return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(
      StrCat("unknown device '", text, "': expected cpu, cuda or cuda:N"));
}

}  // namespace ddpkit
