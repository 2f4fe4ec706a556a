// Every differentiable op on cuda:0 against the same op on the host: forward values, and each
// input's gradient through the engine (Backward of sum(out * r) for a random r), in float32 and
// float64. Skips, saying why, where no GPU is usable.
#include <functional>
#include <string>
#include <vector>

#include "autograd/nn/models/zoo.h"
#include "autograd/nn/optim.h"
#include "autograd/ops.h"
#include "tests/autograd/cuda_test_util.h"

namespace ddpkit {
namespace {

using cuda_testing::kGpu;
using cuda_testing::Random;
using cuda_testing::Rtol;
using cuda_testing::SameValues;

using OpFn = std::function<Tensor(const TensorList&)>;

// Runs `op` on `inputs` (host tensors) and on their copies on cuda:0; compares the outputs and,
// after backward of sum(out * r), the gradient of every floating-point input.
void ExpectSameOnGpu(const std::string& name, const TensorList& inputs, const OpFn& op) {
  SCOPED_TRACE(name);
  TensorList cpu, gpu;
  for (const Tensor& input : inputs) {
    Tensor c = input.Clone(), g = input.To(kGpu);
    if (IsComputeType(input.dtype())) {
      c.set_requires_grad(true);
      g.set_requires_grad(true);
    }
    cpu.push_back(c);
    gpu.push_back(g);
  }
  const Tensor out_cpu = op(cpu), out_gpu = op(gpu);
  ASSERT_EQ(out_gpu.device(), kGpu);
  const double rtol = Rtol(out_cpu.dtype());
  EXPECT_TRUE(SameValues(out_gpu, out_cpu, rtol)) << "forward";

  const Tensor weights = Random(out_cpu.shape(), out_cpu.dtype(), /*seed=*/99, 0.5, 1.5);
  Sum(Mul(out_cpu, weights)).Backward();
  Sum(Mul(out_gpu, weights.To(kGpu))).Backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu[i].requires_grad()) continue;
    SCOPED_TRACE("gradient of input " + std::to_string(i));
    ASSERT_EQ(cpu[i].grad().defined(), gpu[i].grad().defined());
    if (!cpu[i].grad().defined()) continue;
    EXPECT_EQ(gpu[i].grad().device(), kGpu);
    EXPECT_TRUE(SameValues(gpu[i].grad(), cpu[i].grad(), rtol));
  }
}

class CudaOpsTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { DDPKIT_REQUIRE_GPU(); }
  DType dtype() const { return GetParam(); }
  Tensor Rand(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) const {
    return Random(shape, dtype(), seed, low, high);
  }
};

TEST_P(CudaOpsTest, AddSubMul) {
  const Tensor a = Rand({3, 70}, 1), b = Rand({3, 70}, 2), s = Rand({1}, 3);
  ExpectSameOnGpu("add", {a, b}, [](const TensorList& t) { return Add(t[0], t[1]); });
  ExpectSameOnGpu("sub", {a, b}, [](const TensorList& t) { return Sub(t[0], t[1]); });
  ExpectSameOnGpu("mul", {a, b}, [](const TensorList& t) { return Mul(t[0], t[1]); });
  // A single-element operand is broadcast, and its gradient summed back.
  ExpectSameOnGpu("add scalar left", {s, a}, [](const TensorList& t) { return Add(t[0], t[1]); });
  ExpectSameOnGpu("sub scalar right", {a, s}, [](const TensorList& t) { return Sub(t[0], t[1]); });
  ExpectSameOnGpu("mul scalar", {a, s}, [](const TensorList& t) { return Mul(t[0], t[1]); });
}

TEST_P(CudaOpsTest, ScalarMulAndDiv) {
  const Tensor x = Rand({5, 9}, 4);
  ExpectSameOnGpu("mul_scalar", {x}, [](const TensorList& t) { return MulScalar(t[0], -2.5); });
  ExpectSameOnGpu("div_scalar", {x}, [](const TensorList& t) { return DivScalar(t[0], 3.0); });
}

