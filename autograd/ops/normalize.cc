// Row-wise L2 normalisation (the last step of a contrastive encoder).
#include <algorithm>
#include <cmath>

#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {
namespace {

// out[r] = x[r] / norms[r], norms[r] = max(||x[r]||, eps) (float64, kept for backward).
void Normalize(const Tensor& x, const Tensor& out, const Tensor& norms, double eps) {
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return cuda::L2NormalizeRows(x, out, norms, eps);
  }
  DispatchFloating(x.dtype(), "l2_normalize_rows", [&]<typename T>() {
    const int64_t rows = x.size(0), cols = x.size(1);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    double* norm = norms.data<double>();
    for (int64_t r = 0; r < rows; ++r) {
      double sq = 0;
      for (int64_t c = 0; c < cols; ++c)
        sq += static_cast<double>(in[r * cols + c]) * in[r * cols + c];
      norm[r] = std::max(std::sqrt(sq), eps);
      for (int64_t c = 0; c < cols; ++c)
        o[r * cols + c] = static_cast<T>(in[r * cols + c] / norm[r]);
    }
  });
}

// Where the norm exceeds eps, y = x / ||x|| and dx = (dy - y (y . dy)) / ||x||;
// where it was clamped, y = x / eps is linear and dx = dy / eps.
Tensor NormalizeGrad(const Tensor& g, const Tensor& y, const Tensor& norms, double eps) {
  Tensor dx = Tensor::Empty(g.shape(), g.dtype(), g.device());
  if constexpr (kWithCuda) {
    if (g.is_cuda()) {
      cuda::L2NormalizeRowsBackward(g, y, norms, eps, dx);
      return dx;
    }
  }
  DispatchFloating(g.dtype(), "l2_normalize_rows_backward", [&]<typename T>() {
    const int64_t rows = g.size(0), cols = g.size(1);
    const T* dy = g.data<T>();
    const T* yv = y.data<T>();
    const double* norm = norms.data<double>();
    T* o = dx.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const bool clamped = norm[r] <= eps;
      double dot = 0;
      if (!clamped) {
        for (int64_t c = 0; c < cols; ++c)
          dot += static_cast<double>(yv[r * cols + c]) * dy[r * cols + c];
      }
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        o[i] = static_cast<T>((dy[i] - (clamped ? 0.0 : yv[i] * dot)) / norm[r]);
      }
    }
  });
  return dx;
}

}  // namespace

Tensor L2NormalizeRows(const Tensor& x, double eps) {
  op_util::CheckMatrix("l2_normalize_rows", "input", x);
  Tensor out = Tensor::Empty(x.shape(), x.dtype(), x.device());
  Tensor norms = Tensor::Empty({x.size(0)}, DType::kFloat64, x.device());
  Normalize(x, out, norms, eps);
  RecordOp(out, "L2NormalizeRowsBackward", {&x}, [y = out.Detach(), norms, eps](const Tensor& g) {
    return TensorList{NormalizeGrad(g, y, norms, eps)};
  });
  return out;
}

}  // namespace ddpkit
