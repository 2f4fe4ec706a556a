// Elementwise ops, each forward followed by its backward. The pointwise math lives in
// autograd/ops/pointwise.h, shared with the CUDA kernels (MapOn / ZipOn pick the device).
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/ops/pointwise.h"

namespace ddpkit {

using op_util::CheckBinary;
using op_util::CheckFloating;
using op_util::MapOn;
using op_util::SumToShapeOf;
using op_util::ZipOn;

// ---------------------------------------------------------------------------- add, sub, mul
Tensor Add(const Tensor& a, const Tensor& b) {
  CheckBinary("add", a, b);
  Tensor out = ZipOn("add", a, b, pointwise::AddFn{});
  RecordOp(out, "AddBackward", {&a, &b}, [a, b](const Tensor& g) -> TensorList {
    return {SumToShapeOf(g, a), SumToShapeOf(g, b)};
  });
  return out;
}

Tensor Sub(const Tensor& a, const Tensor& b) {
  CheckBinary("sub", a, b);
  Tensor out = ZipOn("sub", a, b, pointwise::SubFn{});
  RecordOp(out, "SubBackward", {&a, &b}, [a, b](const Tensor& g) -> TensorList {
    return {SumToShapeOf(g, a), SumToShapeOf(MulScalar(g, -1.0), b)};
  });
  return out;
}

Tensor Mul(const Tensor& a, const Tensor& b) {
  CheckBinary("mul", a, b);
  Tensor out = ZipOn("mul", a, b, pointwise::MulFn{});
  // d(ab)/da = b, d(ab)/db = a.
  RecordOp(out, "MulBackward", {&a, &b},
           [a = a.Detach(), b = b.Detach(), a_grad = a.requires_grad(),
            b_grad = b.requires_grad()](const Tensor& g) -> TensorList {
             return {a_grad ? SumToShapeOf(Mul(g, b), a) : Tensor(),
                     b_grad ? SumToShapeOf(Mul(g, a), b) : Tensor()};
           });
  return out;
}

// ---------------------------------------------------------------------------- scalar mul, div
Tensor MulScalar(const Tensor& a, double factor) {
  CheckFloating("mul_scalar", a);
  Tensor out = MapOn("mul_scalar", a, pointwise::ScaleFn{factor});
  RecordOp(out, "MulScalarBackward", {&a},
           [factor](const Tensor& g) -> TensorList { return {MulScalar(g, factor)}; });
  return out;
}

Tensor DivScalar(const Tensor& a, double divisor) {
  DDPKIT_CHECK(divisor != 0.0, "[div_scalar] division by zero");
  return MulScalar(a, 1.0 / divisor);
}

// ---------------------------------------------------------------------------- relu
Tensor Relu(const Tensor& x) {
  CheckFloating("relu", x);
  Tensor out = MapOn("relu", x, pointwise::ReluFn{});
  RecordOp(out, "ReluBackward", {&x}, [x = x.Detach()](const Tensor& g) -> TensorList {
    return {ZipOn("relu_backward", g, x, pointwise::ReluBackwardFn{})};
  });
  return out;
}

// ---------------------------------------------------------------------------- tanh
Tensor Tanh(const Tensor& x) {
  CheckFloating("tanh", x);
  Tensor out = MapOn("tanh", x, pointwise::TanhFn{});
  RecordOp(out, "TanhBackward", {&x}, [y = out.Detach()](const Tensor& g) -> TensorList {
    return {ZipOn("tanh_backward", g, y, pointwise::TanhBackwardFn{})};
  });
  return out;
}

// ---------------------------------------------------------------------------- gelu
Tensor Gelu(const Tensor& x) {
  CheckFloating("gelu", x);
  Tensor out = MapOn("gelu", x, pointwise::GeluFn{});
  RecordOp(out, "GeluBackward", {&x}, [x = x.Detach()](const Tensor& g) -> TensorList {
    return {ZipOn("gelu_backward", g, x, pointwise::GeluBackwardFn{})};
  });
  return out;
}

// ---------------------------------------------------------------------------- exp, log
Tensor Exp(const Tensor& x) {
  CheckFloating("exp", x);
  Tensor out = MapOn("exp", x, pointwise::ExpFn{});
  RecordOp(out, "ExpBackward", {&x},
           [y = out.Detach()](const Tensor& g) -> TensorList { return {Mul(g, y)}; });
  return out;
}

Tensor Log(const Tensor& x) {
  CheckFloating("log", x);
  Tensor out = MapOn("log", x, pointwise::LogFn{});
  RecordOp(out, "LogBackward", {&x}, [x = x.Detach()](const Tensor& g) -> TensorList {
    return {ZipOn("log_backward", g, x, pointwise::LogBackwardFn{})};
  });
  return out;
}

}  // namespace ddpkit
