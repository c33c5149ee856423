// The step's loss on a device: each forward adds its batch's mean loss to a device
// scalar, and the scalar reaches the host once per step through pinned memory, so the
// host never waits for a loss inside a step. Shared by the CUDA mlp and transformer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "compute/cuda/kernels.h"
#include "cuda/check.h"
#include "cuda/resources.h"

namespace tandem::cuda {

class DeviceLossSum {
 public:
  // Zeroed on `stream`.
  explicit DeviceLossSum(cudaStream_t stream) { sum_.zero(stream); }

  void reset(cudaStream_t stream) { sum_.zero(stream); }
  // sum += mean of row_loss [rows] (accumulate_mean: double, fixed order).
  void add_mean(const float* row_loss, int rows, cudaStream_t stream) {
    accumulate_mean(sum_.data(), row_loss, rows, stream);
  }
  // Synchronizes the stream, then returns the sum.
  double read(cudaStream_t stream) const {
    double value = 0;
    sum_.download(std::span<double>(&value, 1), stream);
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
    return value;
  }
  // Copies the sum into pinned host memory on the stream (no wait); host() holds it once
  // the stream has passed this point.
  void enqueue_readback(cudaStream_t stream) {
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(host_.data(), sum_.data(), sizeof(double), cudaMemcpyDeviceToHost, stream));
  }
  double host() const { return *host_.data(); }

 private:
  DeviceBuffer<double> sum_{1};
  PinnedBuffer<double> host_{1};
};

}  // namespace tandem::cuda
