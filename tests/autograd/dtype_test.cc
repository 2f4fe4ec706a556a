// Element types and the float16 / bfloat16 conversions (rounding cases are also checked
// against PyTorch in torch_golden_test.cc).
#include "autograd/dtype.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace ddpkit {
namespace {

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(ElementSize(DType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(*ParseDType("f16"), DType::kFloat16);
  EXPECT_EQ(*ParseDType("float64"), DType::kFloat64);
  EXPECT_EQ(ParseDType("f8").status().message(),
            "unknown dtype 'f8'; expected one of f32, f64, f16, bf16, i32, i64");
}

TEST(DTypeTest, Float16KnownBitPatterns) {
  EXPECT_EQ(ToFloat16(1.0f).bits, 0x3c00);
  EXPECT_EQ(ToFloat16(-2.0f).bits, 0xc000);
  EXPECT_EQ(ToFloat16(65504.0f).bits, 0x7bff);               // largest finite
  EXPECT_EQ(ToFloat16(65520.0f).bits, 0x7c00);               // rounds to infinity
  EXPECT_EQ(ToFloat16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(ToFloat16(0.1f).bits, 0x2e66);
  EXPECT_TRUE(std::isnan(ToFloat(ToFloat16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {  // every finite positive half round-trips
    Float16 h{static_cast<uint16_t>(bits)};
    ASSERT_EQ(ToFloat16(ToFloat(h)).bits, bits);
  }
}

TEST(DTypeTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(ToBFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(ToFloat(ToBFloat16(1.00390625f)), 1.0f);       // tie, rounds to even (down)
  EXPECT_EQ(ToFloat(ToBFloat16(1.01171875f)), 1.015625f);  // tie, rounds to even (up)
  EXPECT_EQ(ToFloat(BFloat16{0x4049}), 3.140625f);
}

}  // namespace
}  // namespace ddpkit
