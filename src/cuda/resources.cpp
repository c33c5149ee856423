// Device queries for reports and error lines (resources.h).
#include "cuda/resources.h"

#include <cstdio>

namespace tandem::cuda {

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls do not report it again
    return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(status) +
           ": " + cudaGetErrorString(status) + ")";
  }
  if (count == 0) return "no CUDA device found (cudaGetDeviceCount returned 0)";
  return "";
}

std::string describe_device(int device) {
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB",
                static_cast<double>(prop.totalGlobalMem) / static_cast<double>(1ull << 30));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ", " + memory + ")";
}

}  // namespace tandem::cuda
