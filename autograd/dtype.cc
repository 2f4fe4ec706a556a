#include "autograd/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "autograd/base/error.h"

namespace ddpkit {

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  struct Alias {
    std::string_view a, b;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float32", "f32", DType::kFloat32}, {"float64", "f64", DType::kFloat64},
      {"float16", "f16", DType::kFloat16}, {"bfloat16", "bf16", DType::kBFloat16},
      {"int32", "i32", DType::kInt32},     {"int64", "i64", DType::kInt64},
  };
  for (const Alias& alias : kAliases) {
    if (name == alias.a || name == alias.b) return alias.dtype;
  }
  return absl::InvalidArgumentError(
      StrCat("unknown dtype '", name, "'; expected one of f32, f64, f16, bf16, i32, i64"));
}

float ToFloat(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: value = mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or nan
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

Float16 ToFloat16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float magnitude = std::fabs(f);
  if (std::isnan(f)) return {static_cast<uint16_t>(sign | 0x7e00u)};
  if (magnitude >= 65520.0f) return {static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (magnitude < 6.103515625e-05f) {
    // Subnormal range: quantise to multiples of 2^-24 with round-half-even (nearbyint).
    const float scaled = std::nearbyint(std::ldexp(magnitude, 24));
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(scaled))};
  }
  const uint32_t exponent = ((bits >> 23) & 0xffu) - 112;
  uint32_t mantissa = bits & 0x7fffffu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // carries into the exponent
  return {static_cast<uint16_t>(sign | half)};
}

float ToFloat(BFloat16 b) { return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16); }

BFloat16 ToBFloat16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return {static_cast<uint16_t>((bits >> 16) | 0x40u)};
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return {static_cast<uint16_t>(bits >> 16)};
}

}  // namespace ddpkit
