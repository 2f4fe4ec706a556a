// The GPU side of ops/loss.cc: row-wise log-softmax (one block per row, shared-memory max and
// sum), its backward, and cross-entropy's loss and gradient. All sums are fixed-order trees.
#include <cmath>

#include "autograd/cuda/block_reduce.cuh"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

// As the host's LogSoftmaxRows: max-shifted, the exp-sum accumulated in double.
template <typename T>
__global__ void LogSoftmaxKernel(const T* x, T* out, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * cols;
    T* o = out + r * cols;
    T max = cols > 0 ? in[0] : T(0);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) max = in[c] > max ? in[c] : max;
    max = BlockReduce(max, MaxOp{});
    double sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      sum += exp(static_cast<double>(in[c] - max));
    }
    sum = BlockReduce(sum, SumOp{});
    const T log_sum = static_cast<T>(log(sum));
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = in[c] - max - log_sum;
  }
}

// dx = dy - exp(y) * rowsum(dy).
template <typename T>
__global__ void LogSoftmaxBackwardKernel(const T* dy, const T* y, T* dx, int64_t rows,
                                         int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    double row_sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) row_sum += dy[base + c];
    const T sum = static_cast<T>(BlockReduce(row_sum, SumOp{}));
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      dx[base + c] = dy[base + c] - exp(y[base + c]) * sum;
    }
  }
}

// out[0] = -scale * sum_r log_probs[r, labels[r]], by one block.
template <typename T>
__global__ void NllSumKernel(const T* lp, const int64_t* labels, int64_t rows, int64_t cols,
                             double scale, T* out) {
  double total = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) total -= lp[r * cols + labels[r]];
  total = BlockReduce(total, SumOp{});
  if (threadIdx.x == 0) out[0] = static_cast<T>(total * scale);
}

template <typename T>
void LogSoftmaxOf(const Tensor& x, const Tensor& out) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows == 0) return;
  DeviceScope scope(x.device());
  LogSoftmaxKernel<T><<<BlocksForRows(rows), kThreadsPerBlock, 0, CurrentStream(x.device())>>>(
      x.device_data<T>(), out.device_data<T>(), rows, cols);
  CheckLaunch("LogSoftmax");
}

template <typename T>
void LogSoftmaxBackwardOf(const Tensor& dy, const Tensor& y, const Tensor& dx) {
  const int64_t rows = dy.size(0), cols = dy.size(1);
  if (rows == 0) return;
  DeviceScope scope(dy.device());
  LogSoftmaxBackwardKernel<T>
      <<<BlocksForRows(rows), kThreadsPerBlock, 0, CurrentStream(dy.device())>>>(
          dy.device_data<T>(), y.device_data<T>(), dx.device_data<T>(), rows, cols);
  CheckLaunch("LogSoftmaxBackward");
}

template <typename T>
Tensor NllSumOf(const Tensor& log_probs, const Tensor& labels, double scale) {
  Tensor out = Tensor::Empty({}, log_probs.dtype(), log_probs.device());
  DeviceScope scope(log_probs.device());
  NllSumKernel<T><<<1, kThreadsPerBlock, 0, CurrentStream(log_probs.device())>>>(
      log_probs.device_data<T>(), labels.device_data<int64_t>(), log_probs.size(0),
      log_probs.size(1), scale, out.device_data<T>());
  CheckLaunch("NllSum");
  return out;
}

// dx[r, c] = factor * exp(lp[r, c]) - (c == label[r] ? factor : 0), factor = g * scale.
template <typename T>
void CrossEntropyBackwardOf(const Tensor& g, const Tensor& log_probs, const Tensor& labels,
                            double scale, const Tensor& dx) {
  const int64_t classes = log_probs.size(1);
  const T* upstream = g.device_data<T>();
  const T* lp = log_probs.device_data<T>();
  const int64_t* label = labels.device_data<int64_t>();
  T* o = dx.device_data<T>();
  ForEach(dx.device(), dx.numel(), "CrossEntropyBackward", [=] __device__(int64_t i) {
    const T factor = static_cast<T>(static_cast<double>(*upstream) * scale);
    const int64_t r = i / classes, c = i % classes;
    T v = factor * exp(lp[i]);
    if (c == label[r]) v -= factor;
    o[i] = v;
  });
}

bool IsDouble(const Tensor& t) { return t.dtype() == DType::kFloat64; }

}  // namespace

void LogSoftmaxRows(const Tensor& x, const Tensor& out) {
  IsDouble(x) ? LogSoftmaxOf<double>(x, out) : LogSoftmaxOf<float>(x, out);
}

void LogSoftmaxBackward(const Tensor& dy, const Tensor& y, const Tensor& dx) {
  IsDouble(dy) ? LogSoftmaxBackwardOf<double>(dy, y, dx) : LogSoftmaxBackwardOf<float>(dy, y, dx);
}

Tensor NllSum(const Tensor& log_probs, const Tensor& labels, double scale) {
  return IsDouble(log_probs) ? NllSumOf<double>(log_probs, labels, scale)
                             : NllSumOf<float>(log_probs, labels, scale);
}

void CrossEntropyBackward(const Tensor& g, const Tensor& log_probs, const Tensor& labels,
                          double scale, const Tensor& dx) {
  IsDouble(dx) ? CrossEntropyBackwardOf<double>(g, log_probs, labels, scale, dx)
               : CrossEntropyBackwardOf<float>(g, log_probs, labels, scale, dx);
}

}  // namespace ddpkit::cuda
