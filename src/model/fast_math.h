// exp, tanh and sigmoid for the transformer's elementwise loops, written so that the
// compiler vectorizes them: no calls, no branches, no tables. libm's expf and tanhf are
// scalar calls, and over a GPT step's 10^8 softmax and GELU values they cost as much as
// the matrix products they sit between.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace tandem::fastmath {

// e^x = 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2) / 2; e^r by its Taylor
// polynomial of degree 7 (truncation below 1e-8 relative, so the result is within a few
// ulp of expf). x is clamped to [-87, 88], where 2^n stays a normal float: e^-87 is
// 1.6e-38 rather than a denormal or 0, e^88 is 1.65e38 rather than inf.
inline float exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: x + kShift rounds x to an integer
  const float t = x * kLog2e + kShift;
  const float n = t - kShift;
  // ln 2 split in two so that n * kLn2Hi is exact: r keeps its low bits.
  const float r = (x - n * 0.693145751953125f) - n * 1.42860676533018570e-06f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // t's low mantissa bits hold n (t = 1.5 * 2^23 + n): rebuild 2^n in the exponent field.
  const std::int32_t ni = std::bit_cast<std::int32_t>(t) - 0x4B400000;
  return p * std::bit_cast<float>((ni + 127) << 23);
}

// tanh(x) = 1 - 2 / (e^(2x) + 1): exact limits (+-1) and an absolute error of a few 1e-8
// near 0, where the subtraction cancels (GELU multiplies it by 0.5 x, so that is harmless).
inline float tanh(float x) { return 1.0f - 2.0f / (fastmath::exp(2.0f * x) + 1.0f); }

inline float sigmoid(float x) { return 1.0f / (1.0f + fastmath::exp(-x)); }

}  // namespace tandem::fastmath
