// The one error check for the CUDA runtime: a failing call throws RuntimeError naming the
// call and CUDA's description of the error, so the rank's thread fails with a message a
// user can act on instead of computing on garbage. Every CUDA part of tandem (compute,
// communication, timing) uses it.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace tandem {

[[noreturn]] inline void throw_cuda_error(const char* call, cudaError_t status, const char* file,
                                          int line) {
  throw RuntimeError(std::string(call) + " failed: " + cudaGetErrorName(status) + ": " +
                     cudaGetErrorString(status) + " (" + file + ":" + std::to_string(line) + ")");
}

// The function form, for calls whose name is built at run time.
inline void check_cuda_status(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw RuntimeError(std::string(call) + " failed: " + cudaGetErrorName(status) + ": " +
                       cudaGetErrorString(status));
  }
}

}  // namespace tandem

#define TANDEM_CUDA_CHECK(call)                                              \
  do {                                                                       \
    const cudaError_t tandem_status_ = (call);                               \
    if (tandem_status_ != cudaSuccess)                                       \
      ::tandem::throw_cuda_error(#call, tandem_status_, __FILE__, __LINE__); \
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
