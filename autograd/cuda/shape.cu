// The GPU side of ops/shape.cc: transpose, one thread per output element (concat and slice are
// device copies, reshape a view).
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
void TransposeOf(const Tensor& x, const Tensor& out) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const T* in = x.device_data<T>();
  T* o = out.device_data<T>();
  // Output element i is (c, r) = (i / rows, i % rows), read from input (r, c).
  ForEach(out.device(), out.numel(), "Transpose",
          [=] __device__(int64_t i) { o[i] = in[(i % rows) * cols + i / rows]; });
}

}  // namespace

void Transpose(const Tensor& x, const Tensor& out) {
  x.dtype() == DType::kFloat64 ? TransposeOf<double>(x, out) : TransposeOf<float>(x, out);
}

}  // namespace ddpkit::cuda
