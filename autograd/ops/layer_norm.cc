// Layer normalisation over the last dimension, as PyTorch's native_layer_norm: each row is
// normalised with its own mean and biased variance, then scaled and shifted per column.
#include <cmath>
#include <type_traits>

#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/ops/vec_math.h"

namespace ddpkit {
namespace {

void CheckLayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  op_util::CheckFloating("layer_norm", x);
  DDPKIT_CHECK(x.dim() >= 1, "[layer_norm] input must have at least one dimension");
  const Shape columns = {x.size(-1)};
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    DDPKIT_CHECK(p->dtype() == x.dtype() && p->shape() == columns,
                 "[layer_norm] weight and bias "
                 "must be ",
                 DTypeName(x.dtype()), ShapeString(columns), ", got ", DTypeName(p->dtype()),
                 ShapeString(p->shape()));
    op_util::CheckSameDevice("layer_norm", x, *p);
  }
}

// Per row: xhat = (x - mean) * rstd; y = xhat * w + b. Keeps xhat and rstd for the backward.
// Moments in double; `omp simd` lets the sums vectorise (in another order than one by one).
template <typename T>
[[gnu::always_inline]] inline void LayerNormRowsOf(const T* x, const T* w, const T* b, double eps,
                                                   int64_t rows, int64_t d, T* y, T* xhat,
                                                   T* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = x + r * d;
    double mean = 0, var = 0;
#pragma omp simd reduction(+ : mean)
    for (int64_t j = 0; j < d; ++j) mean += in[j];
    mean /= static_cast<double>(d);
#pragma omp simd reduction(+ : var)
    for (int64_t j = 0; j < d; ++j) var += (in[j] - mean) * (in[j] - mean);
    const double s = 1.0 / std::sqrt(var / static_cast<double>(d) + eps);
    rstd[r] = T(s);
    T* h = xhat + r * d;
    T* out = y + r * d;
    const T tm = T(mean), ts = T(s);
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) {
      h[j] = (in[j] - tm) * ts;
      out[j] = h[j] * (w ? w[j] : T(1)) + (b ? b[j] : T(0));
    }
  }
}

// The float32 loops once per ISA level (vec_math.h).
DDPKIT_VECTOR_CLONES void LayerNormRowsFloat(const float* x, const float* w, const float* b,
                                             double eps, int64_t rows, int64_t d, float* y,
                                             float* xhat, float* rstd) {
  LayerNormRowsOf(x, w, b, eps, rows, d, y, xhat, rstd);
}

template <typename T>
void LayerNormRows(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                   const Tensor& y, const Tensor& xhat, const Tensor& rstd) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const T* w = weight.defined() ? weight.data<T>() : nullptr;
  const T* b = bias.defined() ? bias.data<T>() : nullptr;
  if constexpr (std::is_same_v<T, float>) {
    LayerNormRowsFloat(x.data<T>(), w, b, eps, rows, d, y.data<T>(), xhat.data<T>(),
                       rstd.data<T>());
  } else {
    LayerNormRowsOf(x.data<T>(), w, b, eps, rows, d, y.data<T>(), xhat.data<T>(), rstd.data<T>());
  }
}

struct LayerNormSaved {
  Tensor xhat, rstd, weight;
  bool x_grad, w_grad, b_grad;
};

// dxhat = g * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat));
// dw = sum over rows of g * xhat; db = sum over rows of g. Null outputs are not wanted.
template <typename T>
[[gnu::always_inline]] inline void LayerNormBackwardRowsOf(const T* g, const T* xhat, const T* rstd,
                                                           const T* w, int64_t rows, int64_t d,
                                                           T* dx, T* dw, T* db) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* dy = g + r * d;
    const T* h = xhat + r * d;
    if (dw != nullptr) {
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) dw[j] += dy[j] * h[j];
    }
    if (db != nullptr) {
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) db[j] += dy[j];
    }
    if (dx == nullptr) continue;
    double sum = 0, dot = 0;
