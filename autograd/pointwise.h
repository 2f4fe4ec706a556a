// The pointwise math of the elementwise ops, forward and backward, as functors that the host
// loops (op_util::Map / Zip) and the CUDA kernels (autograd/cuda/elementwise.cu) share. Each
// takes float or double and computes in that type.
#pragma once

#include <cmath>
#include <numbers>

#include "autograd/host_device.h"

namespace ddpkit::pointwise {

// --- Binary: f(a, b) ---------------------------------------------------------------------
struct AddFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T x, T y) const {
    return x + y;
  }
};
struct SubFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T x, T y) const {
    return x - y;
  }
};
struct MulFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T x, T y) const {
    return x * y;
  }
};

// --- Unary forward: f(x) -----------------------------------------------------------------
struct ScaleFn {
  double factor;
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T x) const {
    return x * static_cast<T>(factor);
  }
};
struct ReluFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T v) const {
    return v > T(0) ? v : T(0);
  }
};
struct TanhFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T v) const {
    return std::tanh(v);
  }
};
// Exact GELU, x * Phi(x), as PyTorch's default.
struct GeluFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T v) const {
    return T(0.5) * v * (T(1) + std::erf(v * T(std::numbers::sqrt2 / 2)));
  }
};
struct ExpFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T v) const {
    return std::exp(v);
  }
};
struct LogFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T v) const {
    return std::log(v);
  }
};

// --- Backward: f(dy, saved), saved being the input x or the output y ----------------------
// The gradient passes where the input was positive.
struct ReluBackwardFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T dy, T x) const {
    return x > T(0) ? dy : T(0);
  }
};
// d tanh(x) = 1 - tanh(x)^2, from the saved output.
struct TanhBackwardFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T dy, T y) const {
    return dy * (T(1) - y * y);
  }
};
// d/dx [x Phi(x)] = Phi(x) + x phi(x).
struct GeluBackwardFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T dy, T x) const {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
    const T pdf = std::exp(T(-0.5) * x * x) * T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
    return dy * (cdf + x * pdf);
  }
};
struct LogBackwardFn {
  template <typename T>
  DDPKIT_HOST_DEVICE T operator()(T dy, T x) const {
    return dy / x;
  }
};

}  // namespace ddpkit::pointwise
