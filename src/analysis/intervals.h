// Interval arithmetic on half-open [start_ns, end_ns) nanosecond intervals.
//
// The overlap metrics (T_ovl, exposed communication, "other" time) are lengths of unions
// and intersections of span sets; this unit computes them with sort + linear sweeps.
// An IntervalSet is canonical: sorted by start, every interval non-empty, and no two
// intervals overlapping or touching ([0,5) and [5,9) are stored as [0,9)). Every function
// returning an IntervalSet returns a canonical one; functions taking IntervalSets
// require canonical inputs (build them with union_of).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

struct Interval {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;

  // Inverted intervals (end < start) count as empty.
  std::int64_t length() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
  bool empty() const { return end_ns <= start_ns; }
  friend bool operator==(const Interval&, const Interval&) = default;
};

using IntervalSet = std::vector<Interval>;

// The union of any intervals, in canonical form: empty and inverted ones are dropped,
// overlapping, nested and touching ones merged.
IntervalSet union_of(std::vector<Interval> intervals);
// Total length of a canonical set.
std::int64_t total_length(const IntervalSet& set);
// a ∩ b and its length (the length without building the set).
IntervalSet intersect(const IntervalSet& a, const IntervalSet& b);
std::int64_t intersection_length(const IntervalSet& a, const IntervalSet& b);
// a ∪ b of two canonical sets.
IntervalSet unite(const IntervalSet& a, const IntervalSet& b);
// a \ b: the parts of a not covered by b.
IntervalSet subtract(const IntervalSet& a, const IntervalSet& b);
// a ∩ window.
IntervalSet clip(const IntervalSet& a, Interval window);
// len(a ∩ window) in O(log |a| + pieces): for many windows against one large set.
std::int64_t covered_length(const IntervalSet& a, Interval window);

}  // namespace tandem
