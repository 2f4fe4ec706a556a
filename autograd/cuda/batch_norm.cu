// The GPU side of ops/batch_norm.cc, the same formulas in the same precision: per-channel
// statistics and gradient sums in double, one block per channel (fixed-order block trees, no
// atomics), and elementwise kernels for the output and dx. x is [n, C, inner], contiguous.
#include <cmath>

#include "autograd/cuda/block_reduce.cuh"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

// Elements per (image, channel) plane; 0 for an empty batch, as the host's layout.
int64_t Inner(const Tensor& x) {
  const int64_t planes = x.size(0) * x.size(1);
  return x.numel() / (planes > 1 ? planes : 1);
}

// x's element i of channel c's n * inner elements (image i / inner, position i % inner).
__device__ int64_t ChannelElement(int64_t i, int64_t c, int64_t channels, int64_t inner) {
  return (i / inner * channels + c) * inner + i % inner;
}

// Training: the batch mean and biased variance (two passes), the running statistics moved
// toward them (the variance unbiased, n / (n - 1)); evaluation: the running statistics. Both
// write mean and invstd = 1 / sqrt(var + eps), float64 [C].
template <typename T>
__global__ void StatisticsKernel(const T* x, int64_t n, int64_t channels, int64_t inner,
                                 bool training, double momentum, double eps, T* running_mean,
                                 T* running_var, double* mean_out, double* invstd_out) {
  const int64_t count = n * inner;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    if (!training) {  // the same for every thread of the block: no reduction is skipped halfway
      if (threadIdx.x == 0) {
        mean_out[c] = running_mean[c];
        invstd_out[c] = 1.0 / sqrt(static_cast<double>(running_var[c]) + eps);
      }
      continue;
    }
    double sum = 0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
      sum += x[ChannelElement(i, c, channels, inner)];
    const double mean = BlockReduce(sum, SumOp{}) / static_cast<double>(count);
    double sq = 0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
      const double d = x[ChannelElement(i, c, channels, inner)] - mean;
      sq += d * d;
    }
    const double var = BlockReduce(sq, SumOp{}) / static_cast<double>(count);
    if (threadIdx.x != 0) continue;
    const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
    if (running_mean)
      running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * mean);
    if (running_var) {
      running_var[c] = static_cast<T>((1 - momentum) * running_var[c] + momentum * var * unbias);
    }
    mean_out[c] = mean;
    invstd_out[c] = 1.0 / sqrt(var + eps);
  }
}

// sums[c] = sum(dy), sums[C + c] = sum(dy (x - mean)) invstd = sum(dy xhat); dw, db (either
// null) their casts.
template <typename T>
__global__ void GradSumsKernel(const T* x, const T* dy, int64_t n, int64_t channels, int64_t inner,
                               const double* mean, const double* invstd, double* sums, T* dw,
                               T* db) {
  const int64_t count = n * inner;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    double a = 0, b = 0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
      const int64_t e = ChannelElement(i, c, channels, inner);
      a += dy[e];
      b += dy[e] * (x[e] - mean[c]);
    }
    a = BlockReduce(a, SumOp{});
    b = BlockReduce(b, SumOp{}) * invstd[c];
    if (threadIdx.x != 0) continue;
    sums[c] = a;
    sums[channels + c] = b;
    if (dw) dw[c] = static_cast<T>(b);
    if (db) db[c] = static_cast<T>(a);
  }
}

template <typename T>
void StatisticsOf(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  bool training, double momentum, double eps, const Tensor& mean,
                  const Tensor& invstd) {
  const int64_t n = x.size(0), channels = x.size(1), inner = Inner(x);
  DeviceScope scope(x.device());
  StatisticsKernel<T><<<BlocksForRows(channels), kThreadsPerBlock, 0, CurrentStream(x.device())>>>(
      x.device_data<T>(), n, channels, inner, training, momentum, eps,
      running_mean.defined() ? running_mean.device_data<T>() : nullptr,
      running_var.defined() ? running_var.device_data<T>() : nullptr, mean.device_data<double>(),
      invstd.device_data<double>());
  CheckLaunch("BatchNormStatistics");
}

