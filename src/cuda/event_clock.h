// CUDA events on the spans' steady clock (core/clock.h), for every part of tandem that
// times device work: compute spans (timeline/gpu/event_timer.h), collectives
// (comm/device), the kernel timer's events mode (timeline/gpu/kernel_timer.h).
//
// Note [event clock]: cudaEventElapsedTime gives the GPU time between two events of one
// device (float milliseconds, about 0.5 us resolution). An anchor event is recorded on an
// idle stream and waited for; the host clock is read just before the record and just
// after the wait, and the midpoint is taken as when the GPU passed the anchor (the two
// reads are microseconds apart on an idle stream). An event's host time is then
// anchor_host_ns + elapsed(anchor, event). Float milliseconds lose precision as the
// distance grows (0.25 ms after an hour), so owners re-anchor now and then: the compute
// timer every step, the communication thread once a second while it has nothing in
// flight.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

class EventClock {
 public:
  // On `device` (made current for the calling thread): a stream of its own and the
  // anchor event; anchors once. Throws RuntimeError when CUDA fails.
  explicit EventClock(int device);
  ~EventClock();
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;

  // Records a new anchor on `stream` (the clock's own when null) and waits for it; call
  // when that stream is idle. Not thread-safe: one owner thread.
  void reanchor(cudaStream_t stream = nullptr);
  std::int64_t anchored_at_ns() const { return anchor_host_ns_; }
  // The host time at which the GPU passed `event` (recorded with timing, and complete).
  std::int64_t to_host_ns(cudaEvent_t event) const;

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t anchor_ = nullptr;
  std::int64_t anchor_host_ns_ = 0;
};

}  // namespace tandem::cuda
