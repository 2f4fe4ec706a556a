// Matrix products through Gemm (autograd/gemm.h: oneDNN or OpenBLAS on the host, cuBLAS on a
// GPU). Backward formulas call Gemm with transpose flags instead of materialising transposes, and
// skip the product for an input that needs no gradient (the data batch, usually).
#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/gemm.h"
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
    T* __restrict s = sums.data<T>();  // not a view of g: the row loop vectorises
    for (int64_t r = 0; r < rows; ++r) {
      const T* __restrict dy = g.data<T>() + r * cols;
      for (int64_t j = 0; j < cols; ++j) s[j] += dy[j];
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
namespace {

void CheckLinear(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  CheckMatrix(op, "input", x);
  CheckMatrix(op, "weight", weight);
  DDPKIT_CHECK(x.dtype() == weight.dtype(), "[", op, "] input is ", DTypeName(x.dtype()),
               ", weight is ", DTypeName(weight.dtype()));
  CheckSameDevice(op, x, weight);
  DDPKIT_CHECK(x.size(1) == weight.size(1), "[", op, "] input has ", x.size(1),
               " features but weight ", ShapeString(weight.shape()), " expects ", weight.size(1));
  if (bias.defined()) {
    DDPKIT_CHECK(bias.dtype() == x.dtype() && bias.shape() == Shape{weight.size(0)}, "[", op,
                 "] bias must be ", DTypeName(x.dtype()), "[", weight.size(0), "], got ",
                 DTypeName(bias.dtype()), ShapeString(bias.shape()));
    CheckSameDevice(op, x, bias);
  }
}

// y = x W^T + b, then max(0, y) when `relu`: one GEMM with the bias and activation applied in
// its epilogue (on a GPU: the bias broadcast first, then a GEMM with beta 1).
Tensor LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias, bool relu) {
  const int64_t rows = x.size(0), in = x.size(1), out_features = weight.size(0);
  Tensor out = Tensor::Uninitialized({rows, out_features}, x.dtype(), x.device());
  if (!out.is_cuda()) {
    GemmBiasAct(false, true, rows, out_features, in, x, weight, {.bias = bias, .relu = relu}, out);
    return out;
  }
  DDPKIT_CHECK(!relu, "[linear_relu] runs on the host; on a GPU use relu(linear(...))");
  double beta = 0.0;
  if (bias.defined() && rows > 0) {
    BroadcastBias(out, bias);
    beta = 1.0;
  }
  Gemm(false, true, rows, out_features, in, 1.0, x, weight, beta, out);
  return out;
}

// g <- g where y > 0, else 0 (ReLU's backward from its output), and sums <- its column sums:
// one pass over the gradient for both.
void ReluMaskAndColumnSums(const Tensor& g, const Tensor& y, const Tensor& sums) {
  DispatchFloating(g.dtype(), "linear_relu_backward", [&]<typename T>() {
    const int64_t rows = g.size(0), cols = g.size(1);
    T* s = sums.defined() ? sums.data<T>() : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      // Distinct rows of distinct tensors: __restrict lets the row loops vectorise.
      T* __restrict dy = g.data<T>() + r * cols;
      const T* __restrict out = y.data<T>() + r * cols;
      for (int64_t j = 0; j < cols; ++j) dy[j] = out[j] > T(0) ? dy[j] : T(0);
      if (s == nullptr) continue;
      T* __restrict sum = s;
      for (int64_t j = 0; j < cols; ++j) sum[j] += dy[j];
    }
  });
}

struct LinearSaved {
  Tensor x, w;
  bool x_grad, w_grad, b_grad, has_bias;
  bool dx_deferred;  // dx is computed by the LinearInputBackward node (LinearEdges)
  int64_t rows, in, out_features;
};

// dx = dy W.
Tensor LinearInputGrad(const Tensor& dy, const Tensor& w) {
  Tensor dx = Tensor::Uninitialized({dy.size(0), w.size(1)}, dy.dtype(), dy.device());
  Gemm(false, false, dy.size(0), w.size(1), w.size(0), 1.0, dy, w, 0.0, dx);
  return dx;
}

// dx = dy W,  dW = dy^T x  (db, the column sums of dy, is computed by the caller), in the order
// of LinearEdges: (db, dx, dW), or (dx, dW) without a bias. Where dx is deferred, dy itself goes
// down the x edge, to the node that multiplies it.
TensorList LinearBackward(const LinearSaved& s, const Tensor& dy, Tensor db) {
  Tensor dx, dw;
  if (s.dx_deferred) {
    dx = dy;
  } else if (s.x_grad) {
    dx = LinearInputGrad(dy, s.w);
  }
  if (s.w_grad) {
    dw = Tensor::Uninitialized({s.out_features, s.in}, dy.dtype(), dy.device());
    Gemm(true, false, s.out_features, s.in, s.rows, 1.0, dy, s.x, 0.0, dw);
  }
  if (!s.has_bias) return {dx, dw};
  return {db, dx, dw};
}

