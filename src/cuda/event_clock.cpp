// The event clock (event_clock.h).
#include "cuda/event_clock.h"

#include <cmath>

#include "core/clock.h"
#include "cuda/check.h"

namespace tandem::cuda {

EventClock::EventClock(int device) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (const cudaError_t status = cudaEventCreate(&anchor_); status != cudaSuccess) {
    cudaStreamDestroy(stream_);
    check_cuda_status(status, "cudaEventCreate (event clock)");
  }
  try {
    reanchor();
  } catch (...) {
    cudaEventDestroy(anchor_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

EventClock::~EventClock() {
  cudaEventDestroy(anchor_);
  cudaStreamDestroy(stream_);
}

void EventClock::reanchor(cudaStream_t stream) {
  const std::int64_t before = now_ns();
  TANDEM_CUDA_CHECK(cudaEventRecord(anchor_, stream != nullptr ? stream : stream_));
  TANDEM_CUDA_CHECK(cudaEventSynchronize(anchor_));
  const std::int64_t after = now_ns();
  anchor_host_ns_ = before + (after - before) / 2;
}

std::int64_t EventClock::to_host_ns(cudaEvent_t event) const {
  float ms = 0;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, anchor_, event));
  return anchor_host_ns_ + std::llround(static_cast<double>(ms) * 1e6);
}

}  // namespace tandem::cuda
