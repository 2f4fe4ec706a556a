// The GPU side of ops/normalize.cc: one block per row, the squared norm and the backward's dot
// product as fixed-order shared-memory sums in double.
#include <cmath>

#include "autograd/cuda/block_reduce.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
__global__ void NormalizeKernel(const T* x, T* out, double* norms, int64_t rows, int64_t cols,
                                double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    double sq = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      sq += static_cast<double>(x[base + c]) * x[base + c];
    }
    sq = BlockReduce(sq, SumOp{});
    const double norm = fmax(sqrt(sq), eps);
    if (threadIdx.x == 0) norms[r] = norm;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      out[base + c] = static_cast<T>(x[base + c] / norm);
    }
  }
}

// Where the norm exceeds eps, dx = (dy - y (y . dy)) / norm; where it was clamped, dy / eps.
template <typename T>
__global__ void NormalizeBackwardKernel(const T* dy, const T* y, const double* norms, T* dx,
                                        int64_t rows, int64_t cols, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    const double norm = norms[r];
    const bool clamped = norm <= eps;  // the same for the whole block: no divergent sync
    double dot = 0;
    if (!clamped) {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        dot += static_cast<double>(y[base + c]) * dy[base + c];
      }
      dot = BlockReduce(dot, SumOp{});
    }
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const int64_t i = base + c;
      dx[i] = static_cast<T>((dy[i] - (clamped ? 0.0 : y[i] * dot)) / norm);
    }
  }
}

template <typename T>
void NormalizeOf(const Tensor& x, const Tensor& out, const Tensor& norms, double eps) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  DeviceScope scope(x.device());
  NormalizeKernel<T><<<BlocksForRows(rows), kThreadsPerBlock, 0, CurrentStream(x.device())>>>(
      x.device_data<T>(), out.device_data<T>(), norms.device_data<double>(), rows, cols, eps);
  CheckLaunch("L2NormalizeRows");
}

template <typename T>
void NormalizeBackwardOf(const Tensor& dy, const Tensor& y, const Tensor& norms, double eps,
                         const Tensor& dx) {
  const int64_t rows = dy.size(0), cols = dy.size(1);
  if (rows == 0) return;
  DeviceScope scope(dy.device());
  NormalizeBackwardKernel<T>
      <<<BlocksForRows(rows), kThreadsPerBlock, 0, CurrentStream(dy.device())>>>(
          dy.device_data<T>(), y.device_data<T>(), norms.device_data<double>(), dx.device_data<T>(),
          rows, cols, eps);
  CheckLaunch("L2NormalizeRowsBackward");
}

}  // namespace

void L2NormalizeRows(const Tensor& x, const Tensor& out, const Tensor& norms, double eps) {
  x.dtype() == DType::kFloat64 ? NormalizeOf<double>(x, out, norms, eps)
                               : NormalizeOf<float>(x, out, norms, eps);
}

void L2NormalizeRowsBackward(const Tensor& dy, const Tensor& y, const Tensor& norms, double eps,
                             const Tensor& dx) {
  dy.dtype() == DType::kFloat64 ? NormalizeBackwardOf<double>(dy, y, norms, eps, dx)
                                : NormalizeBackwardOf<float>(dy, y, norms, eps, dx);
}

}  // namespace ddpkit::cuda
