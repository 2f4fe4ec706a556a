// Half precision and AVG, one way for every backend that reduces on the host or in its own
// kernels (threads, gloo, mpi; NCCL has its own): float16 and bfloat16 are reduced in float32
// and rounded back once, and AVG is a SUM divided by the world size at the end.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "autograd/base/error.h"
#include "autograd/tensor.h"
#include "comm/types.h"

namespace ddpkit::comm {

bool IsHalf(DType dtype);

// `t` itself when it already holds `dtype`, else a converted copy.
Tensor AsType(const Tensor& t, DType dtype);

// data[i] /= divisor on `device` (the host, or a GPU through comm/cuda/reduce.h).
void DivideInPlaceOn(Device device, void* data, int64_t n, DType dtype, int divisor);

// out <- the ranks' reduction under `op`. `reduce_into(acc)` writes the reduction (AVG as a
// SUM) into `acc`: `out` itself, or for half precision a float32 copy of it, which is rounded
// back into `out` once. Then AVG divides by `world_size`.
template <typename ReduceInto>
absl::Status ReduceWidened(const Tensor& out, ReduceOp op, int world_size, ReduceInto reduce_into) {
  const Tensor acc = IsHalf(out.dtype()) ? out.To(DType::kFloat32) : out;
  DDPKIT_RETURN_IF_ERROR(reduce_into(acc));
  if (op == ReduceOp::kAvg) {
    DivideInPlaceOn(acc.device(), acc.raw_data(), acc.numel(), acc.dtype(), world_size);
  }
  if (!acc.IsAliasOf(out)) out.CopyFrom(acc);
  return absl::OkStatus();
}

}  // namespace ddpkit::comm