TEST_P(CudaOpsTest, Activations) {
  const Tensor x = Rand({4, 300}, 5, -3.0, 3.0);
  ExpectSameOnGpu("relu", {x}, [](const TensorList& t) { return Relu(t[0]); });
  ExpectSameOnGpu("tanh", {x}, [](const TensorList& t) { return Tanh(t[0]); });
  ExpectSameOnGpu("gelu", {x}, [](const TensorList& t) { return Gelu(t[0]); });
  ExpectSameOnGpu("exp", {x}, [](const TensorList& t) { return Exp(t[0]); });
  const Tensor positive = Rand({4, 300}, 6, 0.25, 4.0);
  ExpectSameOnGpu("log", {positive}, [](const TensorList& t) { return Log(t[0]); });
}

TEST_P(CudaOpsTest, SumAndMean) {
  ExpectSameOnGpu("sum", {Rand({7, 13}, 7)}, [](const TensorList& t) { return Sum(t[0]); });
  ExpectSameOnGpu("mean", {Rand({7, 13}, 8)}, [](const TensorList& t) { return Mean(t[0]); });
  // Enough elements for many partial sums (the two-pass reduction).
  ExpectSameOnGpu("sum large", {Rand({1 << 20}, 9, 0.0, 1.0)},
                  [](const TensorList& t) { return Sum(t[0]); });
  ExpectSameOnGpu("sum empty", {Rand({0, 3}, 10)}, [](const TensorList& t) { return Sum(t[0]); });
}

TEST_P(CudaOpsTest, MatmulAndLinear) {
  const Tensor a = Rand({5, 7}, 11), b = Rand({7, 3}, 12);
  ExpectSameOnGpu("matmul", {a, b}, [](const TensorList& t) { return Matmul(t[0], t[1]); });
  const Tensor x = Rand({6, 5}, 13), w = Rand({4, 5}, 14), bias = Rand({4}, 15);
  ExpectSameOnGpu("linear", {x, w, bias},
                  [](const TensorList& t) { return Linear(t[0], t[1], t[2]); });
  ExpectSameOnGpu("linear without bias", {x, w},
                  [](const TensorList& t) { return Linear(t[0], t[1], Tensor()); });
}

// Column sums over more rows than one chunk (64, column_reduce.cuh), the last chunk partial:
// a Linear's bias gradient and LayerNorm's weight and bias gradients.
TEST_P(CudaOpsTest, ColumnSumsOverManyRows) {
  const Tensor x = Rand({300, 24}, 16), w = Rand({40, 24}, 17), bias = Rand({40}, 18);
  ExpectSameOnGpu("linear, 300 rows", {x, w, bias},
                  [](const TensorList& t) { return Linear(t[0], t[1], t[2]); });
  const Tensor h = Rand({3, 100, 48}, 19), g = Rand({48}, 26), b = Rand({48}, 27);
  ExpectSameOnGpu("layer_norm, 300 rows", {h, g, b},
                  [](const TensorList& t) { return LayerNorm(t[0], t[1], t[2]); });
}

TEST_P(CudaOpsTest, LogSoftmax) {
  // More columns than a block has threads: each thread strides over several.
  ExpectSameOnGpu("log_softmax", {Rand({6, 700}, 16, -4.0, 4.0)},
                  [](const TensorList& t) { return LogSoftmax(t[0]); });
}

TEST_P(CudaOpsTest, CrossEntropyBothReductionsWithOffset) {
  const Tensor logits = Rand({5, 12}, 17, -3.0, 3.0);
  const Tensor targets = Tensor::FromVector<int64_t>({0, 4, 2, 8, 1}, {5});
  ExpectSameOnGpu("cross_entropy mean", {logits, targets}, [](const TensorList& t) {
    return CrossEntropy(t[0], t[1], {.target_offset = 3, .reduction = Reduction::kMean});
  });
  ExpectSameOnGpu("cross_entropy sum", {logits, targets}, [](const TensorList& t) {
    return CrossEntropy(t[0], t[1], {.target_offset = 0, .reduction = Reduction::kSum});
  });
}

TEST_P(CudaOpsTest, Mse) {
  ExpectSameOnGpu("mse", {Rand({4, 6}, 18), Rand({4, 6}, 19)},
                  [](const TensorList& t) { return Mse(t[0], t[1]); });
}

