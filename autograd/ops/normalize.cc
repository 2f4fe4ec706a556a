// Row-wise L2 normalisation (the last step of a contrastive encoder).
#include <algorithm>
#include <cmath>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {

Tensor L2NormalizeRows(const Tensor& x, double eps) {
  op_util::CheckMatrix("l2_normalize_rows", "input", x);
  const int64_t rows = x.size(0), cols = x.size(1);
  Tensor out = Tensor::Empty(x.shape(), x.dtype());
  std::vector<double> norms(rows);  // max(||x_r||, eps), reused by backward
  DispatchFloating(x.dtype(), "l2_normalize_rows", [&]<typename T>() {
    const T* in = x.data<T>();
    T* o = out.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      double sq = 0;
      for (int64_t c = 0; c < cols; ++c)
        sq += static_cast<double>(in[r * cols + c]) * in[r * cols + c];
      norms[r] = std::max(std::sqrt(sq), eps);
      for (int64_t c = 0; c < cols; ++c)
        o[r * cols + c] = static_cast<T>(in[r * cols + c] / norms[r]);
    }
  });
  // Where the norm exceeds eps, y = x / ||x|| and dx = (dy - y (y . dy)) / ||x||;
  // where it was clamped, y = x / eps is linear and dx = dy / eps.
  RecordOp(out, "L2NormalizeRowsBackward", {&x},
           [y = out.Detach(), norms = std::move(norms), eps, rows, cols](const Tensor& g) {
             Tensor dx = Tensor::Empty(g.shape(), g.dtype());
             DispatchFloating(g.dtype(), "l2_normalize_rows_backward", [&]<typename T>() {
               const T* dy = g.data<T>();
               const T* yv = y.data<T>();
               T* o = dx.data<T>();
               for (int64_t r = 0; r < rows; ++r) {
                 const bool clamped = norms[r] <= eps;
                 double dot = 0;
                 if (!clamped) {
                   for (int64_t c = 0; c < cols; ++c)
                     dot += static_cast<double>(yv[r * cols + c]) * dy[r * cols + c];
                 }
                 for (int64_t c = 0; c < cols; ++c) {
                   const int64_t i = r * cols + c;
                   o[i] = static_cast<T>((dy[i] - (clamped ? 0.0 : yv[i] * dot)) / norms[r]);
                 }
               }
             });
             return TensorList{dx};
           });
  return out;
}

}  // namespace ddpkit
