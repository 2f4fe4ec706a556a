// torchvision 0.14's ResNet with BasicBlock (ResNet-18/34's block), parameter and buffer names
// and order exactly torchvision's, so state dicts move between ddpkit and PyTorch unchanged:
//   conv1.weight, bn1.{weight,bias}, layer1.0.conv1.weight, layer1.0.bn1.*, ..., layer2.0.
//   downsample.0.weight, layer2.0.downsample.1.*, ..., fc.weight, fc.bias
// (buffers: bn1.running_mean, bn1.running_var, bn1.num_batches_tracked, ...).
//
// Spec: "resnet:B1,B2,B3,B4[,width=W][,in=C][,classes=K][,stem=imagenet|small]" — Bi
// BasicBlocks in stage i; W layer1's channels (torchvision: 64), doubled per stage; C input
// channels (3); K classes (1000); stem=imagenet is torchvision's 7×7 stride-2 conv and 3×3
// stride-2 max pool, stem=small the CIFAR one (a 3×3 stride-1 conv, no max pool; torchvision's
// names, with conv1's weight 3×3). resnet:2,2,2,2 is ResNet-18, resnet:3,4,6,3 ResNet-34.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "autograd/nn/vision.h"

namespace ddpkit::nn {

struct ResNetSpec {
  std::array<int64_t, 4> blocks = {2, 2, 2, 2};
  int64_t width = 64;
  int64_t in_channels = 3;
  // 0: no fc, the forward returns the pooled features [N, 8·width] (torchvision's
  // `model.fc = nn.Identity()`, as feature extractors and CLIP-style towers use it); not a spec
  // option, set in code.
  int64_t classes = 1000;
  bool small_stem = false;
};

// InvalidArgument, saying what is wrong and what is expected, for anything but the form above
// (four positive block counts, each option at most once, at most kMaxMlpParameters parameters).
absl::StatusOr<ResNetSpec> ParseResNetSpec(std::string_view spec);
// The spec spelled back, options only where they differ from the defaults.
std::string SpecString(const ResNetSpec& spec);
// Every weight and bias the spec describes (BatchNorm's buffers aside): elements, and tensors.
int64_t NumParameters(const ResNetSpec& spec);
int64_t NumParameterTensors(const ResNetSpec& spec);

// torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + identity), the identity
// downsampled (a 1×1 strided conv and a BatchNorm2d) where the shape changes.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator& generator, DType dtype);
  Tensor Forward(const Tensor& input) override;

 private:
  std::string Describe() const override { return "BasicBlock"; }
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> downsample_;  // null when the identity fits
};

class ResNet : public Module {
 public:
  ResNet(const ResNetSpec& spec, Generator& generator, DType dtype);
  // input float32 [N, in_channels, H, W] -> logits [N, classes] (pooled features without fc).
  Tensor Forward(const Tensor& input) override;
  const ResNetSpec& spec() const { return spec_; }
  // Each stage (layer1..layer4) under reentrant activation checkpointing (autograd/checkpoint.h):
  // the same gradients, but in training mode every BatchNorm of a stage moves its running
  // statistics twice per step (the forward and the recompute), as under torch.utils.checkpoint.
  void set_checkpoint_stages(bool on) { checkpoint_stages_ = on; }

 private:
  std::string Describe() const override { return "ResNet"; }
  ResNetSpec spec_;
  bool checkpoint_stages_ = false;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<MaxPool2d> maxpool_;  // null with the small stem
  std::array<std::shared_ptr<Sequential>, 4> layers_;
  std::shared_ptr<AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<Linear> fc_;  // null when spec.classes is 0
};

// A ResNet initialised as torchvision's: every conv weight kaiming_normal_ (fan_out, ReLU gain,
// i.e. N(0, 2 / (out_channels * kH * kW))), BatchNorm weight 1 and bias 0, fc as nn.Linear's
// default; drawn from `seed`.
std::shared_ptr<ResNet> MakeResNet(const ResNetSpec& spec, uint64_t seed,
                                   DType dtype = DType::kFloat32);

}  // namespace ddpkit::nn
