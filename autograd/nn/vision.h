// ddpkit::nn's image layers, as torch.nn's: Conv2d, BatchNorm2d (running statistics as buffers),
// MaxPool2d, AdaptiveAvgPool2d and Flatten. Names and initialisation are PyTorch's defaults:
// Conv2d's weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform_ with a = sqrt(5)),
// BatchNorm2d's weight 1 and bias 0, running_mean 0, running_var 1, num_batches_tracked 0.
#pragma once

#include <cstdint>
#include <memory>

#include "autograd/nn/nn.h"
#include "autograd/ops.h"

namespace ddpkit::nn {

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
         const Conv2dOptions& options, bool bias, Generator& generator,
         DType dtype = DType::kFloat32);
  Tensor Forward(const Tensor& input) override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  std::string Describe() const override;
  Conv2dOptions options_;
  Tensor weight_, bias_;
};

// Parameters weight, bias; buffers running_mean, running_var, num_batches_tracked (int64, []),
// in torch.nn.BatchNorm2d's order. In training mode a forward normalises with the batch's
// statistics, moves the running ones toward them (momentum 0.1) and counts the batch; in
// evaluation mode it uses the running ones.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, DType dtype = DType::kFloat32);
  Tensor Forward(const Tensor& input) override;
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_tracked_; }
  // SyncBatchNorm (comm/ops/sync_batch_norm.h): from now on a training forward takes its statistics
  // over every rank's batch through `sync`, and backward sums their gradients likewise; null
  // makes it a plain BatchNorm2d again. Parameters, buffers and names stay as they are.
  void SetSync(std::shared_ptr<BatchNormSync> sync) { sync_ = std::move(sync); }
  bool synced() const { return sync_ != nullptr; }

 private:
  std::string Describe() const override;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
  std::shared_ptr<BatchNormSync> sync_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const Pool2dOptions& options) : options_(options) {}
  Tensor Forward(const Tensor& input) override { return ddpkit::MaxPool2d(input, options_); }

 private:
  std::string Describe() const override;
  Pool2dOptions options_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h_(out_h), out_w_(out_w) {}
  Tensor Forward(const Tensor& input) override {
    return ddpkit::AdaptiveAvgPool2d(input, out_h_, out_w_);
  }

 private:
  std::string Describe() const override;
  int64_t out_h_, out_w_;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim_(start_dim) {}
  Tensor Forward(const Tensor& input) override { return ddpkit::Flatten(input, start_dim_); }

 private:
  std::string Describe() const override;
  int64_t start_dim_;
};

}  // namespace ddpkit::nn
