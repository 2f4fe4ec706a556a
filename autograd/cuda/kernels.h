// The GPU side of autograd/kernels.h and of Tensor's Fill and converting CopyFrom: the same
// contracts, queued on the calling thread's current stream. The host entry points check the
// arguments (dtype, size, device) before they come here. Defined only in a CUDA build; callers
// guard each call with `if constexpr (kWithCuda)` (autograd/device.h).
#pragma once

#include "autograd/tensor.h"

namespace ddpkit::cuda {

void AddInPlace(const Tensor& dst, const Tensor& src, double alpha);
void ScaleInPlace(const Tensor& t, double factor);
void DivideInPlace(const Tensor& t, double divisor);
void ScaledCopy(const Tensor& dst, const Tensor& src, double factor);
// cuBLAS sgemm / dgemm with kernels.h's row-major contract (autograd/cuda/gemm.cc).
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const Tensor& a, const Tensor& b, double beta, const Tensor& c);
// t <- value, converted to t's dtype.
void Fill(const Tensor& t, double value);
// dst <- src converted to dst's dtype, both on one GPU.
void ConvertCopy(const Tensor& dst, const Tensor& src);

}  // namespace ddpkit::cuda
