#include "comm/widen.h"

#include "autograd/device.h"
#include "comm/cuda/reduce.h"
#include "comm/reduce.h"

namespace ddpkit::comm {

bool IsHalf(DType dtype) { return dtype == DType::kFloat16 || dtype == DType::kBFloat16; }

Tensor AsType(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.To(dtype); }

void DivideInPlaceOn(Device device, void* data, int64_t n, DType dtype, int divisor) {
  if constexpr (kWithCuda) {
    if (device.is_cuda()) return cuda::DivideInPlace(data, n, dtype, divisor, device);
  }
  DivideInPlace(data, n, dtype, divisor);
}

}  // namespace ddpkit::comm
