// Elementwise ops, each forward followed by its backward. The pointwise math lives in
// autograd/pointwise.h, shared with the CUDA kernels (MapOn / ZipOn pick the device).
#include <algorithm>

#include "autograd/cuda/ops.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/op_util.h"
#include "autograd/ops/vec_math.h"
#include "autograd/parallel.h"
#include "autograd/pointwise.h"

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

// ---------------------------------------------------------------------------- add trailing
namespace {

// out <- x + y repeated over x's leading blocks of y.numel() elements (sum = false), or
// out <- the sum of x's blocks (sum = true; out holds y's shape).
template <typename T>
void BlockLoop(const Tensor& x, const Tensor& y, const Tensor& out, bool sum) {
  const int64_t block = sum ? out.numel() : y.numel(), blocks = x.numel() / block;
  const T* in = x.data<T>();
  T* o = out.data<T>();
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t j = 0; j < block; ++j) {
      if (sum) {
        o[j] += in[b * block + j];
      } else {
        o[b * block + j] = in[b * block + j] + y.data<T>()[j];
      }
    }
  }
}

// BlockLoop on x's device.
void AddOrSumBlocks(const Tensor& x, const Tensor& y, const Tensor& out, bool sum) {
  if constexpr (kWithCuda) {
    if (x.is_cuda()) return sum ? cuda::SumBlocks(x, out) : cuda::AddTrailing(x, y, out);
  }
  DispatchFloating(x.dtype(), "add_trailing", [&]<typename T>() { BlockLoop<T>(x, y, out, sum); });
}

}  // namespace

Tensor AddTrailing(const Tensor& x, const Tensor& y) {
  CheckFloating("add_trailing", x);
  CheckFloating("add_trailing", y);
  op_util::CheckSameDevice("add_trailing", x, y);

  const bool trailing = y.dim() <= x.dim() && y.numel() > 0 &&
                        std::equal(y.shape().begin(), y.shape().end(), x.shape().end() - y.dim());
  DDPKIT_CHECK(x.dtype() == y.dtype() && trailing, "[add_trailing] ", DTypeName(y.dtype()),
               ShapeString(y.shape()), " is not the trailing shape of ", DTypeName(x.dtype()),
               ShapeString(x.shape()));
  Tensor out = Tensor::Uninitialized(x.shape(), x.dtype(), x.device());
  AddOrSumBlocks(x, y, out, /*sum=*/false);
  // Edges (x, y), as PyTorch's AddBackward for tok_emb + pos_emb; y's gradient is summed over
  // the blocks it was repeated in.
  RecordOp(out, "AddBackward", {&x, &y}, [y_shape = y.shape()](const Tensor& g) -> TensorList {
    Tensor dy = Tensor::Zeros(y_shape, g.dtype(), g.device());
    AddOrSumBlocks(g, Tensor(), dy, /*sum=*/true);
    return {g, dy};
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
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;

// Host float32 GELU in vectorised loops (vec_math.h): erff was a fifth of a GPT step.
DDPKIT_VECTOR_CLONES void GeluRange(const float* __restrict x, float* __restrict y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + vec::Erf(x[i] * kSqrtHalf));
}
DDPKIT_VECTOR_CLONES void GeluBackwardRange(const float* __restrict dy, const float* __restrict x,
                                            float* __restrict dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.0f + vec::Erf(x[i] * kSqrtHalf));
    dx[i] = dy[i] * (cdf + x[i] * vec::Exp(-0.5f * x[i] * x[i]) * kInvSqrt2Pi);
  }
}

bool HostFloat(const Tensor& t) { return !t.is_cuda() && t.dtype() == DType::kFloat32; }

}  // namespace

Tensor Gelu(const Tensor& x) {
  CheckFloating("gelu", x);
  Tensor out;
  if (HostFloat(x)) {
    out = Tensor::Uninitialized(x.shape(), x.dtype(), x.device());
    const float* in = x.data<float>();
    float* y = out.data<float>();
    ParallelFor(x.numel(), [&](int64_t b, int64_t e) { GeluRange(in + b, y + b, e - b); });
  } else {
    out = MapOn("gelu", x, pointwise::GeluFn{});
  }
  RecordOp(out, "GeluBackward", {&x}, [x = x.Detach()](const Tensor& g) -> TensorList {
    if (!HostFloat(g) || !HostFloat(x) || g.numel() != x.numel())
      return {ZipOn("gelu_backward", g, x, pointwise::GeluBackwardFn{})};
    Tensor dx = Tensor::Uninitialized(x.shape(), x.dtype(), x.device());
    const float *dy = g.data<float>(), *in = x.data<float>();
    float* out = dx.data<float>();
    ParallelFor(x.numel(),
                [&](int64_t b, int64_t e) { GeluBackwardRange(dy + b, in + b, out + b, e - b); });
    return {dx};
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
