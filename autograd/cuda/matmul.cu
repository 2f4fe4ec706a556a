// The GPU side of ops/matmul.cc's non-gemm parts: Linear's bias broadcast and its gradient's
// column sums (the products themselves go through cuBLAS, autograd/cuda/gemm.cc).
#include "autograd/cuda/column_reduce.cuh"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
void BroadcastRowsOf(const Tensor& out, const Tensor& bias) {
  const int64_t n = bias.numel();
  const T* b = bias.device_data<T>();
  T* o = out.device_data<T>();
  ForEach(out.device(), out.numel(), "BroadcastRows",
          [=] __device__(int64_t i) { o[i] = b[i % n]; });
}

// Rows in fixed chunks, then the chunks in order (column_reduce.cuh): no atomics.
template <typename T>
void ColumnSumsOf(const Tensor& g, const Tensor& sums) {
  const int64_t rows = g.size(0), cols = g.size(1);
  const T* dy = g.device_data<T>();
  ColumnReduce<T>(g.device(), rows, cols, sums.device_data<T>(), "ColumnSums",
                  [=] __device__(int64_t r, int64_t c) { return dy[r * cols + c]; });
}

}  // namespace

void BroadcastRows(const Tensor& out, const Tensor& bias) {
  DDPKIT_CHECK(out.dim() == 2 && out.size(1) == bias.numel() && out.dtype() == bias.dtype(),
               "[BroadcastRows] ", ShapeString(bias.shape()), " into ", ShapeString(out.shape()));
  if (bias.numel() == 0) return;
  out.dtype() == DType::kFloat64 ? BroadcastRowsOf<double>(out, bias)
                                 : BroadcastRowsOf<float>(out, bias);
}

void ColumnSums(const Tensor& g, const Tensor& sums) {
  DDPKIT_CHECK(g.dim() == 2 && g.size(1) == sums.numel() && g.dtype() == sums.dtype(),
               "[ColumnSums] ", ShapeString(g.shape()), " into ", ShapeString(sums.shape()));
  g.dtype() == DType::kFloat64 ? ColumnSumsOf<double>(g, sums) : ColumnSumsOf<float>(g, sums);
}

}  // namespace ddpkit::cuda
