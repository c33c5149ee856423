// Sweeps over canonical interval sets; see intervals.h for the invariants.
#include "analysis/intervals.h"

#include <algorithm>

namespace tandem {

IntervalSet union_of(std::vector<Interval> intervals) {
  std::erase_if(intervals, [](const Interval& i) { return i.empty(); });
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
  IntervalSet out;
  out.reserve(intervals.size());
  for (const Interval& i : intervals) {
    // <= merges touching intervals too, which keeps the set canonical.
    if (!out.empty() && i.start_ns <= out.back().end_ns) {
      out.back().end_ns = std::max(out.back().end_ns, i.end_ns);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

std::int64_t total_length(const IntervalSet& set) {
  std::int64_t total = 0;
  for (const Interval& i : set) total += i.length();
  return total;
}

namespace {

// Calls emit(start, end) for every non-empty piece of a ∩ b, in order. Both sets are
// sorted and disjoint, so advancing whichever interval ends first visits each pair that
// can intersect exactly once.
template <typename Emit>
void sweep_intersection(const IntervalSet& a, const IntervalSet& b, Emit emit) {
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t lo = std::max(a[i].start_ns, b[j].start_ns);
    const std::int64_t hi = std::min(a[i].end_ns, b[j].end_ns);
    if (lo < hi) emit(lo, hi);
    if (a[i].end_ns < b[j].end_ns) {
      ++i;
    } else {
      ++j;
    }
  }
}

}  // namespace

IntervalSet intersect(const IntervalSet& a, const IntervalSet& b) {
  IntervalSet out;
  // The pieces come out canonical without merging: each ends where an input interval
  // ends, and canonical inputs leave a non-empty gap after every interval.
  sweep_intersection(a, b, [&](std::int64_t lo, std::int64_t hi) { out.push_back({lo, hi}); });
  return out;
}

std::int64_t intersection_length(const IntervalSet& a, const IntervalSet& b) {
  std::int64_t total = 0;
  sweep_intersection(a, b, [&](std::int64_t lo, std::int64_t hi) { total += hi - lo; });
  return total;
}

IntervalSet unite(const IntervalSet& a, const IntervalSet& b) {
  std::vector<Interval> all;
  all.reserve(a.size() + b.size());
  all.insert(all.end(), a.begin(), a.end());
  all.insert(all.end(), b.begin(), b.end());
  return union_of(std::move(all));
}

IntervalSet subtract(const IntervalSet& a, const IntervalSet& b) {
  IntervalSet out;
  std::size_t j = 0;
  for (const Interval& i : a) {
    std::int64_t cursor = i.start_ns;
    // Skip the parts of b that end before this interval starts; they cannot matter for
    // this or any later interval of a.
    while (j < b.size() && b[j].end_ns <= cursor) ++j;
    std::size_t k = j;
    while (k < b.size() && b[k].start_ns < i.end_ns) {
      if (b[k].start_ns > cursor) out.push_back({cursor, b[k].start_ns});
      cursor = std::max(cursor, b[k].end_ns);
      ++k;
    }
    if (cursor < i.end_ns) out.push_back({cursor, i.end_ns});
  }
  return out;
}

IntervalSet clip(const IntervalSet& a, Interval window) {
  if (window.empty()) return {};
  return intersect(a, IntervalSet{window});
}

std::int64_t covered_length(const IntervalSet& a, Interval window) {
  auto it = std::upper_bound(a.begin(), a.end(), window.start_ns,
                             [](std::int64_t t, const Interval& i) { return t < i.end_ns; });
  std::int64_t sum = 0;
  for (; it != a.end() && it->start_ns < window.end_ns; ++it) {
    sum += std::min(window.end_ns, it->end_ns) - std::max(window.start_ns, it->start_ns);
  }
  return sum;
}

}  // namespace tandem
