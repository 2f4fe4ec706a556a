// Helpers shared by the GPU tests (label gpu: cuda_test, and the skip for the others): the skip
// that keeps them green where no GPU is usable, and CPU-vs-GPU comparisons.
#pragma once

#include <cmath>
#include <string>

#include "autograd/cuda/runtime.h"
#include "autograd/random.h"
#include "autograd/tensor.h"
#include "gtest/gtest.h"

// Skips the test, with one line saying why, unless cuda:0 can hold tensors.
#define DDPKIT_REQUIRE_GPU()                                                            \
  do {                                                                                  \
    if (::ddpkit::cuda::DeviceCount() == 0) {                                           \
      GTEST_SKIP() << ::ddpkit::cuda::CheckUsable(::ddpkit::Device::Cuda(0)).message(); \
    }                                                                                   \
  } while (0)

namespace ddpkit::cuda_testing {

inline const Device kGpu = Device::Cuda(0);

// A host tensor of `shape` with uniform values in [low, high), seeded.
inline Tensor Random(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0,
                     double high = 1.0) {
  Tensor t = Tensor::Empty(shape, dtype);
  Generator generator(seed);
  generator.FillUniform(t, low, high);
  return t;
}

// Tolerances for one dtype: float64 agrees to rounding, float32 to a few ulps of the sums.
inline double Rtol(DType dtype) { return dtype == DType::kFloat64 ? 1e-12 : 1e-5; }

// |gpu - cpu| <= rtol * (|cpu| + scale) element-wise, scale being the largest |cpu| (so sums
// that cancel to near zero are judged against the size of what was summed).
inline ::testing::AssertionResult SameValues(const Tensor& gpu, const Tensor& cpu, double rtol) {
  if (!gpu.defined() || !cpu.defined()) {
    return ::testing::AssertionFailure()
           << "undefined tensor (gpu " << gpu.defined() << ", cpu " << cpu.defined() << ")";
  }
  if (gpu.shape() != cpu.shape() || gpu.dtype() != cpu.dtype()) {
    return ::testing::AssertionFailure()
           << "gpu " << DTypeName(gpu.dtype()) << ShapeString(gpu.shape()) << " vs cpu "
           << DTypeName(cpu.dtype()) << ShapeString(cpu.shape());
  }
  const std::vector<double> a = gpu.ToDoubles(), b = cpu.ToDoubles();
  double scale = 0;
  for (double v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    if (!both_nan && !(std::fabs(a[i] - b[i]) <= rtol * (std::fabs(b[i]) + scale))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": gpu " << a[i] << " vs cpu " << b[i] << " (rtol " << rtol
             << ", scale " << scale << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ddpkit::cuda_testing
