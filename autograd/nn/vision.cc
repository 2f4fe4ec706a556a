#include "autograd/nn/vision.h"

#include <tuple>

namespace ddpkit::nn {

// ---------------------------------------------------------------------------- Conv2d
Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
               const Conv2dOptions& options, bool bias, Generator& generator, DType dtype)
    : options_(options) {
  DDPKIT_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0,
               "[Conv2d] channels and kernel size must be positive, got in=", in_channels,
               " out=", out_channels, " kernel=", kernel_size);
  std::tie(weight_, bias_) = RegisterDefaultWeightAndBias(
      {out_channels, in_channels, kernel_size, kernel_size}, bias, generator, dtype);
}

Tensor Conv2d::Forward(const Tensor& input) {
  return ddpkit::Conv2d(input, weight_, bias_, options_);
}

std::string Conv2d::Describe() const {
  const int64_t k = weight_.size(2), s = options_.stride, p = options_.padding;
  return StrCat("Conv2d(", weight_.size(1), ", ", weight_.size(0), ", kernel_size=(", k, ", ", k,
                "), stride=(", s, ", ", s, "), padding=(", p, ", ", p,
                "), bias=", bias_.defined() ? "True" : "False", ")");
}

// ---------------------------------------------------------------------------- BatchNorm2d
BatchNorm2d::BatchNorm2d(int64_t num_features, DType dtype) {
  DDPKIT_CHECK(num_features > 0, "[BatchNorm2d] num_features must be positive, got ", num_features);
  weight_ = RegisterParameter("weight", Tensor::Full({num_features}, 1.0, dtype));
  bias_ = RegisterParameter("bias", Tensor::Zeros({num_features}, dtype));
  running_mean_ = RegisterBuffer("running_mean", Tensor::Zeros({num_features}, dtype));
  running_var_ = RegisterBuffer("running_var", Tensor::Full({num_features}, 1.0, dtype));
  num_batches_tracked_ = RegisterBuffer("num_batches_tracked", Tensor::Zeros({}, DType::kInt64));
}

Tensor BatchNorm2d::Forward(const Tensor& input) {
  if (is_training()) {
    // The count lives with the module (wherever To() moved it); it is bumped on the host.
    Tensor count = num_batches_tracked_.To(Device::Cpu());
    count.data<int64_t>()[0] += 1;
    num_batches_tracked_.CopyFrom(count);
  }
  return BatchNorm(input, weight_, bias_, running_mean_, running_var_,
                   {.training = is_training(), .sync = sync_});
}

std::string BatchNorm2d::Describe() const {
  return StrCat(synced() ? "SyncBatchNorm(" : "BatchNorm2d(", weight_.size(0),
                ", eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
}

// ---------------------------------------------------------------------------- pools, Flatten
std::string MaxPool2d::Describe() const {
  return StrCat("MaxPool2d(kernel_size=", options_.kernel,
                ", stride=", options_.stride > 0 ? options_.stride : options_.kernel,
                ", padding=", options_.padding, ", dilation=1, ceil_mode=False)");
}

std::string AdaptiveAvgPool2d::Describe() const {
  return StrCat("AdaptiveAvgPool2d(output_size=(", out_h_, ", ", out_w_, "))");
}

std::string Flatten::Describe() const {
  return StrCat("Flatten(start_dim=", start_dim_, ", end_dim=-1)");
}

}  // namespace ddpkit::nn