// y = x alpha + beta per channel, alpha = invstd weight, beta = bias - mean alpha (in double,
// then cast, as the host).
template <typename T>
void NormalizeOf(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                 const Tensor& invstd, const Tensor& out) {
  const int64_t channels = x.size(1), inner = Inner(x);
  const T* in = x.device_data<T>();
  const T* w = weight.defined() ? weight.device_data<T>() : nullptr;
  const T* b = bias.defined() ? bias.device_data<T>() : nullptr;
  const double* m = mean.device_data<double>();
  const double* s = invstd.device_data<double>();
  T* y = out.device_data<T>();
  ForEach(x.device(), x.numel(), "BatchNorm", [=] __device__(int64_t i) {
    const int64_t c = i / inner % channels;
    const double wc = w ? static_cast<double>(w[c]) : 1.0;
    const T alpha = static_cast<T>(s[c] * wc);
    const T beta = static_cast<T>((b ? static_cast<double>(b[c]) : 0.0) - m[c] * s[c] * wc);
    y[i] = in[i] * alpha + beta;
  });
}

template <typename T>
void BackwardOf(const Tensor& x, const Tensor& dy, const Tensor& weight, const Tensor& mean,
                const Tensor& invstd, bool training, const Tensor& dx, const Tensor& dw,
                const Tensor& db) {
  const int64_t n = x.size(0), channels = x.size(1), inner = Inner(x);
  const double count = static_cast<double>(n * inner);
  const Tensor sums = Tensor::Uninitialized({2 * channels}, DType::kFloat64, x.device());
  const T* xp = x.device_data<T>();
  const T* g = dy.device_data<T>();
  const double* m = mean.device_data<double>();
  const double* s = invstd.device_data<double>();
  const double* sum = sums.device_data<double>();
  {
    DeviceScope scope(x.device());
    GradSumsKernel<T><<<BlocksForRows(channels), kThreadsPerBlock, 0, CurrentStream(x.device())>>>(
        xp, g, n, channels, inner, m, s, sums.device_data<double>(),
        dw.defined() ? dw.device_data<T>() : nullptr, db.defined() ? db.device_data<T>() : nullptr);
    CheckLaunch("BatchNormGradSums");
  }
  if (!dx.defined()) return;
  const T* w = weight.defined() ? weight.device_data<T>() : nullptr;
  T* out = dx.device_data<T>();
  // dx = scale (dy - [training] (sum(dy) + xhat sum(dy xhat)) / count), the coefficients in
  // double and cast, as the host's.
  ForEach(x.device(), x.numel(), "BatchNormBackward", [=] __device__(int64_t i) {
    const int64_t c = i / inner % channels;
    const double scale = s[c] * (w ? static_cast<double>(w[c]) : 1.0);
    const T tmean = static_cast<T>(m[c]), tinvstd = static_cast<T>(s[c]);
    const T tscale = static_cast<T>(scale);
    const T shift = static_cast<T>(training ? scale * sum[c] / count : 0.0);
    const T proj = static_cast<T>(training ? scale * sum[channels + c] / count : 0.0);
    out[i] = tscale * g[i] - shift - proj * ((xp[i] - tmean) * tinvstd);
  });
}

}  // namespace

void BatchNormStatistics(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                         bool training, double momentum, double eps, const Tensor& mean,
                         const Tensor& invstd) {
  x.dtype() == DType::kFloat64
      ? StatisticsOf<double>(x, running_mean, running_var, training, momentum, eps, mean, invstd)
      : StatisticsOf<float>(x, running_mean, running_var, training, momentum, eps, mean, invstd);
}

void BatchNormApply(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean,
                    const Tensor& invstd, const Tensor& out) {
  x.dtype() == DType::kFloat64 ? NormalizeOf<double>(x, weight, bias, mean, invstd, out)
                               : NormalizeOf<float>(x, weight, bias, mean, invstd, out);
}

void BatchNormBackward(const Tensor& x, const Tensor& dy, const Tensor& weight, const Tensor& mean,
                       const Tensor& invstd, bool training, const Tensor& dx, const Tensor& dw,
                       const Tensor& db) {
  x.dtype() == DType::kFloat64
      ? BackwardOf<double>(x, dy, weight, mean, invstd, training, dx, dw, db)
      : BackwardOf<float>(x, dy, weight, mean, invstd, training, dx, dw, db);
}

}  // namespace ddpkit::cuda
