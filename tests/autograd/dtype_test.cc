// Element types and the float16 / bfloat16 conversions (rounding cases are also checked
// against PyTorch in torch_golden_test.cc).
#include "autograd/dtype.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "autograd/half_convert.h"
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

// The bulk conversions (F16C where the CPU has it) give each element's own conversion: every
// half bit pattern widened, and floats across every range narrowed — ties, subnormals, the
// overflow edge, signed zeros — in runs whose lengths leave remainders past the vector width.
TEST(DTypeTest, BulkHalfConversionsEqualTheElementwiseOnes) {
  std::vector<Float16> halves(65536);
  for (uint32_t b = 0; b < 65536; ++b) halves[b].bits = static_cast<uint16_t>(b);
  std::vector<float> wide(halves.size());
  HalfToFloat(halves.data(), wide.data(), static_cast<int64_t>(halves.size()));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float one = ToFloat(halves[b]);
    if (std::isnan(one)) {
      ASSERT_TRUE(std::isnan(wide[b])) << b;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(wide[b]), std::bit_cast<uint32_t>(one)) << b;
    }
  }
  std::mt19937 rng(3);
  std::vector<float> floats = {0.0f,
                               -0.0f,
                               65504.0f,
                               65519.99f,
                               65520.0f,
                               -65520.0f,
                               std::numeric_limits<float>::infinity(),
                               std::ldexp(1.0f, -25),
                               std::ldexp(3.0f, -26),
                               1.00048828125f,
                               6.1035156e-05f};
  for (int i = 0; i < 200000; ++i) {
    floats.push_back(std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                                std::uniform_int_distribution<int>(-30, 18)(rng)));
  }
  floats.resize(floats.size() - 3);  // not a multiple of 8
  std::vector<Float16> narrow(floats.size());
  FloatToHalf(floats.data(), narrow.data(), static_cast<int64_t>(floats.size()));
  std::vector<BFloat16> brain(floats.size());
  FloatToBHalf(floats.data(), brain.data(), static_cast<int64_t>(floats.size()));
  for (size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(narrow[i].bits, ToFloat16(floats[i]).bits) << floats[i];
    ASSERT_EQ(brain[i].bits, ToBFloat16(floats[i]).bits) << floats[i];
  }
}

}  // namespace
}  // namespace ddpkit
