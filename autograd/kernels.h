// Raw, non-differentiable kernels on tensors: in-place arithmetic for gradient accumulation,
// optimizers and bucket copies (GEMM is in autograd/gemm.h). None of them allocates.
#pragma once

#include "autograd/tensor.h"

namespace ddpkit {

// dst += alpha * src (same dtype and element count; float32 or float64).
void AddInPlace(const Tensor& dst, const Tensor& src, double alpha = 1.0);
// t *= factor.
void ScaleInPlace(const Tensor& t, double factor);
// t /= divisor: a true division, whose bits differ from t *= 1/divisor unless divisor is a power
// of two (PyTorch's DDP divides a gradient that already is its bucket view this way).
void DivideInPlace(const Tensor& t, double divisor);
// dst = factor * src, in one pass (DDP copies a gradient into its bucket this way).
void ScaledCopy(const Tensor& dst, const Tensor& src, double factor);

// True when no other handle or view can observe `t`'s storage, so it may be reused in place.
bool IsSoleOwner(const Tensor& t);

}  // namespace ddpkit
