// Comparing two saved state dicts (safetensors) in a test: the same names, shapes and values —
// bitwise by default, or within a tolerance where two backends may round differently; and a
// file's header as written, in order.
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "autograd/base/file_util.h"
#include "autograd/nn/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

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

// (name, dtype code) of every tensor in the order of the file's JSON header, the order
// PyTorch's safetensors loader hands a state dict to load_state_dict (no __metadata__).
inline std::vector<std::pair<std::string, std::string>> SafetensorsHeader(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  EXPECT_TRUE(bytes.ok() && bytes->size() >= 8) << path;
  if (!bytes.ok() || bytes->size() < 8) return out;
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | static_cast<uint8_t>((*bytes)[i]);
  const auto header = nlohmann::ordered_json::parse(bytes->substr(8, length));
  for (const auto& [name, entry] : header.items()) {
    if (name != "__metadata__") out.emplace_back(name, entry["dtype"].get<std::string>());
  }
  return out;
}

}  // namespace ddpkit::testing_util
