// Raw, non-differentiable kernels on tensors: in-place arithmetic for gradient accumulation,
// optimizers and (later) bucket copies, and the BLAS entry point for matmul. None of them
// allocates.
#pragma once

#include "autograd/tensor.h"

namespace ddpkit {

// dst += alpha * src (same dtype and element count; float32 or float64).
void AddInPlace(const Tensor& dst, const Tensor& src, double alpha = 1.0);
// t *= factor.
void ScaleInPlace(const Tensor& t, double factor);
// dst = factor * src, in one pass (DDP copies a gradient into its bucket this way).
void ScaledCopy(const Tensor& dst, const Tensor& src, double factor);

// C[m x n] = alpha * op(A) * op(B) + beta * C, row-major, where op(X) is X or its transpose.
// A is m x k after op, B is k x n after op. Calls OpenBLAS sgemm / dgemm.
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const Tensor& a, const Tensor& b, double beta, const Tensor& c);

// True when no other handle or view can observe `t`'s storage, so it may be reused in place.
bool IsSoleOwner(const Tensor& t);

}  // namespace ddpkit
