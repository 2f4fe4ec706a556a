// Float16 and bfloat16 converted in bulk: the casts of fp16 compression and half-precision
// collectives touch millions of elements a step, where one out-of-line call per element (and a
// slow path for the small values gradients are full of) cost 10x the communication they save.
// On x86 CPUs with F16C the float16 casts are vector instructions; everywhere else, and for
// bfloat16, a loop over the per-element conversions. The results equal ToFloat16 / ToFloat of
// each element (round-to-nearest-even, subnormals and infinities included; a NaN stays a NaN).
#pragma once

#include <cstdint>

#include "autograd/dtype.h"

namespace ddpkit {

void FloatToHalf(const float* in, Float16* out, int64_t n);
void HalfToFloat(const Float16* in, float* out, int64_t n);
void FloatToBHalf(const float* in, BFloat16* out, int64_t n);
void BHalfToFloat(const BFloat16* in, float* out, int64_t n);

}  // namespace ddpkit
