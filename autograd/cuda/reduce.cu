// The GPU side of ops/reduce.cc: a deterministic sum in two passes (per-block partial sums in
// double, then one block adds the partials in a fixed order), and the scalar broadcast of
// SumBackward.
#include <algorithm>

#include "autograd/cuda/block_reduce.cuh"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

constexpr int64_t kMaxPartials = 1024;

// partials[block] <- the sum of this block's grid-stride share of x, in double.
template <typename T>
__global__ void PartialSums(const T* x, int64_t n, double* partials) {
  double total = 0;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    total += static_cast<double>(x[i]);
  }
  total = BlockReduce(total, SumOp{});
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// out[0] <- the sum of the partials, by one block.
template <typename T>
__global__ void FinishSum(const double* partials, int64_t count, T* out) {
  double total = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) total += partials[i];
  total = BlockReduce(total, SumOp{});
  if (threadIdx.x == 0) out[0] = static_cast<T>(total);
}

template <typename T>
Tensor SumOf(const Tensor& x) {
  Tensor out = Tensor::Empty({}, x.dtype(), x.device());
  const int64_t blocks = std::min<int64_t>(BlocksFor(x.numel()), kMaxPartials);
  Tensor partials = Tensor::Empty({blocks}, DType::kFloat64, x.device());
  DeviceScope scope(x.device());
  Stream stream = CurrentStream(x.device());
  PartialSums<T><<<blocks, kThreadsPerBlock, 0, stream>>>(x.device_data<T>(), x.numel(),
                                                          partials.device_data<double>());
  CheckLaunch("PartialSums");
  FinishSum<T><<<1, kThreadsPerBlock, 0, stream>>>(partials.device_data<double>(), blocks,
                                                   out.device_data<T>());
  CheckLaunch("FinishSum");
  return out;
}

template <typename T>
Tensor ExpandScalarOf(const Tensor& g, const Shape& shape) {
  Tensor out = Tensor::Empty(shape, g.dtype(), g.device());
  const T* value = g.device_data<T>();
  T* o = out.device_data<T>();
  ForEach(out.device(), out.numel(), "ExpandScalar", [=] __device__(int64_t i) { o[i] = *value; });
  return out;
}

}  // namespace

Tensor Sum(const Tensor& x) {
  return x.dtype() == DType::kFloat64 ? SumOf<double>(x) : SumOf<float>(x);
}

Tensor ExpandScalar(const Tensor& g, const Shape& shape) {
  DDPKIT_CHECK(g.numel() == 1, "[ExpandScalar] expects one element, got ", ShapeString(g.shape()));
  return g.dtype() == DType::kFloat64 ? ExpandScalarOf<double>(g, shape)
                                      : ExpandScalarOf<float>(g, shape);
}

}  // namespace ddpkit::cuda