TEST_P(CudaOpsTest, TransposeConcatSliceReshape) {
  ExpectSameOnGpu("transpose", {Rand({5, 300}, 20)},
                  [](const TensorList& t) { return Transpose(t[0]); });
  ExpectSameOnGpu("concat", {Rand({2, 4}, 21), Rand({3, 4}, 22), Rand({1, 4}, 23)},
                  [](const TensorList& t) { return Concat(t); });
  ExpectSameOnGpu("slice", {Rand({6, 4}, 24)},
                  [](const TensorList& t) { return Slice(t[0], 1, 4); });
  ExpectSameOnGpu("reshape", {Rand({6, 4}, 25)}, [](const TensorList& t) {
    return Reshape(t[0], {3, 8});
  });
}

TEST_P(CudaOpsTest, L2NormalizeRows) {
  ExpectSameOnGpu("l2_normalize_rows", {Rand({6, 513}, 26)},
                  [](const TensorList& t) { return L2NormalizeRows(t[0]); });
  // Rows whose norm is under eps are divided by eps (the clamped branch).
  ExpectSameOnGpu("l2_normalize_rows clamped", {Rand({3, 4}, 27, -1e-9, 1e-9)},
                  [](const TensorList& t) { return L2NormalizeRows(t[0], 1e-6); });
}

TEST_P(CudaOpsTest, EmbeddingWithRepeatedIndices) {
  const Tensor weight = Rand({10, 7}, 28);
  const Tensor indices = Tensor::FromVector<int64_t>({0, 3, 3, 9, 0, 5, 3}, {7});
  ExpectSameOnGpu("embedding", {weight, indices},
                  [](const TensorList& t) { return EmbeddingLookup(t[0], t[1]); });
}

TEST_P(CudaOpsTest, SequenceMeanOverPaddedSequences) {
  // 4 sequences of L = 6 rows, one full, one of a single row; wider than a block.
  const Tensor x = Rand({24, 300}, 34);
  const Tensor lengths = Tensor::FromVector<int64_t>({3, 6, 1, 4}, {4});
  ExpectSameOnGpu("sequence_mean", {x, lengths},
                  [](const TensorList& t) { return SequenceMean(t[0], t[1]); });
}

TEST_P(CudaOpsTest, SmallNetworkEndToEnd) {
  const Tensor x = Rand({8, 6}, 29), w1 = Rand({16, 6}, 30), b1 = Rand({16}, 31);
  const Tensor w2 = Rand({5, 16}, 32), b2 = Rand({5}, 33);
  const Tensor targets = Tensor::FromVector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2}, {8});
  ExpectSameOnGpu("mlp", {x, w1, b1, w2, b2, targets}, [](const TensorList& t) {
    Tensor h = Gelu(Linear(t[0], t[1], t[2]));
    Tensor logits = Linear(L2NormalizeRows(h), t[3], t[4]);
    return CrossEntropy(logits, t[5]);
  });
}

TEST_P(CudaOpsTest, TransformerOps) {
  const Tensor x = Rand({2, 5, 300}, 20), w = Rand({300}, 21), b = Rand({300}, 22);
  ExpectSameOnGpu("layer_norm", {x, w, b},
                  [](const TensorList& t) { return LayerNorm(t[0], t[1], t[2]); });
  ExpectSameOnGpu("layer_norm no bias", {x, w},
                  [](const TensorList& t) { return LayerNorm(t[0], t[1], Tensor()); });
  ExpectSameOnGpu("softmax", {Rand({3, 4, 300}, 23, -3.0, 3.0)},
                  [](const TensorList& t) { return Softmax(t[0]); });
  ExpectSameOnGpu("add_trailing", {x, Rand({5, 300}, 24)},
                  [](const TensorList& t) { return AddTrailing(t[0], t[1]); });
  // B = 2, T = 7, C = 12 in 3 heads.
  ExpectSameOnGpu("causal_self_attention", {Rand({2, 7, 36}, 25, -2.0, 2.0)},
                  [](const TensorList& t) { return CausalSelfAttention(t[0], 3); });
}

