// Internal to the device backends: which CUDA device a rank uses, and leaving the
// caller's current device as it was.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace tandem {

// Visible CUDA devices; none (or no driver) is a usage error: the user asked for a GPU.
inline int visible_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count < 1) {
    (void)cudaGetLastError();
    throw UsageError(std::string("--device cuda: no usable CUDA device (cudaGetDeviceCount: ") +
                     (status == cudaSuccess ? "0 devices" : cudaGetErrorString(status)) + ")");
  }
  return count;
}

// The factories set devices while they build communicators; the caller's current device
// is put back when they return.
class CurrentDeviceRestorer {
 public:
  CurrentDeviceRestorer() { ok_ = cudaGetDevice(&device_) == cudaSuccess; }
  ~CurrentDeviceRestorer() {
    if (ok_) cudaSetDevice(device_);
  }
  CurrentDeviceRestorer(const CurrentDeviceRestorer&) = delete;
  CurrentDeviceRestorer& operator=(const CurrentDeviceRestorer&) = delete;

 private:
  int device_ = 0;
  bool ok_ = false;
};

}  // namespace tandem
