// The GPU side of op_util::SoftmaxLastDim (ops/softmax.cc): one block per row, the maximum and
// the sums as fixed-order block trees; the causal variant scales and masks the attention scores.
#include <cmath>

#include "autograd/cuda/block_reduce.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
__global__ void SoftmaxKernel(const T* x, T* y, int64_t rows, int64_t n, bool causal, T scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t last = causal ? r % n : n - 1;  // the last unmasked column
    const T* in = x + r * n;
    T* out = y + r * n;
    T max = -INFINITY;
    for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
      const T v = causal ? in[j] * scale : in[j];
      max = v > max ? v : max;
    }
    max = BlockReduce(max, MaxOp{});
    T sum = 0;
    for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
      sum += exp((causal ? in[j] * scale : in[j]) - max);
    }
    sum = BlockReduce(sum, SumOp{});
    // Read every input before any output is written: y may be x.
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      out[j] = j <= last ? static_cast<T>(exp((causal ? in[j] * scale : in[j]) - max) / sum) : T(0);
    }
  }
}

template <typename T>
__global__ void SoftmaxBackwardKernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t n,
                                      T scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T dot = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += dy[r * n + j] * y[r * n + j];
    dot = BlockReduce(dot, SumOp{});
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const int64_t i = r * n + j;
      dx[i] = scale * y[i] * (dy[i] - dot);
    }
  }
}

template <typename T>
void SoftmaxOf(const Tensor& x, const Tensor& y, bool causal, double scale) {
  const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (rows == 0) return;
  DeviceScope scope(x.device());
  SoftmaxKernel<T><<<BlocksForRows(rows), kThreadsPerBlock, 0, CurrentStream(x.device())>>>(
      x.device_data<T>(), y.device_data<T>(), rows, n, causal, static_cast<T>(scale));
  CheckLaunch("Softmax");
}

template <typename T>
void SoftmaxBackwardOf(const Tensor& y, const Tensor& dy, const Tensor& dx, double scale) {
  const int64_t n = y.size(-1), rows = n == 0 ? 0 : y.numel() / n;
  if (rows == 0) return;
  DeviceScope scope(y.device());
  SoftmaxBackwardKernel<T><<<BlocksForRows(rows), kThreadsPerBlock, 0, CurrentStream(y.device())>>>(
      y.device_data<T>(), dy.device_data<T>(), dx.device_data<T>(), rows, n, static_cast<T>(scale));
  CheckLaunch("SoftmaxBackward");
}

}  // namespace

void SoftmaxRows(const Tensor& x, const Tensor& y, bool causal, double scale) {
  x.dtype() == DType::kFloat64 ? SoftmaxOf<double>(x, y, causal, scale)
                               : SoftmaxOf<float>(x, y, causal, scale);
}

void SoftmaxRowsBackward(const Tensor& y, const Tensor& dy, const Tensor& dx, double scale) {
  y.dtype() == DType::kFloat64 ? SoftmaxBackwardOf<double>(y, dy, dx, scale)
                               : SoftmaxBackwardOf<float>(y, dy, dx, scale);
}

}  // namespace ddpkit::cuda
