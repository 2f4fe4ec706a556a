// Matrix products through OpenBLAS (cuBLAS for GPU tensors: Gemm dispatches). Backward formulas
// call Gemm with transpose flags instead of materialising transposes, and skip the product for an
// input that needs no gradient (the data batch, usually).
#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/kernels.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {

using op_util::CheckMatrix;
using op_util::CheckSameDevice;

namespace {

// Every row of out <- bias.
void BroadcastBias(const Tensor& out, const Tensor& bias) {
  if constexpr (kWithCuda) {
    if (out.is_cuda()) return cuda::BroadcastRows(out, bias);
  }
  for (int64_t r = 0; r < out.size(0); ++r) out.Rows(r, r + 1).CopyFrom(bias);
}

// sums <- the column sums of g [rows, n], row by row.
void ColumnSums(const Tensor& g, const Tensor& sums) {
  if constexpr (kWithCuda) {
    if (g.is_cuda()) return cuda::ColumnSums(g, sums);
  }
  DispatchFloating(g.dtype(), "linear_backward", [&]<typename T>() {
    const int64_t rows = g.size(0), cols = g.size(1);
    const T* dy = g.data<T>();
    T* s = sums.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) s[j] += dy[r * cols + j];
    }
  });
}

}  // namespace

// ---------------------------------------------------------------------------- matmul
Tensor Matmul(const Tensor& a, const Tensor& b) {
  CheckMatrix("matmul", "left operand", a);
  CheckMatrix("matmul", "right operand", b);
  DDPKIT_CHECK(a.dtype() == b.dtype(), "[matmul] dtypes differ: ", DTypeName(a.dtype()), " and ",
               DTypeName(b.dtype()));
  CheckSameDevice("matmul", a, b);
  DDPKIT_CHECK(a.size(1) == b.size(0), "[matmul] inner dimensions differ: ", ShapeString(a.shape()),
               " x ", ShapeString(b.shape()));
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  // The GEMM outputs below are written in full (beta 0, or the bias broadcast first): no
  // zero fill, which would be a pass over every gradient's bytes per step.
  Tensor out = Tensor::Uninitialized({m, n}, a.dtype(), a.device());
  Gemm(false, false, m, n, k, 1.0, a, b, 0.0, out);
  // C = A B:  dA = dC B^T,  dB = A^T dC.
  RecordOp(out, "MatmulBackward", {&a, &b},
           [a = a.Detach(), b = b.Detach(), a_grad = a.requires_grad(), b_grad = b.requires_grad(),
            m, k, n](const Tensor& g) -> TensorList {
             Tensor da, db;
             if (a_grad) {
               da = Tensor::Uninitialized({m, k}, g.dtype(), g.device());
               Gemm(false, true, m, k, n, 1.0, g, b, 0.0, da);
             }
             if (b_grad) {
               db = Tensor::Uninitialized({k, n}, g.dtype(), g.device());
               Gemm(true, false, k, n, m, 1.0, a, g, 0.0, db);
             }
             return {da, db};
           });
  return out;
}

// ---------------------------------------------------------------------------- linear
Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  CheckMatrix("linear", "input", x);
  CheckMatrix("linear", "weight", weight);
  DDPKIT_CHECK(x.dtype() == weight.dtype(), "[linear] input is ", DTypeName(x.dtype()),
               ", weight is ", DTypeName(weight.dtype()));
  CheckSameDevice("linear", x, weight);
  DDPKIT_CHECK(x.size(1) == weight.size(1), "[linear] input has ", x.size(1),
               " features but weight ", ShapeString(weight.shape()), " expects ", weight.size(1));
  const int64_t rows = x.size(0), in = x.size(1), out_features = weight.size(0);
  if (bias.defined()) {
    DDPKIT_CHECK(bias.dtype() == x.dtype() && bias.shape() == Shape{out_features},
                 "[linear] bias must be ", DTypeName(x.dtype()), "[", out_features, "], got ",
                 DTypeName(bias.dtype()), ShapeString(bias.shape()));
    CheckSameDevice("linear", x, bias);
  }
  // y = x W^T + b: start from b in every row, then let gemm add x W^T (beta = 1).
  Tensor out = Tensor::Uninitialized({rows, out_features}, x.dtype(), x.device());
  double beta = 0.0;
  if (bias.defined() && rows > 0) {
    BroadcastBias(out, bias);
    beta = 1.0;
  }
  Gemm(false, true, rows, out_features, in, 1.0, x, weight, beta, out);

  // dx = dy W,  dW = dy^T x,  db = column sums of dy.
  RecordOp(out, "LinearBackward", {&x, &weight, &bias},
           [x = x.Detach(), w = weight.Detach(), x_grad = x.requires_grad(),
            w_grad = weight.requires_grad(), b_grad = bias.defined() && bias.requires_grad(), rows,
            in, out_features](const Tensor& g) -> TensorList {
             Tensor dx, dw, db;
             if (x_grad) {
               dx = Tensor::Uninitialized({rows, in}, g.dtype(), g.device());
               Gemm(false, false, rows, in, out_features, 1.0, g, w, 0.0, dx);
             }
             if (w_grad) {
               dw = Tensor::Uninitialized({out_features, in}, g.dtype(), g.device());
               Gemm(true, false, out_features, in, rows, 1.0, g, x, 0.0, dw);
             }
             if (b_grad) {
               db = Tensor::Empty({out_features}, g.dtype(), g.device());
               ColumnSums(g, db);
             }
             return {dx, dw, db};
           });
  return out;
}

}  // namespace ddpkit
