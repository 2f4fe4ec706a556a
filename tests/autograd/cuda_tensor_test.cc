// Tensors, optimizers, modules and safetensors on cuda:0: copies across devices (with dtype
// conversions), Fill and at, the host-only data<T>(), Module::To, GPU optimizer steps equal to
// the host's, and safetensors to and from the GPU. Skips, saying why, where no GPU is usable.
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/gemm.h"
#include "autograd/kernels.h"
#include "autograd/nn/nn.h"
#include "autograd/nn/optim.h"
#include "autograd/nn/safetensors.h"
#include "autograd/ops.h"
#include "tests/autograd/cuda_test_util.h"

namespace ddpkit {
namespace {

using cuda_testing::kGpu;
using cuda_testing::Random;
using cuda_testing::SameValues;

// ---------------------------------------------------------------------------- tensors
TEST(CudaTensorTest, FactoriesFillAndAt) {
  DDPKIT_REQUIRE_GPU();
  const Tensor zeros = Tensor::Zeros({3, 4}, DType::kFloat32, kGpu);
  EXPECT_EQ(zeros.device(), kGpu);
  EXPECT_TRUE(zeros.is_cuda());
  EXPECT_EQ(zeros.ToDoubles(), std::vector<double>(12, 0.0));
  const Tensor full = Tensor::Full({5}, 2.5, DType::kFloat64, kGpu);
  EXPECT_EQ(full.ToDoubles(), std::vector<double>(5, 2.5));
  full.Rows(1, 3).Fill(-1);  // a view's fill lands in its parent
  EXPECT_EQ(full.ToDoubles(), (std::vector<double>{2.5, -1, -1, 2.5, 2.5}));
  EXPECT_EQ(full.at(2), -1);
  EXPECT_EQ(full.at(4), 2.5);
  EXPECT_EQ(Tensor::Full({}, 7, DType::kFloat32, kGpu).item(), 7);
}

// cuBLAS with beta 0 ignores what C held (outputs are not zero-filled), over k = 0 too.
TEST(CudaTensorTest, GemmWithBetaZeroIgnoresWhatTheOutputHeld) {
  DDPKIT_REQUIRE_GPU();
  for (int64_t k : {0, 2}) {
    Tensor a = Tensor::Full({3, k}, 1.0, DType::kFloat32, kGpu);
    Tensor b = Tensor::Full({k, 4}, 1.0, DType::kFloat32, kGpu);
    Tensor c = Tensor::Full({3, 4}, std::nan(""), DType::kFloat32, kGpu);
    Gemm(false, false, 3, 4, k, 1.0, a, b, 0.0, c);
    EXPECT_EQ(c.ToDoubles(), std::vector<double>(12, static_cast<double>(k))) << "k = " << k;
  }
}

TEST(CudaTensorTest, CopiesAcrossDevicesAndDtypes) {
  DDPKIT_REQUIRE_GPU();
  const Tensor host =
      Tensor::FromVector<double>({1.5, -2.25, 3.0, 1e-3, 65504, -0.0078125}, {2, 3});
  const Tensor gpu = host.To(kGpu);
  EXPECT_EQ(gpu.device(), kGpu);
  EXPECT_EQ(gpu.shape(), host.shape());
  EXPECT_EQ(gpu.ToDoubles(), host.ToDoubles());
  EXPECT_EQ(gpu.To(Device::Cpu()).device(), Device::Cpu());
  EXPECT_EQ(gpu.Clone().device(), kGpu);
  // Conversions on the GPU round as the host's do, float16 and bfloat16 included.
  for (DType dtype :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor converted = gpu.To(dtype);
    EXPECT_EQ(converted.device(), kGpu);
    EXPECT_EQ(converted.dtype(), dtype);
    EXPECT_EQ(converted.ToDoubles(), host.To(dtype).ToDoubles());
    EXPECT_EQ(converted.To(DType::kFloat64).ToDoubles(),
              host.To(dtype).To(DType::kFloat64).ToDoubles());
  }
  // CopyFrom in every direction, converting where the dtypes differ.
  const Tensor half_gpu = Tensor::Zeros({6}, DType::kFloat16, kGpu);
  half_gpu.CopyFrom(host);  // host float64 -> GPU float16
  EXPECT_EQ(half_gpu.ToDoubles(), host.To(DType::kFloat16).ToDoubles());
  const Tensor bf16_host = Tensor::Zeros({6}, DType::kBFloat16);
  bf16_host.CopyFrom(gpu);  // GPU float64 -> host bfloat16
  EXPECT_EQ(bf16_host.ToDoubles(), host.To(DType::kBFloat16).ToDoubles());
  const Tensor gpu_copy = Tensor::Zeros({2, 3}, DType::kFloat64, kGpu);
  gpu_copy.CopyFrom(gpu);  // GPU -> GPU
  EXPECT_EQ(gpu_copy.ToDoubles(), host.ToDoubles());
}

TEST(CudaTensorTest, HostDataOfAGpuTensorIsRefused) {
  DDPKIT_REQUIRE_GPU();
  const Tensor gpu = Tensor::Zeros({2}, DType::kFloat32, kGpu);
  try {
    gpu.data<float>();
    FAIL() << "data<T>() handed out a GPU pointer to host code";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("To(Device::Cpu())"), std::string::npos) << e.what();
  }
  EXPECT_NE(gpu.device_data<float>(), nullptr);
}

TEST(CudaTensorTest, BackwardSeedsAndAccumulatesOnTheGpu) {
  DDPKIT_REQUIRE_GPU();
  Tensor x = Tensor::FromVector<double>({1, 2, 3}, {3}).To(kGpu);
  x.set_requires_grad(true);
  Sum(Mul(x, x)).Backward();
  Sum(Mul(x, x)).Backward();  // a second backward accumulates in place
  EXPECT_EQ(x.grad().device(), kGpu);
  EXPECT_EQ(x.grad().ToDoubles(), (std::vector<double>{4, 8, 12}));
  // An explicit root gradient on the wrong device is refused.
  Tensor y = Mul(x, x);
  EXPECT_THROW(y.Backward(Tensor::Full({3}, 1.0, DType::kFloat64)), Error);
}

// ---------------------------------------------------------------------------- optimizers
// The same parameters and gradients, stepped on the host and on the GPU, stay equal.
void ExpectSameSteps(const std::function<std::unique_ptr<Optimizer>(TensorList)>& make,
                     DType dtype) {
  SCOPED_TRACE(DTypeName(dtype));
  TensorList cpu, gpu;
  for (int i = 0; i < 2; ++i) {
    const Tensor value = Random({i == 0 ? 40 : 3, 7}, dtype, 60 + i);
    cpu.push_back(value.Clone().set_requires_grad(true));
    gpu.push_back(value.To(kGpu).set_requires_grad(true));
  }
  std::unique_ptr<Optimizer> on_cpu = make(cpu), on_gpu = make(gpu);
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      const Tensor grad = Random(cpu[i].shape(), dtype, 100 * step + i);
      cpu[i].set_grad(grad);
      gpu[i].set_grad(grad.To(kGpu));
    }
    on_cpu->Step();
    on_gpu->Step();
  }
  const double rtol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i].device(), kGpu);
    EXPECT_TRUE(SameValues(gpu[i], cpu[i], rtol)) << "parameter " << i;
  }
  const auto cpu_state = on_cpu->StateTensors(), gpu_state = on_gpu->StateTensors();
  ASSERT_EQ(cpu_state.size(), gpu_state.size());
  for (size_t i = 0; i < cpu_state.size(); ++i) {
    EXPECT_EQ(gpu_state[i].first, cpu_state[i].first);
    EXPECT_TRUE(SameValues(gpu_state[i].second, cpu_state[i].second, rtol)) << cpu_state[i].first;
  }
}

