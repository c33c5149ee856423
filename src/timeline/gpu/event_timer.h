// Compute spans timed by CUDA events, placed on the host's steady clock (core/clock.h) so
// they line up with the communicator's comm spans and the step records.
//
// At the start of each step the timer re-anchors its event clock (cuda/event_clock.h) on
// the idle stream. begin()/end() record a pair of timing events around the work they
// enclose; flush(), after the stream has passed them, turns each pair into a Span on the
// host clock. Timing source in outputs: "cuda-events".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <vector>

#include "cuda/event_clock.h"
#include "cuda/resources.h"
#include "timeline/recorder.h"

namespace tandem::cuda {

class EventTimer {
 public:
  // On `device`; enabled=false: every call is a no-op (the --no-timeline run records
  // nothing). `labels`, where given, is the recorder whose current micro-batch
  // (RankRecorder::micro) a compute span takes when it begins: the spans are recorded
  // at the step's end, when the micro-batch they belong to has long passed.
  explicit EventTimer(int device, bool enabled = true, const RankRecorder* labels = nullptr);

  bool enabled() const { return enabled_; }
  // Host-synchronizes on the anchor: call when the stream is idle (after the previous
  // step's synchronization), so the wait is only the anchor's own latency.
  void start_step(cudaStream_t stream);
  // Opens a span on `stream` (events are created on first use and reused every step).
  // name: a fixed NameId (model/model_ops.h's sub-operations), kNoName for the kind's.
  void begin(cudaStream_t stream, Lane lane, SpanKind kind, int step, int tag = -1,
             double flops = 0, NameId name = kNoName);
  // Closes the most recently opened span that is still open.
  void end(cudaStream_t stream);
  // Once the stream has passed every event of this step (after a synchronization):
  // records the spans into `recorder`, forgets them, and returns the latest end time
  // (the anchor's host time when there were none).
  std::int64_t flush(RankRecorder& recorder);
  // The anchor's host time for the current step.
  std::int64_t anchor_ns() const { return clock_.anchored_at_ns(); }

 private:
  struct Pending {
    Span span;
    std::size_t begin_event = 0;
    std::size_t end_event = 0;
    bool closed = false;
  };
  std::size_t next_event(cudaStream_t stream);

  bool enabled_;
  const RankRecorder* labels_;
  EventClock clock_;
  std::vector<Event> events_;
  std::size_t used_ = 0;  // events recorded this step
  std::vector<Pending> pending_;
  std::vector<std::size_t> open_;  // indices into pending_, innermost last
};

// A compute span around the work enqueued in a scope, always closed, also when an enqueue
// throws (the run ends then anyway). timer may be null (nothing recorded).
class TimedSection {
 public:
  TimedSection(EventTimer* timer, cudaStream_t stream, SpanKind kind, int step, int tag,
               double flops, NameId name = kNoName)
      : timer_(timer), stream_(stream) {
    if (timer_ != nullptr) timer_->begin(stream, Lane::kCompute, kind, step, tag, flops, name);
  }
  ~TimedSection() noexcept(false) {
    if (timer_ != nullptr && std::uncaught_exceptions() == 0) timer_->end(stream_);
  }
  TimedSection(const TimedSection&) = delete;
  TimedSection& operator=(const TimedSection&) = delete;

 private:
  EventTimer* timer_;
  cudaStream_t stream_;
};

}  // namespace tandem::cuda