#pragma omp simd reduction(+ : sum, dot)
    for (int64_t j = 0; j < d; ++j) {
      const double dh = double(dy[j]) * (w ? w[j] : T(1));
      sum += dh;
      dot += dh * h[j];
    }
    const double s = rstd[r];
    const T a = T(s), mean_dh = T(s * sum / static_cast<double>(d)),
            proj = T(s * dot / static_cast<double>(d));
    T* out = dx + r * d;
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) out[j] = a * dy[j] * (w ? w[j] : T(1)) - mean_dh - h[j] * proj;
  }
}

DDPKIT_VECTOR_CLONES void LayerNormBackwardRowsFloat(const float* g, const float* xhat,
                                                     const float* rstd, const float* w,
                                                     int64_t rows, int64_t d, float* dx, float* dw,
                                                     float* db) {
  LayerNormBackwardRowsOf(g, xhat, rstd, w, rows, d, dx, dw, db);
}

template <typename T>
void LayerNormBackwardRows(const LayerNormSaved& s, const Tensor& g, const Tensor& dx,
                           const Tensor& dw, const Tensor& db) {
  const int64_t d = g.size(-1), rows = g.numel() / d;
  auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
  if constexpr (std::is_same_v<T, float>) {
    LayerNormBackwardRowsFloat(g.data<T>(), s.xhat.data<T>(), s.rstd.data<T>(), ptr(s.weight), rows,
                               d, ptr(dx), ptr(dw), ptr(db));
  } else {
    LayerNormBackwardRowsOf(g.data<T>(), s.xhat.data<T>(), s.rstd.data<T>(), ptr(s.weight), rows, d,
                            ptr(dx), ptr(dw), ptr(db));
  }
}

TensorList LayerNormBackward(const LayerNormSaved& s, const Tensor& g) {
  const int64_t d = g.size(-1);
  Tensor dx = s.x_grad ? Tensor::Uninitialized(g.shape(), g.dtype(), g.device()) : Tensor();
  Tensor dw = s.w_grad ? Tensor::Zeros({d}, g.dtype(), g.device()) : Tensor();
  Tensor db = s.b_grad ? Tensor::Zeros({d}, g.dtype(), g.device()) : Tensor();
  if constexpr (kWithCuda) {
    if (g.is_cuda()) {
      cuda::LayerNormBackward(g, s.xhat, s.rstd, s.weight, dx, dw, db);
      return {dx, dw, db};
    }
  }
  DispatchFloating(g.dtype(), "layer_norm_backward",
                   [&]<typename T>() { LayerNormBackwardRows<T>(s, g, dx, dw, db); });
  return {dx, dw, db};
}

}  // namespace

Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  CheckLayerNorm(x, weight, bias);

  const int64_t rows = x.numel() / x.size(-1);
  Tensor y = Tensor::Uninitialized(x.shape(), x.dtype(), x.device());
  Tensor xhat = Tensor::Uninitialized(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::Uninitialized({rows}, x.dtype(), x.device());
  if constexpr (kWithCuda) {
    if (x.is_cuda()) cuda::LayerNorm(x, weight, bias, eps, y, xhat, rstd);
  }
  if (!x.is_cuda()) {
    DispatchFloating(x.dtype(), "layer_norm",
                     [&]<typename T>() { LayerNormRows<T>(x, weight, bias, eps, y, xhat, rstd); });
  }
  // Edges (input, weight, bias), as NativeLayerNormBackward's: the weight's and the bias's
  // accumulators become ready together, in that order.
  RecordOp(y, "NativeLayerNormBackward", {&x, &weight, &bias},
           [s = LayerNormSaved{.xhat = xhat,
                               .rstd = rstd,
                               .weight = weight.defined() ? weight.Detach() : Tensor(),
                               .x_grad = x.requires_grad(),
                               .w_grad = weight.defined() && weight.requires_grad(),
                               .b_grad = bias.defined() && bias.requires_grad()}](
               const Tensor& g) -> TensorList { return LayerNormBackward(s, g); });
  return y;
}

}  // namespace ddpkit
