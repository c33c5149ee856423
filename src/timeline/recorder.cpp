// RankRecorder's out-of-line parts (setup and read-out) and Timeline::name_of.
#include "timeline/recorder.h"

#include <algorithm>

namespace tandem {

RankRecorder::RankRecorder(int rank, std::size_t capacity_per_lane, bool enabled)
    : rank_(rank), enabled_(enabled) {
  // A disabled recorder never stores anything, so it need not hold the memory either.
  if (!enabled_) return;
  for (SpanBuffer& buffer : lanes_) buffer.reserve(capacity_per_lane);
}

std::size_t RankRecorder::dropped() const {
  std::size_t total = 0;
  for (const SpanBuffer& buffer : lanes_) total += buffer.dropped();
  return total;
}

void RankRecorder::clear() {
  for (SpanBuffer& buffer : lanes_) buffer.clear();
}

std::vector<Span> RankRecorder::collect() const {
  std::size_t total = 0;
  for (const SpanBuffer& buffer : lanes_) total += buffer.size();
  std::vector<Span> spans;
  spans.reserve(total);
  for (const SpanBuffer& buffer : lanes_) spans.insert(spans.end(), buffer.begin(), buffer.end());
  // Stable, with (lane, end) as tie-breakers, so equal starts come out in a fixed order.
  std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.lane != b.lane) return a.lane < b.lane;
    return a.end_ns < b.end_ns;
  });
  return spans;
}

std::string_view Timeline::name_of(const Span& span) const {
  if (span.name != kNoName && names) {
    const std::string& name = names->name(span.name);
    if (!name.empty()) return name;
  }
  return to_string(span.kind);
}

}  // namespace tandem
