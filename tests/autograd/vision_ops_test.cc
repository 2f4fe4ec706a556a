// The vision ops (conv2d, batch_norm, max_pool2d, adaptive_avg_pool2d, flatten): gradients
// against central finite differences in float64, values and gradients against PyTorch 1.13
// (tests/testdata/torch_vision_ops.safetensors from tools/scripts/golden/make_vision_golden.py),
// and the backward nodes' edges in PyTorch's order.
#include <functional>
#include <string>

#include "autograd/accumulate_grad.h"
#include "autograd/grad_mode.h"
#include "autograd/nn/vision.h"
#include "autograd/ops.h"
#include "autograd/random.h"
#include "tests/autograd/test_util.h"

namespace ddpkit {
namespace {

using testing_util::AllClose;
using testing_util::Get;
using testing_util::ReadGolden;

using OpFn = std::function<Tensor(const TensorList&)>;

Tensor Random64(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::Empty(shape, DType::kFloat64);
  gen.FillUniform(t, -1.0, 1.0);
  return t;
}

// dL/dx_i of L = sum(f(x) * R) by backward, against (L(x + h e_j) - L(x - h e_j)) / 2h.
void ExpectFiniteDifferences(const OpFn& f, const std::vector<Shape>& shapes) {
  Generator gen(42);
  TensorList inputs;
  for (const Shape& shape : shapes) inputs.push_back(Random64(shape, gen).set_requires_grad(true));
  Tensor out = f(inputs);
  const Tensor weights = Random64(out.shape(), gen);
  Sum(Mul(out, weights)).Backward();
  auto objective = [&] {
    NoGradGuard no_grad;
    return Sum(Mul(f(inputs), weights)).item();
  };
  constexpr double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(inputs[i].grad().defined()) << "input " << i << " got no gradient";
    double* values = inputs[i].data<double>();
    for (int64_t j = 0; j < inputs[i].numel(); ++j) {
      const double saved = values[j];
      values[j] = saved + h;
      const double plus = objective();
      values[j] = saved - h;
      const double minus = objective();
      values[j] = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(inputs[i].grad().at(j), numeric, 1e-6 * std::max(1.0, std::fabs(numeric)))
          << "input " << i << ", element " << j;
    }
  }
}

TEST(VisionGradCheckTest, Conv2d) {
  ExpectFiniteDifferences(
      [](const TensorList& in) {
        return Conv2d(in[0], in[1], in[2], {1, 1});
      },
      {{2, 3, 5, 4}, {4, 3, 3, 3}, {4}});
  ExpectFiniteDifferences(
      [](const TensorList& in) {
        return Conv2d(in[0], in[1], {}, {2, 0});
      },
      {{1, 2, 7, 6}, {3, 2, 3, 3}});
  ExpectFiniteDifferences([](const TensorList& in) { return Conv2d(in[0], in[1], in[2]); },
                          {{2, 3, 3, 3}, {2, 3, 1, 1}, {2}});  // pointwise: no im2col
  ExpectFiniteDifferences(
      [](const TensorList& in) {
        return Conv2d(in[0], in[1], {}, {2, 0});
      },
      {{2, 3, 5, 5}, {2, 3, 1, 1}});
}

TEST(VisionGradCheckTest, BatchNorm) {
  const Tensor mean = Tensor::FromVector<double>({0.1, -0.2, 0.3}, {3});
  const Tensor var = Tensor::FromVector<double>({0.9, 1.1, 0.7}, {3});
  for (bool training : {true, false}) {
    ExpectFiniteDifferences(
        [&](const TensorList& in) {
          return BatchNorm(in[0], in[1], in[2], mean.Clone(), var.Clone(), {.training = training});
        },
        {{3, 3, 2, 2}, {3}, {3}});
  }
  ExpectFiniteDifferences([](const TensorList& in) { return BatchNorm(in[0], {}, {}, {}, {}); },
                          {{5, 3}});  // [N, C], no affine, no running stats
}

TEST(VisionGradCheckTest, Pools) {
  ExpectFiniteDifferences(
      [](const TensorList& in) {
        return MaxPool2d(in[0], {3, 2, 1});
      },
      {{2, 2, 5, 5}});
  ExpectFiniteDifferences([](const TensorList& in) { return MaxPool2d(in[0], {.kernel = 2}); },
                          {{1, 2, 4, 5}});
  ExpectFiniteDifferences([](const TensorList& in) { return AdaptiveAvgPool2d(in[0]); },
                          {{2, 3, 3, 2}});
  ExpectFiniteDifferences([](const TensorList& in) { return AdaptiveAvgPool2d(in[0], 3, 2); },
                          {{1, 2, 7, 5}});
  ExpectFiniteDifferences([](const TensorList& in) { return Flatten(in[0]); }, {{2, 3, 2, 2}});
}

// Runs `f` on the golden's inputs name.in0.., backpropagates sum(out * name.r) and compares the
// output and each input's gradient with PyTorch's.
void ExpectMatchesGolden(const SafetensorsFile& golden, const std::string& name, const OpFn& f) {
  TensorList inputs;
  for (int i = 0; golden.Find(name + ".in" + std::to_string(i)) != nullptr; ++i) {
    inputs.push_back(Get(golden, name + ".in" + std::to_string(i)).Clone().set_requires_grad(true));
  }
  Tensor out = f(inputs);
  EXPECT_TRUE(AllClose(out, Get(golden, name + ".out"), 1e-4, 1e-5)) << name;
  Sum(Mul(out, Get(golden, name + ".r"))).Backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_TRUE(
        AllClose(inputs[i].grad(), Get(golden, name + ".grad" + std::to_string(i)), 1e-4, 1e-5))
        << name << " input " << i;
  }
}