// PyTorch's linear on a 2-D input is addmm(bias, x, weight.t()) — mm(x, weight.t()) without a
// bias — so its backward node's edges are (bias, x, TBackward -> weight), and TBackward is made
// after x's producer and before addmm. ddpkit computes dW in the weight's shape directly (no
// transposed copy), but builds PyTorch's graph around it, with a TBackward that passes dW on:
// the engine's ready order, and so DDP's gradient-ready order and rebuilt buckets, come out of
// the graph's shape. The bias's accumulator is ready as soon as this node has run; TBackward,
// the most recent node left, runs next and readies the weight; then x's producer.
//
// Where x comes out of another op, dx = dy W runs in a node of its own on the x edge, made
// just before TBackward, so it runs just after it: the weight's gradient is ready — and DDP's
// bucket holding it can start its allreduce — before dx's product, not after (on the large
// MLP, one 2048x2048 product earlier). The parameters' ready order is unchanged: the node only
// sits between this op and x's producer. A leaf x keeps its edge, so its accumulator stays
// ready with the bias's, as in PyTorch.
bool DefersInputGrad(const Tensor& x) { return x.requires_grad() && x.grad_fn() != nullptr; }

Edge InputEdge(const Tensor& x, const Tensor& weight) {
  if (!DefersInputGrad(x)) return GradientEdge(x);
  return {.node = std::make_shared<FunctionNode>(
              "LinearInputBackward", std::vector<Edge>{GradientEdge(x)},
              [w = weight.Detach()](const Tensor& dy) -> TensorList {
                return {LinearInputGrad(dy, w)};
              })};
}

std::vector<Edge> LinearEdges(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Edge to_x = InputEdge(x, weight);
  Edge to_weight;
  if (weight.requires_grad()) {
    to_weight.node =
        std::make_shared<FunctionNode>("TBackward", std::vector<Edge>{GradientEdge(weight)},
                                       [](const Tensor& dw) -> TensorList { return {dw}; });
  }
  if (!bias.defined()) return {std::move(to_x), std::move(to_weight)};
  return {GradientEdge(bias), std::move(to_x), std::move(to_weight)};
}

LinearSaved Save(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return {.x = x.Detach(),
          .w = weight.Detach(),
          .x_grad = x.requires_grad(),
          .w_grad = weight.requires_grad(),
          .b_grad = bias.defined() && bias.requires_grad(),
          .has_bias = bias.defined(),
          .dx_deferred = DefersInputGrad(x),
          .rows = x.size(0),
          .in = x.size(1),
          .out_features = weight.size(0)};
}

}  // namespace

Tensor Linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  // PyTorch folds a contiguous 3-D input to 2-D with a view, runs addmm (mm without a bias) and
  // views the result back: the same graph here, a reshape node for each view.
  if (x.dim() == 3) {
    const int64_t batch = x.size(0), time = x.size(1);
    Tensor out = Linear(Reshape(x, {batch * time, x.size(2)}), weight, bias);
    return Reshape(out, {batch, time, out.size(1)});
  }
  CheckLinear("linear", x, weight, bias);
  Tensor out = LinearForward(x, weight, bias, /*relu=*/false);
  if (!ShouldRecord({&x, &weight, &bias})) return out;
  RecordOpWithEdges(out, bias.defined() ? "AddmmBackward" : "MmBackward",
                    LinearEdges(x, weight, bias),
                    [s = Save(x, weight, bias)](const Tensor& g) -> TensorList {
                      Tensor db;
                      if (s.b_grad) {
                        db = Tensor::Empty({s.out_features}, g.dtype(), g.device());
                        ColumnSums(g, db);
                      }
                      return LinearBackward(s, g, db);
                    });
  return out;
}

Tensor LinearRelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  CheckLinear("linear_relu", x, weight, bias);
  if (x.is_cuda()) return Relu(Linear(x, weight, bias));  // two kernels and two nodes there
  Tensor out = LinearForward(x, weight, bias, /*relu=*/true);
  // ReLU's backward reads the output (y > 0 exactly where the pre-activation was), so the
  // pre-activation is never kept.
  // PyTorch's relu(addmm(...)) is ReluBackward -> AddmmBackward: one node here, with addmm's
  // edges, so the ready order is the same.
  if (!ShouldRecord({&x, &weight, &bias})) return out;
  RecordOpWithEdges(out, "LinearReluBackward", LinearEdges(x, weight, bias),
                    [s = Save(x, weight, bias), y = out.Detach()](const Tensor& g) -> TensorList {
                      // Masked in place when no one else can see the gradient, else in a copy.
                      Tensor dy = g;
                      if (!IsSoleOwner(g)) {
                        dy = Tensor::Uninitialized(g.shape(), g.dtype(), g.device());
                        dy.CopyFrom(g);
                      }
                      Tensor db = s.b_grad ? Tensor::Empty({s.out_features}, g.dtype(), g.device())
                                           : Tensor();
                      ReluMaskAndColumnSums(dy, y, db);
                      return LinearBackward(s, dy, db);
                    });
  return out;
}

}  // namespace ddpkit
