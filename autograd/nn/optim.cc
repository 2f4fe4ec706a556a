#include "autograd/nn/optim.h"

#include <charconv>
#include <cmath>
#include <initializer_list>
#include <string_view>

#include "autograd/adam_update.h"
#include "autograd/cuda/ops.h"
#include "autograd/grad_mode.h"
#include "autograd/kernels.h"

namespace ddpkit {
namespace {

using StateList = std::vector<std::pair<std::string, Tensor>>;

struct StateKey {
  size_t index;
  std::string name;
};

// "3.momentum_buffer" -> {3, "momentum_buffer"}, checked against the optimizer's parameters
// and the names it keeps.
absl::StatusOr<StateKey> ParseStateKey(std::string_view optimizer, std::string_view key,
                                       size_t parameters,
                                       std::initializer_list<std::string_view> names) {
  const size_t dot = key.find('.');
  size_t index = 0;
  const char* end = key.data() + (dot == std::string_view::npos ? key.size() : dot);
  const auto [ptr, ec] = std::from_chars(key.data(), end, index);
  if (dot == std::string_view::npos || ec != std::errc() || ptr != end || index >= parameters) {
    return absl::InvalidArgumentError(StrCat("[", optimizer, "] state key '", key,
                                             "' is not <parameter index>.<name> for one of its ",
                                             parameters, " parameters"));
  }
  const std::string_view name = key.substr(dot + 1);
  for (std::string_view known : names) {
    if (name == known) return StateKey{index, std::string(name)};
  }
  return absl::InvalidArgumentError(
      StrCat("[", optimizer, "] state key '", key, "': unknown state '", name, "'"));
}

// The state tensor must be shaped and typed like its parameter.
absl::Status CheckLike(std::string_view optimizer, std::string_view key, const Tensor& state,
                       const Shape& shape, DType dtype) {
  if (state.shape() == shape && state.dtype() == dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("[", optimizer, "] state '", key, "' is ", DTypeName(state.dtype()), " ",
             ShapeString(state.shape()), ", expected ", DTypeName(dtype), " ", ShapeString(shape)));
}

}  // namespace

Optimizer::Optimizer(TensorList parameters) : parameters_(std::move(parameters)) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    DDPKIT_CHECK(parameters_[i].is_leaf() && parameters_[i].requires_grad(),
                 "[Optimizer] parameter ", i, " is not a leaf that requires grad");
  }
}

absl::Status Optimizer::LoadStateTensors(const StateList& state) {
  if (state.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("[Optimizer] this optimizer keeps no state, but got '", state.front().first, "'"));
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

StateList Sgd::StateTensors() const {
  StateList state;
  for (size_t i = 0; i < momentum_buffers_.size(); ++i) {
    if (momentum_buffers_[i].defined()) {
      state.emplace_back(StrCat(i, ".momentum_buffer"), momentum_buffers_[i]);
    }
  }
  return state;
}

absl::Status Sgd::LoadStateTensors(const StateList& state) {
  TensorList buffers(parameters_.size());
  for (const auto& [key, tensor] : state) {
    absl::StatusOr<StateKey> k = ParseStateKey("SGD", key, parameters_.size(), {"momentum_buffer"});
    if (!k.ok()) return k.status();
    const Tensor& p = parameters_[k->index];
    if (absl::Status s = CheckLike("SGD", key, tensor, p.shape(), p.dtype()); !s.ok()) return s;
    buffers[k->index] = tensor.To(p.device());  // a copy, where the parameter lives
  }
  momentum_buffers_ = std::move(buffers);
  return absl::OkStatus();
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
      exp_avg_[i] = Tensor::Zeros(p.shape(), p.dtype(), p.device());
      exp_avg_sq_[i] = Tensor::Zeros(p.shape(), p.dtype(), p.device());
    }
    const int64_t step = ++steps_[i];
    const AdamUpdate update{options_.beta1,
                            options_.beta2,
                            options_.eps,
                            options_.weight_decay,
                            options_.lr / (1.0 - std::pow(options_.beta1, step)),
                            std::sqrt(1.0 - std::pow(options_.beta2, step))};
    const Tensor& grad = p.grad();
    DDPKIT_CHECK(grad.device() == p.device(), "[Adam] parameter ", i, " is on ",
                 p.device().ToString(), " but its gradient is on ", grad.device().ToString());
    if constexpr (kWithCuda) {
      if (p.is_cuda()) {
        cuda::AdamStep(p, grad, exp_avg_[i], exp_avg_sq_[i], update);
        continue;
      }
    }
    DispatchFloating(p.dtype(), "Adam", [&]<typename T>() {
      T* w = p.data<T>();
      const T* g = grad.data<T>();
      T* m = exp_avg_[i].data<T>();
      T* v = exp_avg_sq_[i].data<T>();
      for (int64_t j = 0, n = p.numel(); j < n; ++j) update(w[j], g[j], m[j], v[j]);
    });
  }
}

}  // namespace ddpkit

namespace ddpkit {

StateList Adam::StateTensors() const {
  StateList state;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    state.emplace_back(StrCat(i, ".exp_avg"), exp_avg_[i]);
    state.emplace_back(StrCat(i, ".exp_avg_sq"), exp_avg_sq_[i]);
    state.emplace_back(StrCat(i, ".step"),
                       Tensor::Scalar(static_cast<double>(steps_[i]), DType::kInt64));
  }
  return state;
}

// A parameter's state is all three tensors or none.
absl::Status Adam::LoadStateTensors(const StateList& state) {
  const size_t n = parameters_.size();
  TensorList avg(n), avg_sq(n);
  std::vector<int64_t> steps(n, 0);
  std::vector<int> parts(n, 0);
  for (const auto& [key, tensor] : state) {
    absl::StatusOr<StateKey> k = ParseStateKey("Adam", key, n, {"exp_avg", "exp_avg_sq", "step"});
    if (!k.ok()) return k.status();
    const Tensor& p = parameters_[k->index];
    const bool is_step = k->name == "step";
    absl::Status s = is_step ? CheckLike("Adam", key, tensor, {}, DType::kInt64)
                             : CheckLike("Adam", key, tensor, p.shape(), p.dtype());
    if (!s.ok()) return s;
    if (is_step) {
      steps[k->index] = static_cast<int64_t>(tensor.item());
    } else {
      (k->name == "exp_avg" ? avg : avg_sq)[k->index] = tensor.To(p.device());
    }
    ++parts[k->index];
  }
  for (size_t i = 0; i < n; ++i) {
    if (parts[i] != 0 && (parts[i] != 3 || !avg[i].defined() || !avg_sq[i].defined())) {
      return absl::InvalidArgumentError(
          StrCat("[Adam] parameter ", i, " needs exp_avg, exp_avg_sq and step together"));
    }
  }
  exp_avg_ = std::move(avg);
  exp_avg_sq_ = std::move(avg_sq);
  steps_ = std::move(steps);
  return absl::OkStatus();
}

}  // namespace ddpkit
