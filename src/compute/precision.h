// Where a training run computes and in which precision: plain enums that the CPU-only
// build also knows, so flags and reports need no CUDA headers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace tandem {

enum class Device : std::uint8_t { kCpu, kCuda };

// GEMM precision. Master weights, gradients and every elementwise kernel stay fp32;
// tf32 runs fp32 GEMMs on tensor cores (10-bit mantissa inputs), fp16/bf16 feed the GEMMs
// cast copies of their inputs and accumulate in fp32.
enum class Precision : std::uint8_t { kFp32, kTf32, kFp16, kBf16 };

// fp16 and bf16: the GEMMs read 16-bit cast copies of their inputs.
inline bool casts_gemm_inputs(Precision precision) {
  return precision == Precision::kFp16 || precision == Precision::kBf16;
}

inline std::string_view to_string(Device device) {
  return device == Device::kCuda ? "cuda" : "cpu";
}

inline std::string_view to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

// Throw UsageError on unknown names (the caller prefixes the flag).
inline Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::kCpu;
  if (text == "cuda") return Device::kCuda;
  throw UsageError("unknown device '" + std::string(text) + "' (expected cpu or cuda)");
}

inline Precision parse_precision(std::string_view text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "tf32") return Precision::kTf32;
  if (text == "fp16") return Precision::kFp16;
  if (text == "bf16") return Precision::kBf16;
  throw UsageError("unknown precision '" + std::string(text) +
                   "' (expected fp32, tf32, fp16 or bf16)");
}

}  // namespace tandem
