// Helpers shared by the autograd tests.
#pragma once

#include <string>

#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"

namespace ddpkit::testing_util {

inline std::string TestDataPath(const std::string& name) {
  return std::string(DDPKIT_TESTDATA_DIR) + "/" + name;
}

// Reads a committed golden file; fails the test when it cannot.
inline SafetensorsFile ReadGolden(const std::string& name) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(TestDataPath(name));
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : SafetensorsFile{};
}

inline const Tensor& Get(const SafetensorsFile& file, const std::string& name) {
  const Tensor* t = file.Find(name);
  if (t == nullptr) throw std::runtime_error("golden tensor missing: " + name);
  return *t;
}

// A 1-D float64 leaf that requires grad (a parameter, for the engine and optimizer tests).
inline Tensor Leaf(std::vector<double> values) {
  Tensor t = Tensor::FromVector<double>(values, {static_cast<int64_t>(values.size())});
  t.set_requires_grad(true);
  return t;
}

// Element-wise |a - b| <= atol + rtol * |b|, with the first mismatch reported.
inline ::testing::AssertionResult AllClose(const Tensor& a, const Tensor& b, double rtol = 1e-5,
                                           double atol = 1e-6) {
  if (!a.defined() || !b.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (a.numel() != b.numel()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << a.DebugString() << " vs " << b.DebugString();
  }
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.at(i), y = b.at(i);
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ddpkit::testing_util
