// nn::ResNet against torchvision 0.14: parameter and buffer names and shapes (ResNet-18 and the
// golden specs, tests/testdata/torchvision_resnet_names.json), and with a torchvision state dict
// loaded, the logits, loss, every parameter's gradient and the buffers after one training forward
// (tools/scripts/golden/make_vision_golden.py).
#include "autograd/nn/models/resnet.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "autograd/ops.h"
#include "autograd/random.h"
#include "nlohmann/json.hpp"
#include "tests/autograd/test_util.h"
#include "tests/state_dict_compare.h"

namespace ddpkit {
namespace {

using testing_util::AllClose;
using testing_util::Get;
using testing_util::ReadGolden;
using testing_util::TestDataPath;

nn::ResNetSpec Parse(const std::string& spec) {
  absl::StatusOr<nn::ResNetSpec> parsed = nn::ParseResNetSpec(spec);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : nn::ResNetSpec{};
}

TEST(ResNetSpecTest, ParsesBlocksAndOptions) {
  const nn::ResNetSpec s = Parse("resnet:1,2,3,4,width=16,in=1,classes=10,stem=small");
  EXPECT_EQ(s.blocks, (std::array<int64_t, 4>{1, 2, 3, 4}));
  EXPECT_EQ(s.width, 16);
  EXPECT_EQ(s.in_channels, 1);
  EXPECT_EQ(s.classes, 10);
  EXPECT_TRUE(s.small_stem);
  EXPECT_EQ(nn::SpecString(s), "resnet:1,2,3,4,width=16,in=1,classes=10,stem=small");
  EXPECT_EQ(nn::SpecString(Parse("resnet:2,2,2,2")), "resnet:2,2,2,2");
  EXPECT_FALSE(Parse("resnet:2,2,2,2,stem=imagenet").small_stem);
}

TEST(ResNetSpecTest, RejectsMalformedSpecsSayingWhy) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mlp:1,2", "does not start with resnet:"},
      {"resnet:2,2,2", "3 block counts instead of four"},
      {"resnet:2,2,2,2,2", "more than four block counts"},
      {"resnet:2,0,2,2", "block count '0' is not an integer"},
      {"resnet:2,2,2,2,depth=3", "unknown option 'depth'"},
      {"resnet:2,2,2,2,width=8,width=4", "option width is given twice"},
      {"resnet:2,2,2,2,stem=cifar", "stem takes imagenet or small"},
      {"resnet:2,2,width=4,2,2", "block count '2' after an option"},
      {"resnet:256,256,256,256,width=4096", "parameters, more than"},
  };
  for (const auto& [spec, message] : cases) {
    absl::StatusOr<nn::ResNetSpec> parsed = nn::ParseResNetSpec(spec);
    ASSERT_FALSE(parsed.ok()) << spec;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(message), std::string::npos)
        << spec << ": " << parsed.status().message();
  }
}

nlohmann::json Listing(const NamedTensors& tensors) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, t] : tensors) out.push_back({name, t.shape()});
  return out;
}

TEST(ResNetTest, NamesAndShapesAreTorchvisions) {
  std::ifstream file(TestDataPath("torchvision_resnet_names.json"));
  const nlohmann::json golden = nlohmann::json::parse(file);
  ASSERT_TRUE(golden.contains("resnet:2,2,2,2"));
  for (const auto& [spec, expected] : golden.items()) {
    auto model = nn::MakeResNet(Parse(spec), /*seed=*/1);
    EXPECT_EQ(Listing(model->NamedParameters()), expected["parameters"]) << spec;
    EXPECT_EQ(Listing(model->NamedBuffers()), expected["buffers"]) << spec;
  }
}

// PyTorch's state_dict() order, not named_parameters() then named_buffers(): module by module,
// each one's parameters then its buffers (bn1.weight, bn1.bias, bn1.running_mean, ...). A saved
// file's header is in that order, num_batches_tracked int64, for both stems.
TEST(ResNetTest, StateDictAndSavedFileAreInTorchvisionsStateDictOrder) {
  std::ifstream file(TestDataPath("torchvision_resnet_names.json"));
  const nlohmann::json golden = nlohmann::json::parse(file);
  const std::string path =
      testing::TempDir() + "/resnet_state_dict_" + std::to_string(::getpid()) + ".safetensors";
  for (const auto& [spec, expected] : golden.items()) {
    auto model = nn::MakeResNet(Parse(spec), /*seed=*/1);
    nlohmann::json names = nlohmann::json::array();
    for (const auto& [name, t] : model->StateDict()) names.push_back(name);
    EXPECT_EQ(names, expected["state_dict"]) << spec;
    if (spec == "resnet:2,2,2,2") continue;  // 47 MB: the names above suffice
    ASSERT_TRUE(SaveStateDict(*model, path).ok());
    nlohmann::json saved = nlohmann::json::array();
    for (const auto& [name, dtype] : testing_util::SafetensorsHeader(path)) {
      saved.push_back(name);
      EXPECT_EQ(dtype, name.ends_with(".num_batches_tracked") ? "I64" : "F32") << name;
    }
    EXPECT_EQ(saved, expected["state_dict"]) << spec;
  }
  std::remove(path.c_str());
}

