// The transformer ops and nanoGPT's GPT against PyTorch 1.13: goldens written by
// tools/scripts/golden/make_gpt_golden.py (a re-statement of nanoGPT's model.py).
#include "autograd/nn/models/gpt.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "autograd/nn/safetensors.h"
#include "autograd/ops.h"
#include "nlohmann/json.hpp"
#include "tests/autograd/test_util.h"
#include "tests/state_dict_compare.h"

namespace ddpkit {
namespace {

using models::GptSpec;
using testing_util::AllClose;
using testing_util::Get;
using testing_util::ReadGolden;
using testing_util::TestDataPath;

// Leaves copied from the golden's `names` under `prefix`; then backward of sum(f(leaves) * r)
// and each gradient compared with the golden's d<name>.
void ExpectOpMatches(const SafetensorsFile& golden, const std::string& prefix,
                     const std::vector<std::string>& names,
                     const std::function<Tensor(const TensorList&)>& f) {
  TensorList leaves;
  for (const std::string& name : names) {
    leaves.push_back(Get(golden, prefix + "." + name).Clone().set_requires_grad(true));
  }
  Tensor y = f(leaves);
  EXPECT_TRUE(AllClose(y, Get(golden, prefix + ".y"), 1e-12, 1e-12)) << prefix;
  Sum(Mul(y, Get(golden, prefix + ".r"))).Backward();
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_TRUE(AllClose(leaves[i].grad(), Get(golden, prefix + ".d" + names[i]), 1e-10, 1e-12))
        << prefix << ": d" << names[i];
  }
}

TEST(GptOpsGoldenTest, LayerNormSoftmaxAndAttentionMatchPyTorch) {
  SafetensorsFile golden = ReadGolden("torch_gpt_ops.safetensors");
  ExpectOpMatches(golden, "ln", {"x", "w", "b"},
                  [](const TensorList& x) { return LayerNorm(x[0], x[1], x[2]); });
  ExpectOpMatches(golden, "ln_nobias", {"x", "w"},
                  [](const TensorList& x) { return LayerNorm(x[0], x[1], Tensor()); });
  ExpectOpMatches(golden, "softmax", {"x"}, [](const TensorList& x) { return Softmax(x[0]); });
  ExpectOpMatches(golden, "attn", {"qkv"},
                  [](const TensorList& x) { return CausalSelfAttention(x[0], 2); });
}

// The golden's model: gpt:layers=2,heads=2,dim=8,ctx=8,vocab=11 on B = 2, T = 6.
constexpr std::string_view kGoldenSpec = "gpt:layers=2,heads=2,dim=8,ctx=8,vocab=11";

std::shared_ptr<models::Gpt> GoldenGpt(DType dtype) {
  absl::StatusOr<GptSpec> spec = models::ParseGptSpec(kGoldenSpec);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto model = models::MakeGpt(*spec, /*seed=*/1, dtype);
  // The float64 weights, converted when the model is float32.
  absl::Status loaded = LoadStateDict(*model, TestDataPath("torch_gpt_weights.safetensors"));
  EXPECT_TRUE(loaded.ok()) << loaded;
  return model;
}

TEST(GptGoldenTest, NamesShapesAndOrderAreNanoGpts) {
  auto model = GoldenGpt(DType::kFloat64);
  SafetensorsFile weights = ReadGolden("torch_gpt_weights.safetensors");
  const NamedTensors params = model->NamedParameters();
  ASSERT_EQ(params.size(), weights.tensors.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].first, weights.tensors[i].first) << i;
    EXPECT_EQ(params[i].second.shape(), weights.tensors[i].second.shape()) << params[i].first;
  }
  EXPECT_EQ(params.front().first, "transformer.wte.weight");
  EXPECT_EQ(params[4].first, "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(params.back().first, "transformer.ln_f.bias");
}

