// Per-rank span recording off the hot path's way: preallocated storage, no lock,
// no allocation while recording.
//
// Each lane has exactly one writer thread (compute and wait: the training thread;
// comm: the communication thread), so a lane buffer is a plain array and a count.
// Reading happens after the writers are joined or synchronized with (Work::wait),
// which gives the happens-before edge.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/clock.h"
#include "timeline/span.h"

namespace tandem {

class SpanBuffer {
 public:
  void reserve(std::size_t capacity) { spans_.resize(capacity); }
  // Records the span, or counts it as dropped when the buffer is full.
  void push(const Span& span) noexcept {
    if (size_ < spans_.size()) {
      spans_[size_++] = span;
    } else {
      ++dropped_;
    }
  }
  std::size_t size() const { return size_; }
  std::size_t dropped() const { return dropped_; }
  const Span* begin() const { return spans_.data(); }
  const Span* end() const { return spans_.data() + size_; }
  void clear() { size_ = dropped_ = 0; }

 private:
  std::vector<Span> spans_;
  std::size_t size_ = 0;
  std::size_t dropped_ = 0;
};

class RankRecorder {
 public:
  // capacity_per_lane spans are allocated up front per lane; enabled=false makes
  // record() a no-op (used to measure the timeline's own cost).
  RankRecorder(int rank, std::size_t capacity_per_lane, bool enabled = true);

  int rank() const { return rank_; }
  bool enabled() const { return enabled_; }

  void record(Span span) noexcept {
    if (!enabled_) return;
    span.rank = rank_;
    lanes_[static_cast<int>(span.lane)].push(span);
  }

  const SpanBuffer& lane(Lane lane) const { return lanes_[static_cast<int>(lane)]; }
  std::size_t dropped() const;
  void clear();
  // All spans of all lanes, sorted by start time.
  std::vector<Span> collect() const;

 private:
  int rank_;
  bool enabled_;
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
