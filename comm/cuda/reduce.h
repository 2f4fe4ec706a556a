// The GPU side of comm/reduce.h, for the threads world's collectives on CUDA tensors: the same
// contracts on device pointers, queued on the current stream of `device`. Defined only in a
// CUDA build (callers guard with `if constexpr (kWithCuda)`).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/types.h"

namespace ddpkit::cuda {

// The most inputs ReduceRankOrder folds in one kernel (their pointers travel as a kernel
// argument); a larger world reduces through staged copies instead.
inline constexpr int kMaxRankOrderInputs = 64;

void ReduceInto(void* dst, const void* src, int64_t n, DType dtype, comm::ReduceOp op,
                Device device);
// out[i] = op(inputs[0][i], inputs[1][i], ...) in input order; each element is read from every
// input before it is written, so `out` may alias one of them. Native dtypes only.
void ReduceRankOrder(const std::vector<const void*>& inputs, void* out, int64_t n, DType dtype,
                     comm::ReduceOp op, Device device);
void DivideInPlace(void* data, int64_t n, DType dtype, int divisor, Device device);

}  // namespace ddpkit::cuda
