// ddpkit against PyTorch 1.13: golden files written by tools/scripts/golden/make_torch_golden.py.
#include "autograd/nn/nn.h"
#include "autograd/nn/optim.h"
#include "autograd/ops.h"
#include "tests/autograd/test_util.h"

namespace ddpkit {
namespace {

using testing_util::AllClose;
using testing_util::Get;
using testing_util::ReadGolden;
using testing_util::TestDataPath;

TEST(TorchGoldenTest, MlpForwardLossAndGradientsMatchPyTorch) {
  auto model = nn::MakeMlp({4, 8, 3}, /*seed=*/123);
  ASSERT_TRUE(LoadStateDict(*model, TestDataPath("torch_mlp_weights.safetensors")).ok());
  SafetensorsFile golden = ReadGolden("torch_mlp_case.safetensors");

  Tensor logits = model->Forward(Get(golden, "x"));
  EXPECT_TRUE(AllClose(logits, Get(golden, "logits")));
  Tensor loss = CrossEntropy(logits, Get(golden, "y"));
  EXPECT_TRUE(AllClose(loss, Get(golden, "loss")));
  loss.Backward();
  for (const auto& [name, param] : model->NamedParameters()) {
    EXPECT_TRUE(AllClose(param.grad(), Get(golden, "grad." + name))) << name;
  }
}

TEST(TorchGoldenTest, OpDefinitionsMatchPyTorch) {
  SafetensorsFile golden = ReadGolden("torch_ops.safetensors");
  const Tensor& x = Get(golden, "x");
  EXPECT_TRUE(AllClose(Gelu(x), Get(golden, "gelu"), 1e-12, 1e-14));
  EXPECT_TRUE(AllClose(Tanh(x), Get(golden, "tanh"), 1e-12, 1e-14));
  EXPECT_TRUE(AllClose(LogSoftmax(x), Get(golden, "log_softmax"), 1e-12, 1e-14));
  EXPECT_TRUE(AllClose(L2NormalizeRows(x), Get(golden, "normalize"), 1e-12, 1e-14));
  EXPECT_TRUE(AllClose(L2NormalizeRows(Get(golden, "small")), Get(golden, "normalize_small"), 1e-12,
                       1e-14));
  // Targets {1, 2, 3} + 1 in PyTorch, targets {1, 2, 3} with offset 1 here.
  Tensor targets = Tensor::FromVector<int64_t>({1, 2, 3}, {3});
  EXPECT_TRUE(AllClose(CrossEntropy(x, targets, {.target_offset = 1, .reduction = Reduction::kSum}),
                       Get(golden, "cross_entropy_offset"), 1e-12));
}

TEST(TorchGoldenTest, OptimizersMatchPyTorchOverThreeSteps) {
  SafetensorsFile golden = ReadGolden("torch_optim.safetensors");
  struct Config {
    std::string name;
    std::function<std::unique_ptr<Optimizer>(Tensor)> make;
  };
  std::vector<Config> configs = {
      {"sgd_momentum",
       [](Tensor p) {
         return std::make_unique<Sgd>(TensorList{p},
                                      SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
       }},
      {"sgd_dampening",
       [](Tensor p) {
         return std::make_unique<Sgd>(TensorList{p},
                                      SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
       }},
      {"sgd_nesterov",
       [](Tensor p) {
         return std::make_unique<Sgd>(TensorList{p},
                                      SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
       }},
      {"adam",
       [](Tensor p) {
         return std::make_unique<Adam>(TensorList{p},
                                       AdamOptions{.lr = 0.01, .weight_decay = 0.01});
       }},
  };
  for (const Config& config : configs) {
    Tensor p = Get(golden, "p0").Clone();
    p.set_requires_grad(true);
    auto optimizer = config.make(p);
    for (const char* g : {"g0", "g1", "g2"}) {
      p.set_grad(Get(golden, g).Clone());
      optimizer->Step();
    }
    EXPECT_TRUE(AllClose(p, Get(golden, config.name), 1e-12, 1e-14)) << config.name;
  }
}

TEST(TorchGoldenTest, HalfPrecisionRoundingMatchesPyTorch) {
  SafetensorsFile golden = ReadGolden("torch_dtypes.safetensors");
  const Tensor& src = Get(golden, "src");
  for (const char* name : {"f16", "bf16"}) {
    const Tensor& expected = Get(golden, name);
    Tensor ours = src.To(expected.dtype());
    for (int64_t i = 0; i < src.numel(); ++i) {
      EXPECT_EQ(static_cast<const uint16_t*>(ours.raw_data())[i],
                static_cast<const uint16_t*>(expected.raw_data())[i])
          << name << " element " << i << " (" << src.at(i) << ")";
    }
  }
  EXPECT_EQ(Get(golden, "i32").ToDoubles(), (std::vector<double>{-7, 0, 2147483647}));
  EXPECT_EQ(Get(golden, "i64").ToDoubles(), (std::vector<double>{-1099511627776.0, 3}));
  EXPECT_TRUE(AllClose(Get(golden, "f64"), src, 0, 0));
}

}  // namespace
}  // namespace ddpkit
