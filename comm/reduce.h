// Elementwise reduction of raw buffers, shared by the backends. float16 and bfloat16 are
// reduced in float32 and rounded back once per step.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/types.h"

namespace ddpkit::comm {

// dst[i] = op(dst[i], src[i]) for i < n. AVG accumulates like SUM; divide with DivideInPlace.
void ReduceInto(void* dst, const void* src, int64_t n, DType dtype, ReduceOp op);
// out[i] = op(inputs[0][i], inputs[1][i], ...), combined in input order, for native dtypes
// (float32/64, int32/64). Block by block, every input is read before `out` is written, so `out`
// may alias any one of the inputs.
void ReduceRankOrder(const std::vector<const void*>& inputs, void* out, int64_t n, DType dtype,
                     ReduceOp op);

// data[i] /= divisor (floating-point dtypes).
void DivideInPlace(void* data, int64_t n, DType dtype, int divisor);

}  // namespace ddpkit::comm
