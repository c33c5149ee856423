// RAII owners of CUDA resources: device memory, streams and events. Each is movable, not
// copyable, and frees its resource in the destructor (errors there are ignored: a
// destructor must not throw, and a failed free during unwinding says nothing new).
// Every allocation happens before training starts; steps allocate nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "cuda/check.h"

namespace tandem::cuda {

// count elements of T in device memory of the current device; not initialized.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count > 0)
      TANDEM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

  // Host <-> device copies ordered on `stream`; the host side must stay alive until the
  // stream reaches the copy (pageable host memory makes cudaMemcpyAsync synchronous
  // with respect to the host for D2H, which the callers rely on only after a sync).
  void upload(std::span<const T> host, cudaStream_t stream, std::size_t offset = 0) {
    TANDEM_CHECK(offset + host.size() <= count_);
    if (host.empty()) return;
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(data_ + offset, host.data(), host.size_bytes(),
                                      cudaMemcpyHostToDevice, stream));
  }
  void download(std::span<T> host, cudaStream_t stream, std::size_t offset = 0) const {
    TANDEM_CHECK(offset + host.size() <= count_);
    if (host.empty()) return;
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(host.data(), data_ + offset, host.size_bytes(),
                                      cudaMemcpyDeviceToHost, stream));
  }
  void zero(cudaStream_t stream) {
    if (count_ > 0) TANDEM_CUDA_CHECK(cudaMemsetAsync(data_, 0, bytes(), stream));
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// A non-blocking stream (it does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream() { TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      if (stream_ != nullptr) cudaStreamDestroy(stream_);
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const { TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event; timing events can measure elapsed time, the others are cheaper and serve
// only to order streams.
class Event {
 public:
  enum class Timing : bool { kOff = false, kOn = true };
  explicit Event(Timing timing = Timing::kOff) {
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(
        &event_, timing == Timing::kOn ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      if (event_ != nullptr) cudaEventDestroy(event_);
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream) { TANDEM_CUDA_CHECK(cudaEventRecord(event_, stream)); }
  void synchronize() const { TANDEM_CUDA_CHECK(cudaEventSynchronize(event_)); }
  // Milliseconds from `start` to this event; both recorded with timing, both complete.
  float elapsed_ms_since(const Event& start) const {
    float ms = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// Page-locked host memory: device-to-host copies into it are truly asynchronous.
template <typename T>
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t count) : count_(count) {
    if (count > 0) {
      TANDEM_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)));
    }
  }
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// Makes `device` current for the calling thread (each rank thread drives one device).
inline void set_device(int device) { TANDEM_CUDA_CHECK(cudaSetDevice(device)); }

}  // namespace tandem::cuda

namespace tandem::cuda {

// CUDA devices this process sees (0 when there is no usable driver or device; the error
// is cleared so later calls do not report it again).
inline int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

// "" when a CUDA device is usable, else why not (for --device cuda's error line).
std::string unavailable_reason();

// The device's name, compute capability and memory, for reports: "NVIDIA H100 80GB HBM3
// (sm_90, 79.1 GiB)".
std::string describe_device(int device);

}  // namespace tandem::cuda