TEST(VisionTorchGoldenTest, Conv2dMatchesPyTorch) {
  SafetensorsFile golden = ReadGolden("torch_vision_ops.safetensors");
  const std::map<std::string, Conv2dOptions> cases = {{"conv_a", {1, 1}},
                                                      {"conv_b", {2, 0}},
                                                      {"conv_c", {1, 0}},
                                                      {"conv_d", {2, 3}},
                                                      {"conv_e", {2, 0}}};
  for (const auto& [name, options] : cases) {
    ExpectMatchesGolden(golden, name, [&](const TensorList& in) {
      return Conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), options);
    });
  }
}

TEST(VisionTorchGoldenTest, BatchNormAndRunningStatsMatchPyTorch) {
  SafetensorsFile golden = ReadGolden("torch_vision_ops.safetensors");
  for (const std::string name : {"bn_a", "bn_b"}) {
    for (const std::string mode : {"train", "eval"}) {
      const Tensor mean = Get(golden, name + ".running_mean0").Clone();
      const Tensor var = Get(golden, name + ".running_var0").Clone();
      ExpectMatchesGolden(golden, name + "." + mode, [&](const TensorList& in) {
        return BatchNorm(in[0], in[1], in[2], mean, var, {.training = mode == "train"});
      });
      EXPECT_TRUE(AllClose(mean, Get(golden, name + "." + mode + ".running_mean"), 1e-5, 1e-6));
      EXPECT_TRUE(AllClose(var, Get(golden, name + "." + mode + ".running_var"), 1e-5, 1e-6));
    }
  }
}

TEST(VisionTorchGoldenTest, PoolsAndFlattenMatchPyTorch) {
  SafetensorsFile golden = ReadGolden("torch_vision_ops.safetensors");
  const std::map<std::string, Pool2dOptions> max_cases = {
      {"maxpool_a", {3, 2, 1}}, {"maxpool_b", {2, 2, 0}}, {"maxpool_c", {3, 1, 1}}};
  for (const auto& [name, options] : max_cases) {
    ExpectMatchesGolden(golden, name,
                        [&](const TensorList& in) { return MaxPool2d(in[0], options); });
  }
  ExpectMatchesGolden(golden, "avgpool_a",
                      [](const TensorList& in) { return AdaptiveAvgPool2d(in[0]); });
  ExpectMatchesGolden(golden, "avgpool_b",
                      [](const TensorList& in) { return AdaptiveAvgPool2d(in[0], 3, 2); });
  ExpectMatchesGolden(golden, "flatten", [](const TensorList& in) { return Flatten(in[0]); });
}

