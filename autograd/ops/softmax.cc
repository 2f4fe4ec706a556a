// Softmax over the last dimension, as torch.softmax(x, dim=-1); its row loops serve the
// attention op's scores too (softmax_rows.h).
#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/ops/softmax_rows.h"

namespace ddpkit {
namespace op_util {

void SoftmaxLastDim(const Tensor& x, const Tensor& y, bool causal, double scale) {
  const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return cuda::SoftmaxRows(x, y, causal, scale);
  }
  DispatchFloating(x.dtype(), "softmax", [&]<typename T>() {
    for (int64_t r = 0; r < rows; ++r) {
      const T* in = x.data<T>() + r * n;
      T* out = y.data<T>() + r * n;
      const int64_t last = causal ? r % n : n - 1;  // the last unmasked column
      T max = -std::numeric_limits<T>::infinity(), sum = 0;
      for (int64_t j = 0; j <= last; ++j) {
        out[j] = causal ? in[j] * T(scale) : in[j];
        max = out[j] > max ? out[j] : max;
      }
      for (int64_t j = 0; j <= last; ++j) sum += (out[j] = std::exp(out[j] - max));
      for (int64_t j = 0; j <= last; ++j) out[j] /= sum;
      for (int64_t j = last + 1; j < n; ++j) out[j] = T(0);
    }
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
      for (int64_t j = 0; j < n; ++j) dot += g[j] * p[j];
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
