// Reductions over all elements.
#include <limits>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {
namespace {

// The sum in double (float32 sums of large gradients stay accurate), as a shape-[] tensor.
Tensor SumValue(const Tensor& x) {
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return cuda::Sum(x);  // a fixed-order tree: deterministic
  }
  return DispatchFloating(x.dtype(), "sum", [&]<typename T>() {
    const T* in = x.data<T>();
    double total = 0;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) total += in[i];
    return Tensor::Scalar(total, x.dtype());
  });
}

// A tensor of `shape` filled with g's one element, on g's device.
Tensor Expand(const Tensor& g, const Shape& shape) {
  if constexpr (kWithCuda) {
    if (g.is_cuda()) return cuda::ExpandScalar(g, shape);
  }
  return Tensor::Full(shape, g.item(), g.dtype());
}

}  // namespace

// ---------------------------------------------------------------------------- sum
Tensor Sum(const Tensor& x) {
  op_util::CheckFloating("sum", x);
  Tensor out = SumValue(x);
  // Every element's derivative is 1: broadcast the upstream scalar.
  RecordOp(out, "SumBackward", {&x},
           [shape = x.shape()](const Tensor& g) -> TensorList { return {Expand(g, shape)}; });
  return out;
}

// ---------------------------------------------------------------------------- mean
Tensor Mean(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) {  // 0/0, as PyTorch
    return MulScalar(Sum(x), std::numeric_limits<double>::quiet_NaN());
  }
  return DivScalar(Sum(x), static_cast<double>(n));
}

}  // namespace ddpkit
