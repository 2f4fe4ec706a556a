// Element types. float32 and float64 are compute types; float16 and bfloat16 are storage types
// (convert to float to compute — the comm layer's compression hooks use them); int32 and int64
// hold indices and class labels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace ddpkit {

enum class DType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };

size_t ElementSize(DType dtype);
// Short lowercase name: "float32", "float64", "float16", "bfloat16", "int32", "int64".
std::string_view DTypeName(DType dtype);
// Parses a name as printed by DTypeName, or the short forms f32, f64, f16, bf16, i32, i64.
absl::StatusOr<DType> ParseDType(std::string_view name);
inline bool IsFloatingPoint(DType d) { return d != DType::kInt32 && d != DType::kInt64; }
// Types the autograd ops compute in.
inline bool IsComputeType(DType d) { return d == DType::kFloat32 || d == DType::kFloat64; }

// IEEE binary16 and bfloat16 held as raw bits, converted with round-to-nearest-even.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
float ToFloat(Float16 h);
float ToFloat(BFloat16 b);
Float16 ToFloat16(float f);
BFloat16 ToBFloat16(float f);

// The C++ type stored for each DType.
template <typename T>
constexpr DType kDTypeOf = DType::kFloat32;
template <>
inline constexpr DType kDTypeOf<double> = DType::kFloat64;
template <>
inline constexpr DType kDTypeOf<Float16> = DType::kFloat16;
template <>
inline constexpr DType kDTypeOf<BFloat16> = DType::kBFloat16;
template <>
inline constexpr DType kDTypeOf<int32_t> = DType::kInt32;
template <>
inline constexpr DType kDTypeOf<int64_t> = DType::kInt64;

}  // namespace ddpkit
