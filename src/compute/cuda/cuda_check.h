// Error checks for the CUDA runtime and cuBLAS: a failing call throws RuntimeError naming
// the call and the library's description of the error, so the rank's thread fails with a
// message a user can act on instead of computing on garbage.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace tandem {

[[noreturn]] inline void throw_cuda_error(const char* call, cudaError_t status, const char* file,
                                          int line) {
  throw RuntimeError(std::string(call) + " failed: " + cudaGetErrorName(status) + ": " +
                     cudaGetErrorString(status) + " (" + file + ":" + std::to_string(line) + ")");
}

[[noreturn]] inline void throw_cublas_error(const char* call, cublasStatus_t status,
                                            const char* file, int line) {
  throw RuntimeError(std::string(call) + " failed: " + cublasGetStatusName(status) + ": " +
                     cublasGetStatusString(status) + " (" + file + ":" + std::to_string(line) +
                     ")");
}

}  // namespace tandem

#define TANDEM_CUDA_CHECK(call)                                              \
  do {                                                                       \
    const cudaError_t tandem_status_ = (call);                               \
    if (tandem_status_ != cudaSuccess)                                       \
      ::tandem::throw_cuda_error(#call, tandem_status_, __FILE__, __LINE__); \
  } while (0)

#define TANDEM_CUBLAS_CHECK(call)                                              \
  do {                                                                         \
    const cublasStatus_t tandem_status_ = (call);                              \
    if (tandem_status_ != CUBLAS_STATUS_SUCCESS)                               \
      ::tandem::throw_cublas_error(#call, tandem_status_, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define TANDEM_CUDA_CHECK_LAUNCH(kernel_name) \
  ::tandem::check_launch(kernel_name, __FILE__, __LINE__)

namespace tandem {
inline void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw_cuda_error((std::string("launch of ") + kernel).c_str(), status, file, line);
  }
}
}  // namespace tandem
