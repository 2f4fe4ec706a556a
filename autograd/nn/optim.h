// Optimizers with PyTorch's update rules (torch.optim.SGD and Adam, non-fused, as in 1.13).
// Parameters whose .grad is undefined are skipped, as in PyTorch. Steps run under no-grad and
// update the parameters in place.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "autograd/tensor.h"

namespace ddpkit {

class Optimizer {
 public:
  explicit Optimizer(TensorList parameters);
  virtual ~Optimizer() = default;
  virtual void Step() = 0;
  // set_to_none: drop each .grad (PyTorch's default since 2.0, and what DDP's reducer expects
  // for an unused parameter); otherwise zero it in place, keeping its storage (a bucket view
  // stays a bucket view).
  void ZeroGrad(bool set_to_none = true);
  const TensorList& parameters() const { return parameters_; }
  // The learning rate the next Step uses (PyTorch's param_groups[0]["lr"]); a schedule sets it
  // before each step.
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;

  // The optimizer's state as (key, tensor) pairs, keyed "<parameter index>.<name>" like
  // PyTorch's state_dict()["state"] ("3.momentum_buffer", "0.exp_avg", "0.step"); only the
  // parameters that have state so far. The tensors are the live state: copy before changing.
  virtual std::vector<std::pair<std::string, Tensor>> StateTensors() const { return {}; }
  // Restores what StateTensors returned (copied in). InvalidArgument naming the key for an
  // unknown key or a wrong shape or dtype; nothing changes unless all of it fits.
  virtual absl::Status LoadStateTensors(const std::vector<std::pair<std::string, Tensor>>& state);

 protected:
  TensorList parameters_;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  Sgd(TensorList parameters, SgdOptions options);
  void Step() override;
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override { options_.lr = lr; }
  std::vector<std::pair<std::string, Tensor>> StateTensors() const override;
  absl::Status LoadStateTensors(const std::vector<std::pair<std::string, Tensor>>& state) override;

 private:
  SgdOptions options_;
  TensorList momentum_buffers_;  // per parameter; undefined until its first step
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class Adam : public Optimizer {
 public:
  Adam(TensorList parameters, AdamOptions options);
  void Step() override;
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override { options_.lr = lr; }
  std::vector<std::pair<std::string, Tensor>> StateTensors() const override;
  absl::Status LoadStateTensors(const std::vector<std::pair<std::string, Tensor>>& state) override;

 private:
  AdamOptions options_;
  TensorList exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;
};

}  // namespace ddpkit
