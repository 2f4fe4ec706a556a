// One element's Adam update (torch.optim.Adam, non-fused, as in 1.13), shared by the host loop
// in optim.cc and the kernel in autograd/cuda/optim.cu.
#pragma once

#include <cmath>

#include "autograd/host_device.h"

namespace ddpkit {

struct AdamUpdate {
  double beta1, beta2, eps, weight_decay;
  double step_size;              // lr / (1 - beta1^step)
  double sqrt_bias_correction2;  // sqrt(1 - beta2^step)

  // w: the parameter, g: its gradient, m / v: the first and second moment estimates.
  template <typename T>
  DDPKIT_HOST_DEVICE void operator()(T& w, T g, T& m, T& v) const {
    const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
    const T grad = g + static_cast<T>(weight_decay) * w;
    m = b1 * m + (T(1) - b1) * grad;
    v = b2 * v + (T(1) - b2) * grad * grad;
    const T denom = std::sqrt(v) / static_cast<T>(sqrt_bias_correction2) + static_cast<T>(eps);
    w -= static_cast<T>(step_size) * m / denom;
  }
};

}  // namespace ddpkit