TEST_P(CudaOpsTest, Conv2d) {
  const Tensor x = Rand({2, 3, 9, 7}, 60), w3 = Rand({4, 3, 3, 3}, 61), b = Rand({4}, 62);
  ExpectSameOnGpu("conv2d 3x3 padding 1 bias", {x, w3, b}, [](const TensorList& t) {
    return Conv2d(t[0], t[1], t[2], {.stride = 1, .padding = 1});
  });
  ExpectSameOnGpu("conv2d 3x3 stride 2 no bias", {x, w3}, [](const TensorList& t) {
    return Conv2d(t[0], t[1], Tensor(), {.stride = 2, .padding = 0});
  });
  // ResNet's downsample: 1x1, stride 2, no bias; and a pointwise one with a bias.
  const Tensor w1 = Rand({5, 3, 1, 1}, 63), b1 = Rand({5}, 64);
  ExpectSameOnGpu("conv2d 1x1 stride 2", {x, w1}, [](const TensorList& t) {
    return Conv2d(t[0], t[1], Tensor(), {.stride = 2, .padding = 0});
  });
  ExpectSameOnGpu("conv2d 1x1 bias", {x, w1, b1},
                  [](const TensorList& t) { return Conv2d(t[0], t[1], t[2]); });
  // The ImageNet stem: 7x7, stride 2, padding 3.
  ExpectSameOnGpu("conv2d 7x7 stride 2 padding 3",
                  {Rand({2, 3, 16, 16}, 65), Rand({4, 3, 7, 7}, 66)}, [](const TensorList& t) {
                    return Conv2d(t[0], t[1], Tensor(), {.stride = 2, .padding = 3});
                  });
}

TEST_P(CudaOpsTest, PoolsAndFlatten) {
  const Tensor x = Rand({2, 3, 9, 7}, 67);
  ExpectSameOnGpu("max_pool2d 3 stride 2 padding 1", {x}, [](const TensorList& t) {
    return MaxPool2d(t[0], {.kernel = 3, .stride = 2, .padding = 1});
  });
  // Overlapping windows (stride 1): an input that is the maximum of several outputs gathers
  // all their gradients.
  ExpectSameOnGpu("max_pool2d 2 stride 1", {x}, [](const TensorList& t) {
    return MaxPool2d(t[0], {.kernel = 2, .stride = 1, .padding = 0});
  });
  ExpectSameOnGpu("max_pool2d 2 (stride = kernel)", {x},
                  [](const TensorList& t) { return MaxPool2d(t[0], {.kernel = 2}); });
  // Ties: the first maximum in the window takes the gradient, as on the host.
  ExpectSameOnGpu("max_pool2d ties", {Tensor::Full({1, 2, 4, 4}, 0.5, dtype())},
                  [](const TensorList& t) { return MaxPool2d(t[0], {.kernel = 2, .stride = 1}); });
  ExpectSameOnGpu("adaptive_avg_pool2d 1x1", {x},
                  [](const TensorList& t) { return AdaptiveAvgPool2d(t[0], 1, 1); });
  // 9x7 to 4x3: windows of unequal sizes that overlap.
  ExpectSameOnGpu("adaptive_avg_pool2d 4x3", {x},
                  [](const TensorList& t) { return AdaptiveAvgPool2d(t[0], 4, 3); });
  ExpectSameOnGpu("flatten", {x}, [](const TensorList& t) { return Flatten(t[0]); });
}

