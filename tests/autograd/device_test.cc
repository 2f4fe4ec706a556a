// Devices on any machine: parsing device names, and the errors that say why a GPU cannot be
// used where none is (a build without CUDA, or no CUDA device).
#include "autograd/device.h"

#include <filesystem>

#include "autograd/cuda/runtime.h"
#include "autograd/nn/nn.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"

namespace ddpkit {
namespace {

TEST(DeviceTest, ParsesCpuCudaAndCudaN) {
  EXPECT_EQ(*ParseDevice("cpu"), Device::Cpu());
  EXPECT_EQ(*ParseDevice("cuda"), Device::Cuda(0));
  EXPECT_EQ(*ParseDevice("cuda:1"), Device::Cuda(1));
  EXPECT_EQ(Device::Cuda(1).ToString(), "cuda:1");
  EXPECT_EQ(Device::Cpu().ToString(), "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CPU", ""}) {
    absl::StatusOr<Device> device = ParseDevice(bad);
    ASSERT_FALSE(device.ok()) << bad;
    EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(device.status().message().find("expected cpu, cuda or cuda:N"), std::string::npos)
        << device.status();
  }
}

// Where no GPU is usable, asking for one fails with the reason.
class NoGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::CheckUsable(Device::Cuda(0)).ok()) GTEST_SKIP() << "a GPU is usable here";
  }
  // "built without CUDA" or "no CUDA device" (or "does not exist"), as CheckUsable says.
  static std::string Why() { return std::string(cuda::CheckUsable(Device::Cuda(0)).message()); }
};

TEST_F(NoGpuTest, AllocatingOnAGpuSaysWhy) {
  EXPECT_EQ(cuda::DeviceCount(), 0);
  try {
    Tensor::Empty({2}, DType::kFloat32, Device::Cuda(0));
    FAIL() << "allocated on a GPU that is not usable";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), Why());
    if constexpr (!kWithCuda) {
      EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Tensor::FromVector<float>({1}, {1}).To(Device::Cuda(0)), Error);
}

TEST_F(NoGpuTest, ModuleToAndLoadingOntoAGpuSayWhy) {
  auto model = nn::MakeMlp({2, 3}, /*seed=*/1);
  EXPECT_THROW(model->To(Device::Cuda(0)), Error);
  EXPECT_EQ(model->Parameters()[0].device(), Device::Cpu());  // nothing moved
  const std::string path = ::testing::TempDir() + "/no_gpu.safetensors";
  ASSERT_TRUE(SaveStateDict(*model, path).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path, Device::Cuda(0));
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find(Why()), std::string::npos) << file.status();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ddpkit
