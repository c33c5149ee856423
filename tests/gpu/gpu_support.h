// Shared setup of the GPU tests: the skip that every test starts with, host<->device
// helpers, and the comparison metrics against the CPU engine.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <span>
#include <vector>

#include "cuda/resources.h"
#include "compute/precision.h"
#include "model/rng.h"

// Every GPU test starts with this: without a usable device the test reports SKIPPED with
// the reason, never a failure (CI machines and laptops have no GPU).
#define TANDEM_SKIP_WITHOUT_GPU()                                                         \
  do {                                                                                    \
    int tandem_devices_ = 0;                                                              \
    const cudaError_t tandem_status_ = cudaGetDeviceCount(&tandem_devices_);              \
    if (tandem_status_ != cudaSuccess || tandem_devices_ == 0) {                          \
      cudaGetLastError();                                                                 \
      GTEST_SKIP() << "no CUDA device ("                                                  \
                   << (tandem_status_ != cudaSuccess ? cudaGetErrorString(tandem_status_) \
                                                     : "cudaGetDeviceCount returned 0")   \
                   << "): GPU test not run";                                              \
    }                                                                                     \
  } while (0)

namespace tandem {
// Test names and failure messages say "bf16", not "1-byte object <03>".
inline void PrintTo(Precision precision, std::ostream* os) { *os << to_string(precision); }
}  // namespace tandem

namespace tandem::testing {

template <typename T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& host, cudaStream_t stream) {
  cuda::DeviceBuffer<T> buffer(host.size());
  buffer.upload(host, stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return buffer;
}

template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& buffer, cudaStream_t stream) {
  std::vector<T> host(buffer.size());
  buffer.download(host, stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  detail::SplitMix64 rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(rng.uniform(-scale, scale));
  return out;
}

inline std::vector<std::int32_t> random_labels(int rows, int classes, std::uint64_t seed) {
  detail::SplitMix64 rng(seed);
  std::vector<std::int32_t> out(rows);
  for (auto& label : out) label = static_cast<std::int32_t>(rng.next() % classes);
  return out;
}

// Largest |got - want| relative to the largest |want|: the scale-aware elementwise check.
inline double max_rel_diff(std::span<const float> got, std::span<const float> want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// ||got - want|| / ||want||: the check for whole-model gradients, where a ReLU whose
// input sits at the rounding boundary may flip a few elements in reduced precision.
inline double l2_rel_diff(std::span<const float> got, std::span<const float> want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// Agreement with the fp32 CPU engine each GEMM precision is held to.
inline double tolerance(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return 1e-4;
    case Precision::kTf32:
      return 1e-2;
    case Precision::kFp16:
    case Precision::kBf16:
      return 3e-2;
  }
  return 0;
}

inline constexpr Precision kAllPrecisions[] = {Precision::kFp32, Precision::kTf32, Precision::kFp16,
                                               Precision::kBf16};

}  // namespace tandem::testing