// The backward node's edges in PyTorch's order (input, weight, bias): the engine readies the
// gradients, and DDP fills its buckets, in that order.
TEST(VisionOpsTest, BackwardEdgesFollowPyTorchsInputOrder) {
  Tensor x = Tensor::Full({2, 2, 3, 3}, 0.5).set_requires_grad(true);
  Tensor w = Tensor::Full({2, 2, 1, 1}, 0.1).set_requires_grad(true);
  Tensor b = Tensor::Zeros({2}).set_requires_grad(true);
  Tensor gamma = Tensor::Full({2}, 1.0).set_requires_grad(true);
  const Tensor conv = Conv2d(x, w, b), bn = BatchNorm(x, gamma, b, {}, {});
  EXPECT_EQ(conv.grad_fn()->name(), "ConvolutionBackward");
  EXPECT_EQ(bn.grad_fn()->name(), "NativeBatchNormBackward");
  for (const Tensor& out : {conv, bn}) {
    const std::vector<Edge>& edges = out.grad_fn()->next_edges();
    ASSERT_EQ(edges.size(), 3u);
    EXPECT_EQ(edges[0].node, x.grad_accumulator());
    EXPECT_EQ(edges[2].node, b.grad_accumulator());
  }
  EXPECT_EQ(bn.grad_fn()->next_edges()[1].node, gamma.grad_accumulator());
  EXPECT_EQ(conv.grad_fn()->next_edges()[1].node, w.grad_accumulator());
  EXPECT_FALSE(Conv2d(x, w, {}).grad_fn()->next_edges()[2].valid());  // no bias: empty edge
}

TEST(VisionOpsTest, ErrorsNameTheOpAndTheShapes) {
  const Tensor x = Tensor::Zeros({1, 3, 4, 4});
  EXPECT_THROW(Conv2d(x, Tensor::Zeros({2, 2, 3, 3}), {}), Error);
  EXPECT_THROW(Conv2d(x, Tensor::Zeros({2, 3, 7, 7}), {}), Error);
  EXPECT_THROW(BatchNorm(Tensor::Zeros({1, 3}), {}, {}, {}, {}), Error);   // one value per channel
  EXPECT_THROW(BatchNorm(x, {}, {}, {}, {}, {.training = false}), Error);  // no running stats
  EXPECT_THROW(MaxPool2d(x, {3, 1, 2}), Error);  // padding over half the kernel
  EXPECT_THROW(AdaptiveAvgPool2d(Tensor::Zeros({3, 4})), Error);
}

TEST(VisionModulesTest, BatchNorm2dCountsBatchesAndUsesRunningStatsInEval) {
  nn::BatchNorm2d bn(2);
  std::vector<std::string> names;
  for (const auto& [name, t] : bn.NamedBuffers()) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn.num_batches_tracked().dtype(), DType::kInt64);
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2, 1});
  bn(x);
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked().item(), 2);
  // Channel 0 holds 1, 2, 5, 6: mean 3.5, unbiased variance 17/3; twice with momentum 0.1.
  EXPECT_NEAR(bn.running_mean().at(0), 3.5 * (1 - 0.81), 1e-6);
  EXPECT_NEAR(bn.running_var().at(0), 0.81 + 17.0 / 3 * (1 - 0.81), 1e-5);
  bn.Eval();
  EXPECT_FALSE(bn.is_training());
  Tensor y = bn(x);
  EXPECT_EQ(bn.num_batches_tracked().item(), 2);
  EXPECT_NEAR(y.at(0), (1 - bn.running_mean().at(0)) / std::sqrt(bn.running_var().at(0) + 1e-5),
              1e-5);
}

TEST(VisionModulesTest, Conv2dHasPyTorchsNamesAndBound) {
  Generator gen(1);
  nn::Conv2d conv(3, 4, 3, {2, 1}, true, gen);
  EXPECT_EQ(conv.NamedParameters()[0].first, "weight");
  EXPECT_EQ(conv.NamedParameters()[1].first, "bias");
  for (double v : conv.weight().ToDoubles()) EXPECT_LE(std::fabs(v), 1.0 / std::sqrt(27.0));
  EXPECT_EQ(conv(Tensor::Zeros({1, 3, 8, 8})).shape(), (Shape{1, 4, 4, 4}));
  EXPECT_EQ(conv.DebugString(),
            "Conv2d(3, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=True)");
}

}  // namespace
}  // namespace ddpkit