// batch_norm in training (batch statistics, running statistics moved in place) and evaluation
// (the running ones), with and without the affine parameters, on [N, C, H, W] and [N, C].
TEST_P(CudaOpsTest, BatchNorm) {
  for (const Shape& shape : {Shape{4, 3, 5, 6}, Shape{6, 5}}) {
    const int64_t c = shape[1];
    const Tensor x = Rand(shape, 70, -2.0, 3.0), w = Rand({c}, 71), b = Rand({c}, 72);
    for (const bool training : {true, false}) {
      for (const bool affine : {true, false}) {
        Tensor mean_cpu = Rand({c}, 73), var_cpu = Rand({c}, 74, 0.5, 1.5);
        Tensor mean_gpu = mean_cpu.To(kGpu), var_gpu = var_cpu.To(kGpu);
        const BatchNormOptions options{.training = training, .momentum = 0.3, .eps = 1e-3};
        const OpFn op = [&](const TensorList& t) {
          const bool gpu = t[0].is_cuda();
          return BatchNorm(t[0], affine ? t[1] : Tensor(), affine ? t[2] : Tensor(),
                           gpu ? mean_gpu : mean_cpu, gpu ? var_gpu : var_cpu, options);
        };
        ExpectSameOnGpu(StrCat("batch_norm ", ShapeString(shape), training ? " train" : " eval",
                               affine ? " affine" : ""),
                        {x, w, b}, op);
        EXPECT_TRUE(SameValues(mean_gpu, mean_cpu, Rtol(dtype()))) << "running_mean";
        EXPECT_TRUE(SameValues(var_gpu, var_cpu, Rtol(dtype()))) << "running_var";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOpsTest, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// A torchvision-style ResNet (autograd/nn/models/resnet.h) on cuda:0 against the same model on the
// host: the loss, every parameter's gradient, the BatchNorm buffers after the training forward
// (num_batches_tracked included), one SGD step with momentum, and an evaluation forward with the
// updated running statistics. float32 through a dozen layers: a looser tolerance than one op's.
class CudaResNetTest : public ::testing::TestWithParam<std::string> {};

void ExpectSameNamed(const NamedTensors& gpu, const NamedTensors& cpu, bool grads, double rtol) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    SCOPED_TRACE(cpu[i].first);
    ASSERT_EQ(gpu[i].first, cpu[i].first);
    const Tensor& g = grads ? gpu[i].second.grad() : gpu[i].second;
    const Tensor& c = grads ? cpu[i].second.grad() : cpu[i].second;
    EXPECT_TRUE(SameValues(g.To(Device::Cpu()), c, rtol));
  }
}

TEST_P(CudaResNetTest, TrainingStepAndEvaluationMatchTheHost) {
  DDPKIT_REQUIRE_GPU();
  const absl::StatusOr<models::ModelSpec> spec = models::ParseModel(GetParam());
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::shared_ptr<nn::Module> cpu = models::MakeModel(*spec, 5), gpu = models::MakeModel(*spec, 5);
  gpu->To(kGpu);
  const double rtol = 1e-4;
  const Tensor x = Random({4, 3, 16, 16}, DType::kFloat32, 80);
  const Tensor labels = Tensor::FromVector<int64_t>({1, 0, 9, 3}, {4});
  const Tensor loss_cpu = CrossEntropy(cpu->Forward(x), labels);
  const Tensor loss_gpu = CrossEntropy(gpu->Forward(x.To(kGpu)), labels.To(kGpu));
  EXPECT_TRUE(SameValues(loss_gpu.To(Device::Cpu()), loss_cpu, rtol)) << "loss";
  ExpectSameNamed(gpu->NamedBuffers(), cpu->NamedBuffers(), false, rtol);
  loss_cpu.Backward();
  loss_gpu.Backward();
  ExpectSameNamed(gpu->NamedParameters(), cpu->NamedParameters(), true, rtol);

  const SgdOptions sgd{.lr = 0.1, .momentum = 0.9};
  Sgd(cpu->Parameters(), sgd).Step();
  Sgd(gpu->Parameters(), sgd).Step();
  ExpectSameNamed(gpu->NamedParameters(), cpu->NamedParameters(), false, rtol);
  cpu->Eval();
  gpu->Eval();
  EXPECT_TRUE(SameValues(gpu->Forward(x.To(kGpu)).To(Device::Cpu()), cpu->Forward(x), rtol))
      << "evaluation logits";
}

INSTANTIATE_TEST_SUITE_P(Stems, CudaResNetTest,
                         ::testing::Values("resnet:1,1,1,1,width=8,in=3,classes=10,stem=small",
                                           "resnet:1,1,1,1,width=8,in=3,classes=10,stem=imagenet"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.find("imagenet") != std::string::npos
                                      ? std::string("ImagenetStem")
                                      : std::string("SmallStem");
                         });

// SyncBatchNorm's hook is host only: on a GPU tensor it is refused, saying so.
TEST(CudaOpsErrorsTest, SyncBatchNormIsRefusedOnTheGpu) {
  DDPKIT_REQUIRE_GPU();
  struct NoSync : BatchNormSync {
    void SumAcrossRanks(std::vector<double>& /*values*/, std::string_view /*what*/) override {}
  };
  const Tensor x = Random({4, 2, 3, 3}, DType::kFloat32, 81).To(kGpu);
  try {
    BatchNorm(x, Tensor(), Tensor(), Tensor(), Tensor(), {.sync = std::make_shared<NoSync>()});
    ADD_FAILURE() << "a synced batch_norm ran on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[sync_batch_norm] runs on the host only"),
              std::string::npos)
        << e.what();
  }
}

