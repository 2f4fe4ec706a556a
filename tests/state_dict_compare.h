// Comparing two saved state dicts (safetensors) in a test: the same names, shapes and values —
// bitwise by default, or within a tolerance where two backends may round differently.
#pragma once

#include <cmath>
#include <cstring>
#include <string>

#include "autograd/safetensors.h"
#include "gtest/gtest.h"

namespace ddpkit::testing_util {

inline void ExpectSameStateDicts(const std::string& path_a, const std::string& path_b,
                                 double tolerance = 0) {
  absl::StatusOr<SafetensorsFile> a = ReadSafetensors(path_a), b = ReadSafetensors(path_b);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
  ASSERT_EQ(a->tensors.size(), b->tensors.size()) << path_a << " vs " << path_b;
  for (const auto& [name, tensor] : a->tensors) {
    const Tensor* other = b->Find(name);
    ASSERT_NE(other, nullptr) << name << " is missing from " << path_b;
    ASSERT_EQ(tensor.nbytes(), other->nbytes()) << name;
    if (tolerance == 0) {
      EXPECT_EQ(std::memcmp(tensor.raw_data(), other->raw_data(), tensor.nbytes()), 0)
          << name << " differs between " << path_a << " and " << path_b;
      continue;
    }
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      ASSERT_NEAR(tensor.at(i), other->at(i), tolerance) << name << "[" << i << "]";
    }
  }
}

}  // namespace ddpkit::testing_util
