// Compute spans from CUDA events (event_timer.h).
#include "timeline/gpu/event_timer.h"

#include <algorithm>
#include <cmath>

#include "core/clock.h"

namespace tandem::cuda {

EventTimer::EventTimer(int device, bool enabled, const RankRecorder* labels)
    : enabled_(enabled), labels_(labels), clock_(device) {}

void EventTimer::start_step(cudaStream_t stream) {
  if (!enabled_) return;
  TANDEM_CHECK(open_.empty());
  clock_.reanchor(stream);
  used_ = 0;
  pending_.clear();
}

std::size_t EventTimer::next_event(cudaStream_t stream) {
  if (used_ == events_.size()) events_.emplace_back(Event::Timing::kOn);  // first step only
  events_[used_].record(stream);
  return used_++;
}

void EventTimer::begin(cudaStream_t stream, Lane lane, SpanKind kind, int step, int tag,
                       double flops, NameId name) {
  if (!enabled_) return;
  Pending p;
  p.span.lane = lane;
  p.span.kind = kind;
  p.span.step = step;
  p.span.tag = tag;
  p.span.flops = flops;
  p.span.name = name;
  if (labels_ != nullptr && lane != Lane::kComm) p.span.micro = labels_->micro();
  p.begin_event = next_event(stream);
  open_.push_back(pending_.size());
  pending_.push_back(p);
}

void EventTimer::end(cudaStream_t stream) {
  if (!enabled_) return;
  TANDEM_CHECK(!open_.empty());
  Pending& p = pending_[open_.back()];
  open_.pop_back();
  p.end_event = next_event(stream);
  p.closed = true;
}

std::int64_t EventTimer::flush(RankRecorder& recorder) {
  if (!enabled_) return now_ns();
  TANDEM_CHECK(open_.empty());
  std::int64_t last = clock_.anchored_at_ns();
  for (Pending& p : pending_) {
    TANDEM_CHECK(p.closed);
    p.span.start_ns = clock_.to_host_ns(events_[p.begin_event].get());
    p.span.end_ns = std::max(p.span.start_ns, clock_.to_host_ns(events_[p.end_event].get()));
    last = std::max(last, p.span.end_ns);
    recorder.record(p.span);
  }
  pending_.clear();
  used_ = 0;
  return last;
}

}  // namespace tandem::cuda