// A saved GPT lists what nanoGPT's state_dict() lists, in its order: the tied table twice,
// as transformer.wte.weight first and lm_head.weight last (tests/testdata/
// nanogpt_state_dict_names.json, from make_gpt_golden.py names), and reloads.
TEST(GptGoldenTest, SavedStateDictIsNanoGptsInOrderWithTheTiedTableTwice) {
  std::ifstream file(TestDataPath("nanogpt_state_dict_names.json"));
  const nlohmann::json golden = nlohmann::json::parse(file);
  const std::string path =
      testing::TempDir() + "/gpt_state_dict_" + std::to_string(::getpid()) + ".safetensors";
  for (const auto& [spec, expected] : golden.items()) {
    auto model = models::MakeGpt(*models::ParseGptSpec(spec), /*seed=*/3);
    ASSERT_TRUE(SaveStateDict(*model, path).ok());
    nlohmann::json saved = nlohmann::json::array();
    const NamedTensors state = model->StateDict();
    const std::vector<std::pair<std::string, std::string>> header =
        testing_util::SafetensorsHeader(path);
    ASSERT_EQ(header.size(), state.size()) << spec;
    for (size_t i = 0; i < header.size(); ++i) {
      EXPECT_EQ(header[i].first, state[i].first) << spec;
      EXPECT_EQ(header[i].second, "F32") << header[i].first;
      saved.push_back({header[i].first, "torch.float32", state[i].second.shape()});
    }
    EXPECT_EQ(saved, expected) << spec;
    auto fresh = models::MakeGpt(*models::ParseGptSpec(spec), /*seed=*/4);
    ASSERT_TRUE(LoadStateDict(*fresh, path).ok());
    EXPECT_TRUE(AllClose(fresh->NamedParameters()[0].second, state[0].second, 0, 0));
  }
  std::remove(path.c_str());
}

TEST(GptGoldenTest, LogitsLossAndEveryGradientMatchPyTorch) {
  SafetensorsFile golden = ReadGolden("torch_gpt_case.safetensors");
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    const bool f64 = dtype == DType::kFloat64;
    const double rtol = f64 ? 1e-10 : 2e-4, atol = f64 ? 1e-12 : 2e-5;
    auto model = GoldenGpt(dtype);
    Tensor logits = model->Forward(Get(golden, "idx"));
    ASSERT_EQ(logits.shape(), (Shape{2, 6, 11}));
    EXPECT_TRUE(AllClose(logits, Get(golden, "logits"), rtol, atol)) << DTypeName(dtype);
    Tensor loss = models::GptLoss(logits, Get(golden, "targets"));
    EXPECT_TRUE(AllClose(loss, Get(golden, "loss"), rtol, atol)) << DTypeName(dtype);
    loss.Backward();
    for (const auto& [name, param] : model->NamedParameters()) {
      EXPECT_TRUE(AllClose(param.grad(), Get(golden, "grad." + name), rtol, atol))
          << name << " " << DTypeName(dtype);
    }
  }
}

// The order in which each parameter's accumulator runs (its index in NamedParameters), as
// DDP's hooks see it.
std::vector<double> ReadyOrder(const models::Gpt& model, const Tensor& idx, const Tensor& targets) {
  auto order = std::make_shared<std::vector<double>>();
  const TensorList params = model.Parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].grad_accumulator()->AddPostHook(
        [order, i](const Tensor&) { order->push_back(static_cast<double>(i)); });
  }
  models::GptLoss(const_cast<models::Gpt&>(model).Forward(idx), targets).Backward();
  return *order;
}

TEST(GptGoldenTest, GradientReadyOrderIsPyTorchDdps) {
  SafetensorsFile golden = ReadGolden("torch_gpt_case.safetensors");
  auto model = GoldenGpt(DType::kFloat64);
  EXPECT_EQ(ReadyOrder(*model, Get(golden, "idx"), Get(golden, "targets")),
            Get(golden, "ready_order").ToDoubles());
  // bias=0: LayerNorms and Linears without biases (mm's graph, one accumulator per node).
  auto nobias = models::MakeGpt(*models::ParseGptSpec(std::string(kGoldenSpec) + ",bias=0"),
                                /*seed=*/1, DType::kFloat64);
  EXPECT_EQ(ReadyOrder(*nobias, Get(golden, "idx"), Get(golden, "targets")),
            Get(golden, "nobias.ready_order").ToDoubles());
}