TEST(CudaOptimTest, SgdWithMomentumNesterovAndWeightDecay) {
  DDPKIT_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    ExpectSameSteps(
        [](TensorList p) {
          return std::make_unique<Sgd>(
              std::move(p),
              SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
        },
        dtype);
  }
}

TEST(CudaOptimTest, AdamWithWeightDecay) {
  DDPKIT_REQUIRE_GPU();
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    ExpectSameSteps(
        [](TensorList p) {
          return std::make_unique<Adam>(std::move(p), AdamOptions{.lr = 0.01, .weight_decay = 0.1});
        },
        dtype);
  }
}

TEST(CudaOptimTest, AdamStateLoadsOntoTheParametersDevice) {
  DDPKIT_REQUIRE_GPU();
  Tensor p = Tensor::Zeros({3}, DType::kFloat32, kGpu).set_requires_grad(true);
  Adam adam({p}, AdamOptions{});
  const std::vector<std::pair<std::string, Tensor>> state = {
      {"0.exp_avg", Tensor::Full({3}, 0.5)},
      {"0.exp_avg_sq", Tensor::Full({3}, 0.25)},
      {"0.step", Tensor::Scalar(4, DType::kInt64)}};
  ASSERT_TRUE(adam.LoadStateTensors(state).ok());
  for (const auto& [key, tensor] : adam.StateTensors()) {
    if (key != "0.step") {
      EXPECT_EQ(tensor.device(), kGpu) << key;
    }
  }
  p.set_grad(Tensor::Full({3}, 1.0, DType::kFloat32, kGpu));
  adam.Step();
  EXPECT_EQ(adam.StateTensors()[2].second.item(), 5);
}