// Summing the same tensor twice gives the same bits (fixed-order trees, no atomics).
TEST(CudaDeterminismTest, SumEmbeddingAndBiasBackwardAreBitwiseRepeatable) {
  DDPKIT_REQUIRE_GPU();
  const Tensor x = Random({1 << 18}, DType::kFloat32, 40).To(kGpu);
  EXPECT_EQ(Sum(x).item(), Sum(x).item());
  Tensor weight = Random({50, 8}, DType::kFloat32, 41).To(kGpu);
  weight.set_requires_grad(true);
  std::vector<int64_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % 50);
  const Tensor indices = Tensor::FromVector<int64_t>(ids, {4000}).To(kGpu);
  const Tensor upstream = Random({4000, 8}, DType::kFloat32, 42).To(kGpu);
  std::vector<std::vector<double>> grads;
  for (int run = 0; run < 2; ++run) {
    weight.set_grad(Tensor());
    Sum(Mul(EmbeddingLookup(weight, indices), upstream)).Backward();
    grads.push_back(weight.grad().ToDoubles());
  }
  EXPECT_EQ(grads[0], grads[1]);
  // The bias's column sums over 4000 rows: 63 chunks, the same bits every run.
  Tensor bias = Random({8}, DType::kFloat32, 43).To(kGpu);
  bias.set_requires_grad(true);
  const Tensor w = Random({8, 8}, DType::kFloat32, 44).To(kGpu);
  std::vector<std::vector<double>> bias_grads;
  for (int run = 0; run < 2; ++run) {
    bias.set_grad(Tensor());
    Sum(Mul(Linear(upstream, w, bias), upstream)).Backward();
    bias_grads.push_back(bias.grad().ToDoubles());
  }
  EXPECT_EQ(bias_grads[0], bias_grads[1]);
}

// Operands on different devices are refused, naming the op and both devices.
TEST(CudaOpsErrorsTest, MixedDevicesAreRejected) {
  DDPKIT_REQUIRE_GPU();
  const Tensor cpu = Random({2, 2}, DType::kFloat32, 50);
  const Tensor gpu = cpu.To(kGpu);
  auto expect_error = [](const std::function<void()>& f, const std::string& op) {
    try {
      f();
      ADD_FAILURE() << op << " accepted operands on two devices";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[" + op + "] operands are on "), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("move them to one device with To()"), std::string::npos)
          << e.what();
    }
  };
  expect_error([&] { Add(cpu, gpu); }, "add");
  expect_error([&] { Mul(gpu, cpu); }, "mul");
  expect_error([&] { Matmul(cpu, gpu); }, "matmul");
  expect_error([&] { Linear(gpu, cpu, Tensor()); }, "linear");
  expect_error([&] { Linear(gpu, gpu, Tensor::Zeros({2})); }, "linear");
  expect_error([&] { Concat({gpu, cpu}); }, "concat");
  expect_error(
      [&] {
        CrossEntropy(gpu, Tensor::FromVector<int64_t>({0, 1}, {2}));
      },
      "cross_entropy");
  expect_error(
      [&] {
        EmbeddingLookup(gpu, Tensor::FromVector<int64_t>({0, 1}, {2}));
      },
      "embedding");
  expect_error(
      [&] {
        SequenceMean(gpu, Tensor::FromVector<int64_t>({1, 2}, {2}));
      },
      "sequence_mean");
  try {
    Add(cpu, gpu);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[add] operands are on cpu and cuda:0; move them to one device with To()");
  }
}

// Out-of-range targets and indices on the GPU are caught (read back on the host).
TEST(CudaOpsErrorsTest, OutOfRangeTargetsAndIndices) {
  DDPKIT_REQUIRE_GPU();
  const Tensor logits = Random({2, 3}, DType::kFloat32, 51).To(kGpu);
  EXPECT_THROW(CrossEntropy(logits, Tensor::FromVector<int64_t>({0, 3}, {2}).To(kGpu)), Error);
  EXPECT_THROW(EmbeddingLookup(logits, Tensor::FromVector<int64_t>({2}, {1}).To(kGpu)), Error);
  EXPECT_THROW(SequenceMean(logits, Tensor::FromVector<int64_t>({2, 0}, {2}).To(kGpu)), Error);
}

}  // namespace
}  // namespace ddpkit
