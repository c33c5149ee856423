// Per-rank span recording off the hot path's way: preallocated storage, no lock,
// no allocation while recording.
//
// Writers: compute and wait spans come from the training thread; comm spans from the
// communication thread of each of the rank's communicators, which may be several (a
// communicator and those split from it, Communicator::split). So a lane buffer is a
// plain array whose slots writers reserve with one atomic increment; each slot has one
// writer. Reading happens after the writers are joined or synchronized with
// (Work::wait), which gives the happens-before edge.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/clock.h"
#include "timeline/span.h"

namespace tandem {

class SpanBuffer {
 public:
  void reserve(std::size_t capacity) { spans_.resize(capacity); }
  // Records the span, or counts it as dropped when the buffer is full. Any thread.
  void push(const Span& span) noexcept {
    const std::size_t slot = pushed_.fetch_add(1, std::memory_order_relaxed);
    if (slot < spans_.size()) spans_[slot] = span;
  }
  std::size_t size() const { return std::min(pushed(), spans_.size()); }
  std::size_t dropped() const { return pushed() - size(); }
  const Span* begin() const { return spans_.data(); }
  const Span* end() const { return spans_.data() + size(); }
  void clear() { pushed_.store(0, std::memory_order_relaxed); }

 private:
  std::size_t pushed() const { return pushed_.load(std::memory_order_relaxed); }

  std::vector<Span> spans_;
  std::atomic<std::size_t> pushed_{0};  // spans offered, kept or dropped
};

class RankRecorder {
 public:
  // capacity_per_lane spans are allocated up front per lane; enabled=false makes
  // record() a no-op (used to measure the timeline's own cost).
  RankRecorder(int rank, std::size_t capacity_per_lane, bool enabled = true);
  // What that constructor allocates for its spans (memory checks count it up front).
  static double bytes(std::size_t capacity_per_lane) {
    return static_cast<double>(kLaneCount) * static_cast<double>(capacity_per_lane) * sizeof(Span);
  }

  int rank() const { return rank_; }
  bool enabled() const { return enabled_; }

  void record(Span span) noexcept {
    if (!enabled_) return;
    span.rank = rank_;
    if (span.lane != Lane::kComm && span.micro < 0) span.micro = micro_;
    lanes_[static_cast<int>(span.lane)].push(span);
  }
  // The micro-batch that compute and wait spans recorded from now on belong to (-1:
  // none): set by the training thread, which alone records those lanes. A device model
  // records its spans later, at the step's end: its timer reads micro() as each span
  // begins (timeline/gpu/event_timer.h).
  void set_micro(int micro) noexcept { micro_ = micro; }
  int micro() const noexcept { return micro_; }

  const SpanBuffer& lane(Lane lane) const { return lanes_[static_cast<int>(lane)]; }
  std::size_t dropped() const;
  void clear();
  // All spans of all lanes, sorted by start time.
  std::vector<Span> collect() const;

 private:
  int rank_;
  bool enabled_;
  int micro_ = -1;  // training thread only
  std::array<SpanBuffer, kLaneCount> lanes_;
};

// RAII: records [construction, destruction) as one span on the given recorder.
class ScopedSpan {
 public:
  ScopedSpan(RankRecorder& recorder, Lane lane, SpanKind kind, std::int32_t step,
             std::int32_t tag = -1, NameId name = kNoName, double flops = 0,
             std::int64_t bytes = 0) noexcept
      : recorder_(recorder) {
    span_.lane = lane;
    span_.kind = kind;
    span_.step = step;
    span_.tag = tag;
    span_.name = name;
    span_.flops = flops;
    span_.bytes = bytes;
    span_.start_ns = now_ns();
  }
  ~ScopedSpan() {
    span_.end_ns = now_ns();
    recorder_.record(span_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  RankRecorder& recorder_;
  Span span_;
};

// What a run produced: every rank's spans plus the names they refer to.
struct Timeline {
  std::shared_ptr<NameTable> names = std::make_shared<NameTable>();
  std::vector<Span> spans;   // any order; analysis sorts what it needs
  int ranks = 0;

  std::string_view name_of(const Span& span) const;  // the interned name, else the kind's
};

}  // namespace tandem
