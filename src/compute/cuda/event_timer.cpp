#include "compute/cuda/event_timer.h"

#include <algorithm>
#include <cmath>

#include "core/clock.h"

namespace tandem::cuda {

EventTimer::EventTimer(bool enabled) : enabled_(enabled) {}

void EventTimer::start_step(cudaStream_t stream) {
  if (!enabled_) return;
  TANDEM_CHECK(open_.empty());
  const std::int64_t before = now_ns();
  anchor_.record(stream);
  anchor_.synchronize();
  const std::int64_t after = now_ns();
  anchor_host_ns_ = before + (after - before) / 2;
  used_ = 0;
  pending_.clear();
}

std::size_t EventTimer::next_event(cudaStream_t stream) {
  if (used_ == events_.size()) events_.emplace_back(Event::Timing::kOn);  // first step only
  events_[used_].record(stream);
  return used_++;
}

void EventTimer::begin(cudaStream_t stream, Lane lane, SpanKind kind, int step, int tag,
                       double flops) {
  if (!enabled_) return;
  Pending p;
  p.span.lane = lane;
  p.span.kind = kind;
  p.span.step = step;
  p.span.tag = tag;
  p.span.flops = flops;
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

std::int64_t EventTimer::host_ns(std::size_t event) const {
  const double ms = events_[event].elapsed_ms_since(anchor_);
  return anchor_host_ns_ + static_cast<std::int64_t>(std::llround(ms * 1e6));
}

std::int64_t EventTimer::flush(RankRecorder& recorder) {
  if (!enabled_) return now_ns();
  TANDEM_CHECK(open_.empty());
  std::int64_t last = anchor_host_ns_;
  for (Pending& p : pending_) {
    TANDEM_CHECK(p.closed);
    p.span.start_ns = host_ns(p.begin_event);
    p.span.end_ns = std::max(p.span.start_ns, host_ns(p.end_event));
    last = std::max(last, p.span.end_ns);
    recorder.record(p.span);
  }
  pending_.clear();
  used_ = 0;
  return last;
}

}  // namespace tandem::cuda