// ---------------------------------------------------------------------------- nn::Module::To
TEST(CudaModuleTest, ToMovesParametersInPlace) {
  DDPKIT_REQUIRE_GPU();
  auto model = nn::MakeMlp({6, 8, 3}, /*seed=*/7, DType::kFloat64);
  auto reference = nn::MakeMlp({6, 8, 3}, /*seed=*/7, DType::kFloat64);
  const TensorList handles = model->Parameters();  // held before the move, as DDP would
  model->To(kGpu);
  for (const Tensor& p : handles) {
    EXPECT_EQ(p.device(), kGpu);
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
  }
  const Tensor x = Random({5, 6}, DType::kFloat64, 70);
  const Tensor targets = Tensor::FromVector<int64_t>({0, 2, 1, 1, 0}, {5});
  CrossEntropy((*model)(x.To(kGpu)), targets.To(kGpu)).Backward();
  CrossEntropy((*reference)(x), targets).Backward();
  const TensorList expected = reference->Parameters();
  for (size_t i = 0; i < handles.size(); ++i) {
    EXPECT_TRUE(SameValues(handles[i], expected[i], 1e-15));
    ASSERT_TRUE(handles[i].grad().defined());
    EXPECT_EQ(handles[i].grad().device(), kGpu);
    EXPECT_TRUE(SameValues(handles[i].grad(), expected[i].grad(), 1e-12));
  }
  model->To(Device::Cpu());  // and back, gradients too
  for (size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(handles[i].device(), Device::Cpu());
    EXPECT_EQ(handles[i].grad().device(), Device::Cpu());
    EXPECT_EQ(handles[i].ToDoubles(), expected[i].ToDoubles());
  }
}

// ---------------------------------------------------------------------------- safetensors
TEST(CudaSafetensorsTest, RoundTripFromAndToTheGpu) {
  DDPKIT_REQUIRE_GPU();
  const std::string path = ::testing::TempDir() + "/cuda_round_trip.safetensors";
  const Tensor weights = Random({4, 5}, DType::kFloat32, 80);
  const Tensor halves = Random({3}, DType::kFloat64, 81).To(DType::kBFloat16);
  ASSERT_TRUE(WriteSafetensors(path, {{"w", weights.To(kGpu)}, {"h", halves.To(kGpu)}}).ok());
  // Written from the GPU, the file holds the host's bytes: read back on the host...
  absl::StatusOr<SafetensorsFile> on_host = ReadSafetensors(path);
  ASSERT_TRUE(on_host.ok()) << on_host.status();
  EXPECT_EQ(on_host->Find("w")->ToDoubles(), weights.ToDoubles());
  EXPECT_EQ(on_host->Find("w")->device(), Device::Cpu());
  // ... and straight onto the GPU.
  absl::StatusOr<SafetensorsFile> on_gpu = ReadSafetensors(path, kGpu);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  EXPECT_EQ(on_gpu->Find("w")->device(), kGpu);
  EXPECT_EQ(on_gpu->Find("w")->ToDoubles(), weights.ToDoubles());
  EXPECT_EQ(on_gpu->Find("h")->dtype(), DType::kBFloat16);
  EXPECT_EQ(on_gpu->Find("h")->ToDoubles(), halves.ToDoubles());
  std::filesystem::remove(path);
}

TEST(CudaSafetensorsTest, StateDictOfAGpuModel) {
  DDPKIT_REQUIRE_GPU();
  const std::string path = ::testing::TempDir() + "/cuda_state_dict.safetensors";
  auto source = nn::MakeMlp({4, 6, 2}, /*seed=*/1);
  source->To(kGpu);
  ASSERT_TRUE(SaveStateDict(*source, path).ok());
  auto target = nn::MakeMlp({4, 6, 2}, /*seed=*/2);
  target->To(kGpu);
  ASSERT_TRUE(LoadStateDict(*target, path).ok());
  const TensorList expected = source->Parameters(), loaded = target->Parameters();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(loaded[i].device(), kGpu);
    EXPECT_EQ(loaded[i].ToDoubles(), expected[i].ToDoubles());
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ddpkit
