// Elementwise ops, each forward followed by its backward.
#include <cmath>
#include <numbers>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"

namespace ddpkit {

using op_util::CheckBinary;
using op_util::CheckFloating;
using op_util::Map;
using op_util::SumToShapeOf;
using op_util::Zip;

// ---------------------------------------------------------------------------- add, sub, mul
Tensor Add(const Tensor& a, const Tensor& b) {
  CheckBinary("add", a, b);
  Tensor out = DispatchFloating(
      a.dtype(), "add", [&]<typename T>() { return Zip<T>(a, b, [](T x, T y) { return x + y; }); });
  RecordOp(out, "AddBackward", {&a, &b}, [a, b](const Tensor& g) -> TensorList {
    return {SumToShapeOf(g, a), SumToShapeOf(g, b)};
  });
  return out;
}

Tensor Sub(const Tensor& a, const Tensor& b) {
  CheckBinary("sub", a, b);
  Tensor out = DispatchFloating(
      a.dtype(), "sub", [&]<typename T>() { return Zip<T>(a, b, [](T x, T y) { return x - y; }); });
  RecordOp(out, "SubBackward", {&a, &b}, [a, b](const Tensor& g) -> TensorList {
    return {SumToShapeOf(g, a), SumToShapeOf(MulScalar(g, -1.0), b)};
  });
  return out;
}

Tensor Mul(const Tensor& a, const Tensor& b) {
  CheckBinary("mul", a, b);
  Tensor out = DispatchFloating(
      a.dtype(), "mul", [&]<typename T>() { return Zip<T>(a, b, [](T x, T y) { return x * y; }); });
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
  Tensor out = DispatchFloating(a.dtype(), "mul_scalar", [&]<typename T>() {
    const T f = static_cast<T>(factor);
    return Map<T>(a, [f](T x) { return x * f; });
  });
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
  Tensor out = DispatchFloating(x.dtype(), "relu", [&]<typename T>() {
    return Map<T>(x, [](T v) { return v > T(0) ? v : T(0); });
  });
  // The gradient passes where the input was positive.
  RecordOp(out, "ReluBackward", {&x}, [x = x.Detach()](const Tensor& g) -> TensorList {
    return {DispatchFloating(g.dtype(), "relu_backward", [&]<typename T>() {
      return Zip<T>(g, x, [](T dy, T v) { return v > T(0) ? dy : T(0); });
    })};
  });
  return out;
}

// ---------------------------------------------------------------------------- tanh
Tensor Tanh(const Tensor& x) {
  CheckFloating("tanh", x);
  Tensor out = DispatchFloating(
      x.dtype(), "tanh", [&]<typename T>() { return Map<T>(x, [](T v) { return std::tanh(v); }); });
  // d tanh(x) = 1 - tanh(x)^2, from the saved output.
  RecordOp(out, "TanhBackward", {&x}, [y = out.Detach()](const Tensor& g) -> TensorList {
    return {DispatchFloating(g.dtype(), "tanh_backward", [&]<typename T>() {
      return Zip<T>(g, y, [](T dy, T t) { return dy * (T(1) - t * t); });
    })};
  });
  return out;
}

// ---------------------------------------------------------------------------- gelu
Tensor Gelu(const Tensor& x) {
  CheckFloating("gelu", x);
  Tensor out = DispatchFloating(x.dtype(), "gelu", [&]<typename T>() {
    return Map<T>(
        x, [](T v) { return T(0.5) * v * (T(1) + std::erf(v * T(std::numbers::sqrt2 / 2))); });
  });
  // d/dx [x Phi(x)] = Phi(x) + x phi(x).
  RecordOp(out, "GeluBackward", {&x}, [x = x.Detach()](const Tensor& g) -> TensorList {
    return {DispatchFloating(g.dtype(), "gelu_backward", [&]<typename T>() {
      return Zip<T>(g, x, [](T dy, T v) {
        const T cdf = T(0.5) * (T(1) + std::erf(v * T(std::numbers::sqrt2 / 2)));
        const T pdf = std::exp(T(-0.5) * v * v) * T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
        return dy * (cdf + v * pdf);
      });
    })};
  });
  return out;
}

// ---------------------------------------------------------------------------- exp, log
Tensor Exp(const Tensor& x) {
  CheckFloating("exp", x);
  Tensor out = DispatchFloating(
      x.dtype(), "exp", [&]<typename T>() { return Map<T>(x, [](T v) { return std::exp(v); }); });
  RecordOp(out, "ExpBackward", {&x},
           [y = out.Detach()](const Tensor& g) -> TensorList { return {Mul(g, y)}; });
  return out;
}

Tensor Log(const Tensor& x) {
  CheckFloating("log", x);
  Tensor out = DispatchFloating(
      x.dtype(), "log", [&]<typename T>() { return Map<T>(x, [](T v) { return std::log(v); }); });
  RecordOp(out, "LogBackward", {&x}, [x = x.Detach()](const Tensor& g) -> TensorList {
    return {DispatchFloating(g.dtype(), "log_backward", [&]<typename T>() {
      return Zip<T>(g, x, [](T dy, T v) { return dy / v; });
    })};
  });
  return out;
}

}  // namespace ddpkit
