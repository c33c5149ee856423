// The host's fp16/bf16 conversions (core/half.h): exact round trips, round to nearest
// even at every boundary, and agreement with the compiler's own _Float16 where it has one.
#include "core/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace tandem {
namespace {

bool is_nan16(DataType type, std::uint16_t v) {
  return type == DataType::kFloat16 ? (v & 0x7C00u) == 0x7C00u && (v & 0x3FFu) != 0
                                    : (v & 0x7F80u) == 0x7F80u && (v & 0x7Fu) != 0;
}

TEST(Half, EveryValueRoundTripsExactly) {
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    for (std::uint32_t v = 0; v <= 0xFFFFu; ++v) {
      const auto bits = static_cast<std::uint16_t>(v);
      const float wide = widen(type, bits);
      if (is_nan16(type, bits)) {
        EXPECT_TRUE(std::isnan(wide)) << to_string(type) << " " << v;
        EXPECT_TRUE(is_nan16(type, narrow(type, wide))) << to_string(type) << " " << v;
        continue;
      }
      EXPECT_EQ(narrow(type, wide), bits) << to_string(type) << " " << v;
    }
  }
}

TEST(Half, Fp16RoundsToNearestEvenAtEveryBoundary) {
  const DataType t = DataType::kFloat16;
  EXPECT_EQ(narrow(t, 65504.0f), 0x7BFFu);                      // the largest finite
  EXPECT_EQ(narrow(t, 65519.99f), 0x7BFFu);                     // below the halfway point
  EXPECT_EQ(narrow(t, 65520.0f), 0x7C00u);                      // the tie rounds to even: inf
  EXPECT_EQ(narrow(t, -1e9f), 0xFC00u);                         // -inf
  EXPECT_EQ(narrow(t, std::ldexp(1.0f, -24)), 0x0001u);         // the smallest subnormal
  EXPECT_EQ(narrow(t, std::ldexp(1.0f, -25)), 0x0000u);         // its half: the tie goes to 0
  EXPECT_EQ(narrow(t, std::ldexp(3.0f, -25)), 0x0002u);         // 1.5 steps: to even 2
  EXPECT_EQ(narrow(t, std::ldexp(1.0f, -14)), 0x0400u);         // the smallest normal
  EXPECT_EQ(narrow(t, 1.0f + std::ldexp(1.0f, -11)), 0x3C00u);  // tie: to even 1.0
  EXPECT_EQ(narrow(t, 1.0f + std::ldexp(3.0f, -11)), 0x3C02u);  // tie: to even 1+2^-9
  EXPECT_EQ(narrow(t, -0.0f), 0x8000u);
  EXPECT_EQ(narrow(t, 2.0f), 0x4000u);
}

TEST(Half, Bf16RoundsToNearestEvenAndKeepsNan) {
  const DataType t = DataType::kBFloat16;
  EXPECT_EQ(narrow(t, 1.0f), 0x3F80u);
  EXPECT_EQ(narrow(t, std::bit_cast<float>(0x3F808000u)), 0x3F80u);  // tie: to even
  EXPECT_EQ(narrow(t, std::bit_cast<float>(0x3F818000u)), 0x3F82u);  // tie: to even
  EXPECT_EQ(narrow(t, std::bit_cast<float>(0x3F808001u)), 0x3F81u);  // above the tie
  EXPECT_TRUE(std::isnan(widen(t, narrow(t, std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(widen(t, narrow(t, std::bit_cast<float>(0x7FFFFFFFu)))));
  EXPECT_EQ(narrow(t, std::numeric_limits<float>::infinity()), 0x7F80u);
}

TEST(Half, ArraysScaleOnceAndAgreeWithTheScalarConversions) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-30, 18);
  std::vector<float> in(4099);
  for (float& x : in) x = std::ldexp(normal(rng), exponent(rng));
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<std::uint16_t> narrowed(in.size());
    narrow(type, narrowed.data(), in.data(), in.size(), 0.25f);
    std::vector<float> back(in.size());
    widen(type, back.data(), narrowed.data(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(narrowed[i], narrow(type, in[i] * 0.25f)) << to_string(type) << " " << i;
      ASSERT_EQ(back[i], widen(type, narrowed[i])) << to_string(type) << " " << i;
    }
    // acc := narrow(acc + in), elementwise.
    std::vector<std::uint16_t> acc = narrowed;
    add_narrow(type, acc.data(), narrowed.data(), acc.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(acc[i], narrow(type, 2.0f * widen(type, narrowed[i])))
          << to_string(type) << " " << i;
    }
  }
}

#if defined(__FLT16_MAX__)
// GCC's _Float16 rounds to nearest even in the FPU or libgcc: an independent reference.
TEST(Half, Fp16AgreesWithTheCompilersFloat16) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = std::bit_cast<float>(bits(rng));
    if (std::isnan(x)) continue;
    const auto reference = std::bit_cast<std::uint16_t>(static_cast<_Float16>(x));
    ASSERT_EQ(narrow(DataType::kFloat16, x), reference) << x;
  }
}
#endif

}  // namespace
}  // namespace tandem
