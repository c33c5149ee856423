// What the device backends (nccl, emulated) share: the concrete DeviceWork, a clock that
// puts CUDA events on the spans' steady clock, and the progress thread that completes
// host Works once their events fire.
//
// Note [event clock]: cudaEventElapsedTime gives the GPU time between two events of one
// device (float milliseconds, about 0.5 us resolution). An anchor event is recorded on a
// stream of its own that nothing else uses, synchronized, and the host clock read at
// once: anchor_host_ns is when the GPU passed the anchor, late by the synchronization's
// wake-up (a few microseconds). An event's host time is anchor_host_ns + elapsed(anchor,
// event). Float milliseconds lose precision as the distance grows (0.25 ms after an
// hour), so the progress thread re-anchors every second while it has nothing in flight.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "comm/device/device_comm.h"

namespace tandem {

// Throws RuntimeError "<call> failed: <name>: <description>" when status is not success.
void check_cuda_status(cudaError_t status, const char* call);

// See Note [event clock]. All methods but the constructor from one thread (the progress
// thread), or under the caller's own lock.
class EventClock {
 public:
  explicit EventClock(int device);
  ~EventClock();
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;

  // Records a new anchor and waits for it.
  void reanchor();
  std::int64_t anchored_at_ns() const { return anchor_host_ns_; }
  // The host steady-clock time at which the GPU passed `event` (recorded and complete).
  std::int64_t to_host_ns(cudaEvent_t event) const;

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t anchor_ = nullptr;
  std::int64_t anchor_host_ns_ = 0;
};

// A collective's host handle: the events that bracket it on the communication stream.
class CudaDeviceWork final : public DeviceWork {
 public:
  // Creates both events (timing enabled); throws RuntimeError.
  explicit CudaDeviceWork(OpInfo info);
  ~CudaDeviceWork() override;
  CudaDeviceWork(const CudaDeviceWork&) = delete;
  CudaDeviceWork& operator=(const CudaDeviceWork&) = delete;

  cudaEvent_t done_event() const override { return done_; }
  cudaEvent_t start_event() const { return start_; }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t done_ = nullptr;
};
using CudaDeviceWorkPtr = std::shared_ptr<CudaDeviceWork>;

// The progress thread of one device communicator. watch() hands it a Work whose start and
// done events are already enqueued; it polls the done events in issue order
// (cudaEventQuery), and for each fired one writes the comm span (kind, bytes, step, tag
// and name from OpInfo; start and end from the events) and finishes the Work. Besides, it
// asks `health` on every poll (nccl: ncclCommGetAsyncError); a non-empty answer is an
// asynchronous error that fails every pending Work. A Work not complete `timeout` after it
// was issued calls `on_timeout` once (nccl: ncclCommAbort) and fails every pending Work,
// the first with "rank R: <op> not complete after <elapsed> (timeout <t>)".
struct DeviceProgressOptions {
  int rank = 0;
  int device = 0;
  std::string backend;  // for messages: "nccl", "emulated"
  std::chrono::nanoseconds timeout{std::chrono::seconds(300)};
  std::function<std::string()> health{};  // "" while healthy
  std::function<void()> on_timeout{};     // called once, on the progress thread
};

class DeviceProgress {
 public:
  explicit DeviceProgress(DeviceProgressOptions options);
  // Waits for what is pending (each for the rest of its timeout), then stops.
  ~DeviceProgress();
  DeviceProgress(const DeviceProgress&) = delete;
  DeviceProgress& operator=(const DeviceProgress&) = delete;

  void watch(CudaDeviceWorkPtr work, RankRecorder* recorder);
  // Set once a timeout or asynchronous error happened: the communicator is unusable and
  // every later collective must fail at once with this message.
  std::string broken() const;

 private:
  struct Pending {
    CudaDeviceWorkPtr work;
    RankRecorder* recorder = nullptr;
    std::int64_t issued_ns = 0;
  };

  void run();
  // Completes what fired, in order; true if anything completed.
  bool poll_once();
  void fail_all(const std::string& first_message, bool timed_out);
  void complete(const Pending& p);

  const DeviceProgressOptions options_;
  EventClock clock_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stopping_ = false;
  std::string broken_;
  std::thread thread_;
};

}  // namespace tandem