TEST(ResNetTest, InitialisationIsTorchvisions) {
  auto model = nn::MakeResNet(Parse("resnet:1,1,1,1,width=8"), /*seed=*/3);
  for (const auto& [name, p] : model->NamedParameters()) {
    if (p.dim() != 4) continue;
    double sum_sq = 0;
    for (double v : p.ToDoubles()) sum_sq += v * v;
    const double fan_out = static_cast<double>(p.size(0) * p.size(2) * p.size(3));
    // kaiming_normal_ fan_out: variance 2 / fan_out (loosely: the sample is small).
    EXPECT_NEAR(sum_sq / p.numel() * fan_out / 2, 1.0, 0.35) << name;
  }
  for (const auto& [name, p] : model->NamedParameters()) {
    if (name.find("bn") == std::string::npos) continue;
    const double expected = name.ends_with(".weight") ? 1.0 : 0.0;
    for (double v : p.ToDoubles()) EXPECT_EQ(v, expected) << name;
  }
}

class ResNetGoldenTest : public testing::TestWithParam<std::string> {};

TEST_P(ResNetGoldenTest, LogitsLossGradientsAndRunningStatsMatchPyTorch) {
  SafetensorsFile golden = ReadGolden("torch_resnet_" + GetParam() + ".safetensors");
  auto model = nn::MakeResNet(Parse(golden.metadata.at("spec")), /*seed=*/9);
  const std::string weights = TestDataPath("torch_resnet_" + GetParam() + "_weights.safetensors");
  ASSERT_TRUE(LoadStateDict(*model, weights).ok());
  Tensor logits = model->Forward(Get(golden, "x"));
  EXPECT_TRUE(AllClose(logits, Get(golden, "logits"), 1e-4, 1e-5));
  Tensor loss = CrossEntropy(logits, Get(golden, "y"));
  EXPECT_TRUE(AllClose(loss, Get(golden, "loss"), 1e-5, 1e-6));
  loss.Backward();
  for (const auto& [name, param] : model->NamedParameters()) {
    EXPECT_TRUE(AllClose(param.grad(), Get(golden, "grad." + name), 1e-3, 1e-5)) << name;
  }
  for (const auto& [name, buffer] : model->NamedBuffers()) {
    EXPECT_TRUE(AllClose(buffer, Get(golden, "after." + name), 1e-5, 1e-6)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, ResNetGoldenTest, testing::Values("small", "imagenet"));

TEST(ResNetTest, EvalModeUsesRunningStatsAndLeavesThemAlone) {
  auto model = nn::MakeResNet(Parse("resnet:1,1,1,1,width=2,in=1,classes=3,stem=small"), 2);
  model->Eval();
  const Tensor x = Tensor::Full({2, 1, 8, 8}, 0.5);
  const Tensor first = model->Forward(x).Detach();
  EXPECT_TRUE(AllClose(model->Forward(x), first, 0, 0));
  for (const auto& [name, buffer] : model->NamedBuffers()) {
    if (name.ends_with("num_batches_tracked")) {
      EXPECT_EQ(buffer.item(), 0) << name;
    }
  }
}

// Each stage recomputed in backward: bitwise the same gradients, but every BatchNorm of a
// checkpointed stage moved its running statistics twice (forward, then the recompute), as
// under torch.utils.checkpoint; the stem's BatchNorm, outside the stages, once.
TEST(ResNetTest, CheckpointedStagesGiveTheSameGradientsAndCountTheirBatchesTwice) {
  const nn::ResNetSpec spec = Parse("resnet:1,1,1,1,width=4,in=1,classes=3,stem=small");
  Tensor x = Tensor::Empty({3, 1, 8, 8});
  Generator(4).FillNormal(x);
  const Tensor y = Tensor::FromVector<int64_t>({0, 2, 1}, {3});
  std::vector<std::vector<double>> grads[2];
  for (bool checkpoint : {false, true}) {
    auto model = nn::MakeResNet(spec, /*seed=*/3);
    model->set_checkpoint_stages(checkpoint);
    CrossEntropy(model->Forward(x), y).Backward();
    for (const Tensor& p : model->Parameters()) grads[checkpoint].push_back(p.grad().ToDoubles());
    for (const auto& [name, buffer] : model->NamedBuffers()) {
      if (!name.ends_with("num_batches_tracked")) continue;
      EXPECT_EQ(buffer.item(), checkpoint && name.starts_with("layer") ? 2 : 1) << name;
    }
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[0][i], grads[1][i]) << i;
}

}  // namespace
}  // namespace ddpkit
