// The GPU side of ops/layer_norm.cc: one block per row for the normalisation and dx (sums in
// double, fixed-order block trees); dw and db as column sums in double (column_reduce.cuh).
#include <cmath>

#include "autograd/cuda/block_reduce.cuh"
#include "autograd/cuda/column_reduce.cuh"
#include "autograd/cuda/launch.cuh"
#include "autograd/cuda/ops.h"

namespace ddpkit::cuda {
namespace {

template <typename T>
__global__ void LayerNormKernel(const T* x, const T* w, const T* b, T* y, T* xhat, T* rstd,
                                int64_t rows, int64_t d, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * d;
    double sum = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += in[j];
    const double mean = BlockReduce(sum, SumOp{}) / d;
    double sq = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sq += (in[j] - mean) * (in[j] - mean);
    const double s = 1.0 / sqrt(BlockReduce(sq, SumOp{}) / d + eps);
    if (threadIdx.x == 0) rstd[r] = static_cast<T>(s);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const T h = static_cast<T>((in[j] - mean) * s);
      xhat[r * d + j] = h;
      y[r * d + j] = h * (w ? w[j] : T(1)) + (b ? b[j] : T(0));
    }
  }
}

template <typename T>
__global__ void LayerNormDxKernel(const T* g, const T* xhat, const T* rstd, const T* w, T* dx,
                                  int64_t rows, int64_t d) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double sum = 0, dot = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double dh = static_cast<double>(g[r * d + j]) * (w ? w[j] : T(1));
      sum += dh;
      dot += dh * xhat[r * d + j];
    }
    sum = BlockReduce(sum, SumOp{});
    dot = BlockReduce(dot, SumOp{});
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const double dh = static_cast<double>(g[r * d + j]) * (w ? w[j] : T(1));
      dx[r * d + j] = static_cast<T>(rstd[r] * (dh - sum / d - xhat[r * d + j] * dot / d));
    }
  }
}

template <typename T>
void LayerNormOf(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                 const Tensor& y, const Tensor& xhat, const Tensor& rstd) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  DeviceScope scope(x.device());
  LayerNormKernel<T><<<BlocksForRows(rows), kThreadsPerBlock, 0, CurrentStream(x.device())>>>(
      x.device_data<T>(), weight.defined() ? weight.device_data<T>() : nullptr,
      bias.defined() ? bias.device_data<T>() : nullptr, y.device_data<T>(), xhat.device_data<T>(),
      rstd.device_data<T>(), rows, d, eps);
  CheckLaunch("LayerNorm");
}

template <typename T>
void LayerNormBackwardOf(const Tensor& g, const Tensor& xhat, const Tensor& rstd,
                         const Tensor& weight, const Tensor& dx, const Tensor& dw,
                         const Tensor& db) {
  const int64_t d = g.size(-1), rows = g.numel() / d;
  if (rows == 0) return;
  const T* gp = g.device_data<T>();
  const T* h = xhat.device_data<T>();
  if (dx.defined()) {
    DeviceScope scope(g.device());
    LayerNormDxKernel<T><<<BlocksForRows(rows), kThreadsPerBlock, 0, CurrentStream(g.device())>>>(
        gp, h, rstd.device_data<T>(), weight.defined() ? weight.device_data<T>() : nullptr,
        dx.device_data<T>(), rows, d);
    CheckLaunch("LayerNormBackward");
  }
  if (dw.defined()) {
    ColumnReduce<double>(g.device(), rows, d, dw.device_data<T>(), "LayerNormWeightBackward",
                         [=] __device__(int64_t r, int64_t j) {
                           return static_cast<double>(gp[r * d + j]) * h[r * d + j];
                         });
  }
  if (db.defined()) {
    ColumnReduce<double>(
        g.device(), rows, d, db.device_data<T>(), "LayerNormBiasBackward",
        [=] __device__(int64_t r, int64_t j) { return static_cast<double>(gp[r * d + j]); });
  }
}

}  // namespace

void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
               const Tensor& y, const Tensor& xhat, const Tensor& rstd) {
  x.dtype() == DType::kFloat64 ? LayerNormOf<double>(x, weight, bias, eps, y, xhat, rstd)
                               : LayerNormOf<float>(x, weight, bias, eps, y, xhat, rstd);
}

void LayerNormBackward(const Tensor& g, const Tensor& xhat, const Tensor& rstd,
                       const Tensor& weight, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  g.dtype() == DType::kFloat64 ? LayerNormBackwardOf<double>(g, xhat, rstd, weight, dx, dw, db)
                               : LayerNormBackwardOf<float>(g, xhat, rstd, weight, dx, dw, db);
}

}  // namespace ddpkit::cuda
