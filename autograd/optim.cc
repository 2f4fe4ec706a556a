#include "autograd/optim.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/kernels.h"

namespace ddpkit {

Optimizer::Optimizer(TensorList parameters) : parameters_(std::move(parameters)) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    DDPKIT_CHECK(parameters_[i].is_leaf() && parameters_[i].requires_grad(),
                 "[Optimizer] parameter ", i, " is not a leaf that requires grad");
  }
}

void Optimizer::ZeroGrad(bool set_to_none) {
  for (const Tensor& p : parameters_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      p.grad().Zero();
    }
  }
}

// ---------------------------------------------------------------------------- SGD
Sgd::Sgd(TensorList parameters, SgdOptions options)
    : Optimizer(std::move(parameters)), options_(options), momentum_buffers_(parameters_.size()) {
  DDPKIT_CHECK(options.lr >= 0, "[SGD] learning rate must be >= 0, got ", options.lr);
  DDPKIT_CHECK(options.momentum >= 0, "[SGD] momentum must be >= 0, got ", options.momentum);
  DDPKIT_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
               "[SGD] nesterov needs momentum > 0 and dampening 0");
}

void Sgd::Step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& p = parameters_[i];
    if (!p.grad().defined()) continue;
    // d = g + wd * p
    Tensor d = p.grad();
    if (options_.weight_decay != 0) {
      d = d.Clone();
      AddInPlace(d, p, options_.weight_decay);
    }
    if (options_.momentum != 0) {
      // buf = momentum * buf + (1 - dampening) * d; the first step starts buf at d.
      Tensor& buf = momentum_buffers_[i];
      if (!buf.defined()) {
        buf = d.Clone();
      } else {
        ScaleInPlace(buf, options_.momentum);
        AddInPlace(buf, d, 1.0 - options_.dampening);
      }
      if (options_.nesterov) {
        d = d.Clone();
        AddInPlace(d, buf, options_.momentum);
      } else {
        d = buf;
      }
    }
    AddInPlace(p, d, -options_.lr);
  }
}

// ---------------------------------------------------------------------------- Adam
Adam::Adam(TensorList parameters, AdamOptions options)
    : Optimizer(std::move(parameters)),
      options_(options),
      exp_avg_(parameters_.size()),
      exp_avg_sq_(parameters_.size()),
      steps_(parameters_.size(), 0) {
  DDPKIT_CHECK(options.lr >= 0, "[Adam] learning rate must be >= 0, got ", options.lr);
  DDPKIT_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
               "[Adam] betas must be in [0, 1), got ", options.beta1, ", ", options.beta2);
  DDPKIT_CHECK(options.eps >= 0, "[Adam] eps must be >= 0, got ", options.eps);
}

void Adam::Step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& p = parameters_[i];
    if (!p.grad().defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = Tensor::Zeros(p.shape(), p.dtype());
      exp_avg_sq_[i] = Tensor::Zeros(p.shape(), p.dtype());
    }
    const int64_t step = ++steps_[i];
    const double bias_correction1 = 1.0 - std::pow(options_.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(options_.beta2, step);
    const double step_size = options_.lr / bias_correction1;
    const double sqrt_bc2 = std::sqrt(bias_correction2);
    DispatchFloating(p.dtype(), "Adam", [&]<typename T>() {
      T* w = p.data<T>();
      const T* g = p.grad().data<T>();
      T* m = exp_avg_[i].data<T>();
      T* v = exp_avg_sq_[i].data<T>();
      const T b1 = static_cast<T>(options_.beta1), b2 = static_cast<T>(options_.beta2);
      for (int64_t j = 0, n = p.numel(); j < n; ++j) {
        const T grad = g[j] + static_cast<T>(options_.weight_decay) * w[j];
        m[j] = b1 * m[j] + (T(1) - b1) * grad;
        v[j] = b2 * v[j] + (T(1) - b2) * grad * grad;
        const T denom = std::sqrt(v[j]) / static_cast<T>(sqrt_bc2) + static_cast<T>(options_.eps);
        w[j] -= static_cast<T>(step_size) * m[j] / denom;
      }
    });
  }
}

}  // namespace ddpkit