// Each block recomputed in backward (torch.utils.checkpoint per block): the same loss and, in
// float64 and float32, bitwise the same gradients — the recompute runs the same ops on the same
// inputs, and every accumulator (the tied wte's two uses included) sums in the same order.
TEST(GptCheckpointTest, RecomputedBlocksGiveBitwiseTheSameGradients) {
  SafetensorsFile golden = ReadGolden("torch_gpt_case.safetensors");
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    std::vector<std::vector<double>> grads[2];
    for (bool checkpoint : {false, true}) {
      auto model = GoldenGpt(dtype);
      model->set_checkpoint_blocks(checkpoint);
      models::GptLoss(model->Forward(Get(golden, "idx")), Get(golden, "targets")).Backward();
      for (const Tensor& p : model->Parameters()) grads[checkpoint].push_back(p.grad().ToDoubles());
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) {
      EXPECT_EQ(grads[0][i], grads[1][i]) << "parameter " << i << " " << DTypeName(dtype);
    }
  }
}

TEST(GptSpecTest, ParsesAndSpellsBack) {
  absl::StatusOr<GptSpec> spec =
      models::ParseGptSpec("gpt:layers=2,heads=2,dim=64,ctx=32,vocab=65");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->layers, 2);
  EXPECT_EQ(spec->dim, 64);
  EXPECT_TRUE(spec->bias);
  EXPECT_EQ(models::SpecString(*spec), "gpt:layers=2,heads=2,dim=64,ctx=32,vocab=65");
  spec = models::ParseGptSpec("gpt:vocab=5,ctx=4,dim=4,heads=1,layers=1,bias=0");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->bias);
  auto model = models::MakeGpt(*spec, 3);
  EXPECT_EQ(models::NumParameters(*spec), [&] {
    int64_t n = 0;
    for (const Tensor& p : model->Parameters()) n += p.numel();
    return n;
  }());
}

TEST(GptSpecTest, ErrorsSayWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mlp:2,3", "does not start with gpt:"},
      {"gpt:layers=2,heads=2,dim=8,ctx=8", "vocab= is missing"},
      {"gpt:layers=2,heads=3,dim=8,ctx=8,vocab=5", "heads=3 does not divide dim=8"},
      {"gpt:layers=2,heads=2,dim=8,ctx=8,vocab=5,depth=3", "unknown key 'depth'"},
      {"gpt:layers=2,layers=3,heads=2,dim=8,ctx=8,vocab=5", "layers is given twice"},
      {"gpt:layers=0,heads=2,dim=8,ctx=8,vocab=5", "layers must be an integer"},
      {"gpt:layers=2,heads=2,dim=8,ctx=8,vocab=5,bias=2", "bias takes 0 or 1"},
      {"gpt:layers=2,heads=2,dim=8,ctx=8,vocab", "'vocab' is not KEY=VALUE"},
      {"gpt:layers=4096,heads=1,dim=16384,ctx=8,vocab=5", "parameters, more than"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<GptSpec> spec = models::ParseGptSpec(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_NE(spec.status().message().find(message), std::string::npos)
        << text << ": " << spec.status().message();
  }
}

TEST(GptTest, InitIsNanoGptsAndLongSequencesAreRefused) {
  auto model = models::MakeGpt(*models::ParseGptSpec("gpt:layers=2,heads=2,dim=32,ctx=8,vocab=50"),
                               /*seed=*/5);
  for (const auto& [name, p] : model->NamedParameters()) {
    std::vector<double> v = p.ToDoubles();
    double sum = 0, sq = 0;
    for (double x : v) sum += x, sq += x * x;
    const double mean = sum / v.size(), std = std::sqrt(sq / v.size() - mean * mean);
    if (name.ends_with(".bias")) {
      EXPECT_EQ(sq, 0.0) << name;
    } else if (name.find(".ln_") != std::string::npos) {
      EXPECT_EQ(mean, 1.0) << name;
    } else {
      const double expected = name.ends_with("c_proj.weight") ? 0.01 : 0.02;  // 0.02/sqrt(2*2)
      EXPECT_NEAR(std, expected, 0.2 * expected) << name;
    }
  }
  Tensor too_long = Tensor::Zeros({1, 9}, DType::kInt64);
  try {
    model->Forward(too_long);
    ADD_FAILURE() << "a sequence longer than ctx was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context is only 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddpkit
