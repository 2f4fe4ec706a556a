#include "autograd/nn/models/resnet.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/checkpoint.h"

namespace ddpkit::nn {
namespace {

constexpr absl::string_view kForm =
    "resnet:B1,B2,B3,B4[,width=W][,in=C][,classes=K][,stem=imagenet|small], e.g. resnet:2,2,2,2";
// Generous bounds that keep every shape and count far inside int64 before the parameter check.
constexpr int64_t kMaxBlocks = 256, kMaxWidth = 4096, kMaxInChannels = 4096,
                  kMaxClasses = int64_t{1} << 24;

absl::Status SpecError(absl::string_view spec, absl::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("model spec '", spec, "': ", what, "; expected ", kForm));
}

absl::StatusOr<int64_t> ParseBounded(absl::string_view spec, absl::string_view what,
                                     absl::string_view text, int64_t max) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value <= 0 || value > max) {
    return SpecError(spec, StrCat(what, " '", text, "' is not an integer in [1, ", max, "]"));
  }
  return value;
}

// "KEY=VALUE" -> the option it sets in `parsed`; `seen` keeps each key to once.
absl::Status ParseResNetOption(absl::string_view spec, absl::string_view part, ResNetSpec& parsed,
                               std::vector<std::string>& seen) {
  const size_t eq = part.find('=');
  const absl::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
  if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
    return SpecError(spec, StrCat("option ", key, " is given twice"));
  }
  seen.emplace_back(key);
  if (key == "stem") {
    if (value != "imagenet" && value != "small") {
      return SpecError(spec, StrCat("stem takes imagenet or small, not '", value, "'"));
    }
    parsed.small_stem = value == "small";
    return absl::OkStatus();
  }
  int64_t* target = key == "width"     ? &parsed.width
                    : key == "in"      ? &parsed.in_channels
                    : key == "classes" ? &parsed.classes
                                       : nullptr;
  if (target == nullptr) {
    return SpecError(spec, StrCat("unknown option '", key,
                                  "'; the options are width=, in=, classes= and stem="));
  }
  const int64_t max = key == "width" ? kMaxWidth : key == "in" ? kMaxInChannels : kMaxClasses;
  DDPKIT_ASSIGN_OR_RETURN(*target, ParseBounded(spec, key, value, max));
  return absl::OkStatus();
}

}  // namespace

int64_t NumParameters(const ResNetSpec& s) {
  const int64_t stem_kernel = s.small_stem ? 3 : 7;
  int64_t total = s.width * s.in_channels * stem_kernel * stem_kernel + 2 * s.width;
  int64_t in = s.width;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = s.width << stage;
    for (int64_t b = 0; b < s.blocks[stage]; ++b) {
      total += 9 * planes * (b == 0 ? in : planes) + 9 * planes * planes + 4 * planes;
      if (b == 0 && (stage > 0 || in != planes)) total += in * planes + 2 * planes;
    }
    in = planes;
  }
  return total + in * s.classes + s.classes;
}

int64_t NumParameterTensors(const ResNetSpec& s) {
  int64_t tensors = 3 + (s.classes > 0 ? 2 : 0);  // conv1, bn1's weight and bias; fc's
  int64_t in = s.width;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = s.width << stage;
    for (int64_t b = 0; b < s.blocks[stage]; ++b) {
      tensors += 6;                                             // two convolutions, two BatchNorms
      if (b == 0 && (stage > 0 || in != planes)) tensors += 3;  // downsample: conv, BatchNorm
    }
    in = planes;
  }
  return tensors;
}

absl::StatusOr<ResNetSpec> ParseResNetSpec(std::string_view std_spec) {
  const absl::string_view spec(std_spec.data(), std_spec.size());
  constexpr absl::string_view kPrefix = "resnet:";
  if (!absl::StartsWith(spec, kPrefix)) return SpecError(spec, "it does not start with resnet:");
  ResNetSpec parsed;
  std::vector<std::string> seen;
  size_t stages = 0;
  for (absl::string_view part : absl::StrSplit(spec.substr(kPrefix.size()), ',')) {
    if (absl::StrContains(part, '=')) {
      DDPKIT_RETURN_IF_ERROR(ParseResNetOption(spec, part, parsed, seen));
      continue;
    }
    if (!seen.empty()) return SpecError(spec, StrCat("block count '", part, "' after an option"));
    if (stages == 4) return SpecError(spec, "more than four block counts");
    DDPKIT_ASSIGN_OR_RETURN(parsed.blocks[stages],
                            ParseBounded(spec, "block count", part, kMaxBlocks));
    ++stages;
  }
  if (stages != 4) return SpecError(spec, StrCat(stages, " block counts instead of four"));
  if (const int64_t n = NumParameters(parsed); n > kMaxMlpParameters) {
    return SpecError(spec, StrCat(n, " parameters, more than ", kMaxMlpParameters));
  }
  return parsed;
}

std::string SpecString(const ResNetSpec& spec) {
  const ResNetSpec defaults;
  std::string out = StrCat("resnet:", absl::StrJoin(spec.blocks, ","));
  if (spec.width != defaults.width) absl::StrAppend(&out, ",width=", spec.width);
  if (spec.in_channels != defaults.in_channels) absl::StrAppend(&out, ",in=", spec.in_channels);
  if (spec.classes != defaults.classes) absl::StrAppend(&out, ",classes=", spec.classes);
  if (spec.small_stem) absl::StrAppend(&out, ",stem=small");
  return out;
}

// ---------------------------------------------------------------------------- BasicBlock
BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator& generator,
                       DType dtype) {
  conv1_ = RegisterModule(
      "conv1", std::make_shared<Conv2d>(in_planes, planes, 3, Conv2dOptions{stride, 1}, false,
                                        generator, dtype));
  bn1_ = RegisterModule("bn1", std::make_shared<BatchNorm2d>(planes, dtype));
  conv2_ = RegisterModule("conv2", std::make_shared<Conv2d>(planes, planes, 3, Conv2dOptions{1, 1},
                                                            false, generator, dtype));
  bn2_ = RegisterModule("bn2", std::make_shared<BatchNorm2d>(planes, dtype));
  if (stride == 1 && in_planes == planes) return;
  downsample_ = RegisterModule("downsample", std::make_shared<Sequential>());
  downsample_->Append(std::make_shared<Conv2d>(in_planes, planes, 1, Conv2dOptions{stride, 0},
                                               false, generator, dtype));
  downsample_->Append(std::make_shared<BatchNorm2d>(planes, dtype));
}

Tensor BasicBlock::Forward(const Tensor& input) {
  Tensor out = Relu(bn1_->Forward(conv1_->Forward(input)));
  out = bn2_->Forward(conv2_->Forward(out));
  // After bn2, as torchvision's forward: the graph's node order, and with it the order in which
  // gradients become ready, is PyTorch's.
  const Tensor identity = downsample_ ? downsample_->Forward(input) : input;
  return Relu(Add(out, identity));
}

// ---------------------------------------------------------------------------- ResNet
ResNet::ResNet(const ResNetSpec& spec, Generator& generator, DType dtype) : spec_(spec) {
  const Conv2dOptions stem = spec.small_stem ? Conv2dOptions{1, 1} : Conv2dOptions{2, 3};
  conv1_ = RegisterModule(
      "conv1", std::make_shared<Conv2d>(spec.in_channels, spec.width, spec.small_stem ? 3 : 7, stem,
                                        false, generator, dtype));
  bn1_ = RegisterModule("bn1", std::make_shared<BatchNorm2d>(spec.width, dtype));
  if (!spec.small_stem) {
    maxpool_ = RegisterModule("maxpool", std::make_shared<MaxPool2d>(Pool2dOptions{3, 2, 1}));
  }
  int64_t in_planes = spec.width;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = spec.width << stage;
    auto layer = std::make_shared<Sequential>();
    for (int64_t b = 0; b < spec.blocks[stage]; ++b) {
      const int64_t stride = b == 0 && stage > 0 ? 2 : 1;
      layer->Append(std::make_shared<BasicBlock>(in_planes, planes, stride, generator, dtype));
      in_planes = planes;
    }
    layers_[stage] = RegisterModule(StrCat("layer", stage + 1), layer);
  }
  avgpool_ = RegisterModule("avgpool", std::make_shared<AdaptiveAvgPool2d>(1, 1));
  if (spec.classes == 0) return;
  fc_ = RegisterModule("fc",
                       std::make_shared<Linear>(in_planes, spec.classes, true, generator, dtype));
}

Tensor ResNet::Forward(const Tensor& input) {
  DDPKIT_CHECK(input.dim() == 4 && input.size(1) == spec_.in_channels, "[ResNet] ",
               SpecString(spec_), " takes [N, ", spec_.in_channels, ", H, W], got ",
               ShapeString(input.shape()));
  Tensor x = Relu(bn1_->Forward(conv1_->Forward(input)));
  if (maxpool_) x = maxpool_->Forward(x);
  for (const auto& layer : layers_) {
    x = checkpoint_stages_ ? Checkpoint([layer](const Tensor& in) { return layer->Forward(in); }, x)
                           : layer->Forward(x);
  }
  const Tensor pooled = ddpkit::Flatten(avgpool_->Forward(x));
  return fc_ ? fc_->Forward(pooled) : pooled;
}

std::shared_ptr<ResNet> MakeResNet(const ResNetSpec& spec, uint64_t seed, DType dtype) {
  Generator generator(seed);
  auto model = std::make_shared<ResNet>(spec, generator, dtype);
  // torchvision's ResNet.__init__ re-initialises every conv: kaiming_normal_(mode="fan_out",
  // nonlinearity="relu"). The convs are exactly the 4-D weights.
  for (const auto& [name, param] : model->NamedParameters()) {
    if (param.dim() != 4) continue;
    const double fan_out = static_cast<double>(param.size(0) * param.size(2) * param.size(3));
    generator.FillNormal(param, 0.0, std::sqrt(2.0 / fan_out));
  }
  return model;
}

}  // namespace ddpkit::nn
