// fp32 <-> fp16/bf16 on the host (core/half.h): branch-free loops that vectorize (the file
// is compiled with -fno-trapping-math, src/CMakeLists.txt), and x86's F16C for fp16.
#include "core/half.h"

#include <bit>

#include "core/cpu_clones.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TANDEM_HAVE_F16C_PATH 1
#endif

namespace tandem {
namespace {

// Note [fp16 rounding]: fp32 bits without the sign, f:
// - f >= 65520 (0x477FF000) rounds to infinity, and NaN (f > 0x7F800000) stays a quiet
//   NaN; the normal path below gives exactly that for 65520 <= f < 2^16, so only
//   f >= 2^16 (0x47800000) needs its own case;
// - f < 2^-14 (0x38800000), fp16's smallest normal, is a subnormal or zero: adding 0.5f
//   puts the value's multiples of 2^-24 (fp16's subnormal step) into the low mantissa
//   bits, rounded to nearest even by the FPU itself;
// - otherwise rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits
//   to nearest even: add 0xFFF plus the lowest kept bit, then shift (a carry into the
//   exponent is the correct rounding up).
inline std::uint16_t fp16_of(float value) {
  std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7FFFFFFFu;
  const std::uint32_t big = f > 0x7F800000u ? 0x7E00u : 0x7C00u;
  const std::uint32_t small =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(f) + 0.5f) - 0x3F000000u;
  const std::uint32_t normal = (f - ((127u - 15u) << 23) + 0xFFFu + ((f >> 13) & 1u)) >> 13;
  const std::uint32_t out = f >= 0x47800000u ? big : f < 0x38800000u ? small : normal;
  return static_cast<std::uint16_t>(out | sign);
}

inline float float_of_fp16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t rest = h & 0x7FFFu;
  // Subnormals (exponent 0): the mantissa times 2^-24, exact in fp32.
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(static_cast<float>(rest) * 0x1p-24f);
  const std::uint32_t normal = (rest << 13) + ((127u - 15u) << 23);
  const std::uint32_t special = 0x7F800000u | ((rest & 0x3FFu) << 13);  // inf, NaN
  const std::uint32_t out = rest >= 0x7C00u ? special : rest >= 0x0400u ? normal : subnormal;
  return std::bit_cast<float>(out | sign);
}

// Round to nearest even: add 0x7FFF plus the lowest kept bit. A NaN keeps a set mantissa
// bit so that it cannot round into infinity.
inline std::uint16_t bf16_of(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(nan ? (bits >> 16) | 0x40u : rounded >> 16);
}

inline float float_of_bf16(std::uint16_t v) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v) << 16);
}

#if defined(TANDEM_HAVE_F16C_PATH)
// Note [f16c]: x86's F16C instructions convert 8 values per instruction, rounding to
// nearest even as fp16_of does (the tests hold them to the same bits, NaN aside: the
// instruction keeps a NaN's payload); the portable loops above are what runs elsewhere.
// Every x86-64-v3 CPU has F16C; the check is made once.
bool has_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  }();
  return yes;
}

__attribute__((target("avx,f16c"))) void narrow_f16c(std::uint16_t* out, const float* in,
                                                     std::size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(in + i), s);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = fp16_of(in[i] * scale);
}

__attribute__((target("avx,f16c"))) void widen_f16c(float* out, const std::uint16_t* in,
                                                    std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = float_of_fp16(in[i]);
}

__attribute__((target("avx,f16c"))) void add_narrow_f16c(std::uint16_t* acc,
                                                         const std::uint16_t* in, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(acc + i),
        _mm256_cvtps_ph(_mm256_add_ps(a, b), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) acc[i] = fp16_of(float_of_fp16(acc[i]) + float_of_fp16(in[i]));
}
#endif

}  // namespace

std::uint16_t narrow(DataType type, float value) {
  return type == DataType::kBFloat16 ? bf16_of(value) : fp16_of(value);
}

float widen(DataType type, std::uint16_t value) {
  return type == DataType::kBFloat16 ? float_of_bf16(value) : float_of_fp16(value);
}

TANDEM_CPU_CLONES void narrow(DataType type, std::uint16_t* out, const float* in, std::size_t n,
                              float scale) {
  if (type == DataType::kBFloat16) {
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_of(in[i] * scale);
  } else {
#if defined(TANDEM_HAVE_F16C_PATH)
    if (has_f16c()) return narrow_f16c(out, in, n, scale);
#endif
    for (std::size_t i = 0; i < n; ++i) out[i] = fp16_of(in[i] * scale);
  }
}

TANDEM_CPU_CLONES void widen(DataType type, float* out, const std::uint16_t* in, std::size_t n) {
  if (type == DataType::kBFloat16) {
    for (std::size_t i = 0; i < n; ++i) out[i] = float_of_bf16(in[i]);
  } else {
#if defined(TANDEM_HAVE_F16C_PATH)
    if (has_f16c()) return widen_f16c(out, in, n);
#endif
    for (std::size_t i = 0; i < n; ++i) out[i] = float_of_fp16(in[i]);
  }
}

TANDEM_CPU_CLONES void add_narrow(DataType type, std::uint16_t* acc, const std::uint16_t* in,
                                  std::size_t n) {
  if (type == DataType::kBFloat16) {
    for (std::size_t i = 0; i < n; ++i)
      acc[i] = bf16_of(float_of_bf16(acc[i]) + float_of_bf16(in[i]));
  } else {
#if defined(TANDEM_HAVE_F16C_PATH)
    if (has_f16c()) return add_narrow_f16c(acc, in, n);
#endif
    for (std::size_t i = 0; i < n; ++i)
      acc[i] = fp16_of(float_of_fp16(acc[i]) + float_of_fp16(in[i]));
  }
}

}  // namespace tandem
