// Helpers shared by the op files: argument checks and non-differentiable elementwise loops.
#pragma once

#include <string_view>

#include "autograd/base/error.h"
#include "autograd/cuda/ops.h"
#include "autograd/tensor.h"

namespace ddpkit::op_util {

// Throws unless both tensors are on one device ("[add] operands are on cpu and cuda:0; ...").
void CheckSameDevice(std::string_view op, const Tensor& a, const Tensor& b);
// Throws unless `x` is defined and float32/float64.
void CheckFloating(std::string_view op, const Tensor& x);
// Throws unless both are float32/float64 of one dtype on one device with equal shapes, or one
// of them has a single element (broadcast).
void CheckBinary(std::string_view op, const Tensor& a, const Tensor& b);
// Throws unless x is 2-D.
void CheckMatrix(std::string_view op, std::string_view what, const Tensor& x);

// out[i] = f(x[i]) — a new tensor of x's shape (host tensors; MapOn picks the device).
template <typename T, typename F>
Tensor Map(const Tensor& x, F f) {
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  const T* in = x.data<T>();
  T* o = out.data<T>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = f(in[i]);
  return out;
}

// out[i] = f(a[i], b[i]) where a single-element side is broadcast.
template <typename T, typename F>
Tensor Zip(const Tensor& a, const Tensor& b, F f) {
  const bool a_scalar = a.numel() == 1 && b.numel() != 1;
  const bool b_scalar = b.numel() == 1 && a.numel() != 1;
  Tensor out = Tensor::Empty(a_scalar ? b.shape() : a.shape(), a.dtype(), a.device());
  const T* x = a.data<T>();
  const T* y = b.data<T>();
  T* o = out.data<T>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    o[i] = f(x[a_scalar ? 0 : i], y[b_scalar ? 0 : i]);
  }
  return out;
}

// Map / Zip with a functor of autograd/pointwise.h, on the host or, for a GPU tensor, as
// a CUDA kernel (autograd/cuda/elementwise.cu instantiates one for each such functor).
template <typename F>
Tensor MapOn(std::string_view op, const Tensor& x, F f) {
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return cuda::Map(x, f);
  }
  return DispatchFloating(x.dtype(), op, [&]<typename T>() { return Map<T>(x, f); });
}
template <typename F>
Tensor ZipOn(std::string_view op, const Tensor& a, const Tensor& b, F f) {
  CheckSameDevice(op, a, b);
  if constexpr (kWithCuda) {
    if (a.is_cuda()) return cuda::Zip(a, b, f);
  }
  return DispatchFloating(a.dtype(), op, [&]<typename T>() { return Zip<T>(a, b, f); });
}

// A gradient of the broadcast output shape, reduced back to `input`'s shape (summed when the
// input was a broadcast single element).
Tensor SumToShapeOf(const Tensor& grad, const Tensor& input);

}  // namespace ddpkit::op_util
