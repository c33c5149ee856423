// The element types a collective moves, and the host's conversions between fp32 and the
// two 16-bit floating-point formats that gradient compression sends (--compress fp16|bf16).
//
// fp16 is IEEE binary16 (5-bit exponent, 10-bit mantissa: largest finite 65504); bf16 is
// the upper half of an fp32 (8-bit exponent, 7-bit mantissa). Narrowing rounds to nearest,
// ties to even, as CUDA's __float2half_rn and __float2bfloat16_rn do, so the host and the
// device cast the same value to the same bits; a NaN stays a NaN, fp16 overflows to
// infinity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem {

enum class DataType : std::uint8_t { kFloat32, kFloat16, kBFloat16 };

inline std::size_t size_of(DataType type) { return type == DataType::kFloat32 ? 4 : 2; }

inline std::string_view to_string(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "fp32";
    case DataType::kFloat16:
      return "fp16";
    case DataType::kBFloat16:
      return "bf16";
  }
  return "?";
}

// One value. `type` is kFloat16 or kBFloat16.
std::uint16_t narrow(DataType type, float value);
float widen(DataType type, std::uint16_t value);

// out[i] := narrow(in[i] * scale), i < n (one rounding: the product is fp32).
void narrow(DataType type, std::uint16_t* out, const float* in, std::size_t n, float scale = 1.0f);
// out[i] := widen(in[i]).
void widen(DataType type, float* out, const std::uint16_t* in, std::size_t n);
// acc[i] := narrow(widen(acc[i]) + widen(in[i])): one step of a 16-bit reduction, whose
// partial sums are rounded to 16 bits as NCCL's are.
void add_narrow(DataType type, std::uint16_t* acc, const std::uint16_t* in, std::size_t n);

}  // namespace tandem
