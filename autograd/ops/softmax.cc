// Softmax over the last dimension, as torch.softmax(x, dim=-1); its row loops serve the
// attention op's scores too (softmax_rows.h).
#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/ops/softmax_rows.h"
#include "autograd/ops/vec_math.h"

namespace ddpkit {
namespace op_util {

namespace {

[[gnu::always_inline]] inline float ExpOf(float v) { return vec::Exp(v); }
inline double ExpOf(double v) { return std::exp(v); }

// One row: columns [0, last] scaled (when causal), exponentiated against their maximum and
// normalised; the rest 0. `#pragma omp simd` vectorises also in place (out == in).
template <typename T>
[[gnu::always_inline]] inline void SoftmaxRow(const T* in, T* out, int64_t n, int64_t last,
                                              T scale) {
  T max = -std::numeric_limits<T>::infinity(), sum = 0;
#pragma omp simd reduction(max : max)
  for (int64_t j = 0; j <= last; ++j) {
    out[j] = in[j] * scale;
    max = out[j] > max ? out[j] : max;
  }
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j <= last; ++j) sum += (out[j] = ExpOf(out[j] - max));
  const T inv = T(1) / sum;
#pragma omp simd
  for (int64_t j = 0; j <= last; ++j) out[j] *= inv;
  for (int64_t j = last + 1; j < n; ++j) out[j] = T(0);
}

template <typename T>
[[gnu::always_inline]] inline void SoftmaxRows(const T* in, T* out, int64_t rows, int64_t n,
                                               bool causal, T scale) {
  for (int64_t r = 0; r < rows; ++r) {
    SoftmaxRow(in + r * n, out + r * n, n, causal ? r % n : n - 1, causal ? scale : T(1));
  }
}

// The float32 loops once per ISA level (vec_math.h).
DDPKIT_VECTOR_CLONES void SoftmaxRowsFloat(const float* in, float* out, int64_t rows, int64_t n,
                                           bool causal, float scale) {
  SoftmaxRows(in, out, rows, n, causal, scale);
}

}  // namespace

void SoftmaxLastDim(const Tensor& x, const Tensor& y, bool causal, double scale) {
  const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return cuda::SoftmaxRows(x, y, causal, scale);
  }
  if (x.dtype() == DType::kFloat32) {
    return SoftmaxRowsFloat(x.data<float>(), y.data<float>(), rows, n, causal, float(scale));
  }
  DispatchFloating(x.dtype(), "softmax", [&]<typename T>() {
    SoftmaxRows(x.data<T>(), y.data<T>(), rows, n, causal, T(scale));
  });
}

void SoftmaxLastDimBackward(const Tensor& y, const Tensor& dy, const Tensor& dx, double scale) {
  const int64_t n = y.size(-1), rows = n == 0 ? 0 : y.numel() / n;
  if constexpr (kWithCuda) {
    if (y.is_cuda()) return cuda::SoftmaxRowsBackward(y, dy, dx, scale);
  }
  DispatchFloating(y.dtype(), "softmax_backward", [&]<typename T>() {
    for (int64_t r = 0; r < rows; ++r) {
      const T* p = y.data<T>() + r * n;
      const T* g = dy.data<T>() + r * n;
      T* out = dx.data<T>() + r * n;
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < n; ++j) dot += g[j] * p[j];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) out[j] = T(scale) * p[j] * (g[j] - dot);
    }
  });
}

}  // namespace op_util

Tensor Softmax(const Tensor& x) {
  op_util::CheckFloating("softmax", x);
  DDPKIT_CHECK(x.dim() >= 1, "[softmax] input must have at least one dimension");
  Tensor y = Tensor::Uninitialized(x.shape(), x.dtype(), x.device());
  op_util::SoftmaxLastDim(x, y);
  // dx = y * (dy - sum(dy * y)) per row: the backward needs only the output.
  RecordOp(y, "SoftmaxBackward", {&x}, [y = y.Detach()](const Tensor& g) -> TensorList {
    Tensor dx = Tensor::Uninitialized(g.shape(), g.dtype(), g.device());
    op_util::SoftmaxLastDimBackward(y, g, dx);
    return {dx};
  });
  return y;
}

}  // namespace ddpkit
