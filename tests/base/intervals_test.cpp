// Interval arithmetic on hand-made sets: nested, touching, disjoint, empty.
#include "analysis/intervals.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(Intervals, UnionMergesNestedOverlappingAndTouching) {
  const IntervalSet u = union_of({{50, 60}, {0, 10}, {2, 5}, {10, 20}, {15, 30}, {40, 45}});
  EXPECT_EQ(u, (IntervalSet{{0, 30}, {40, 45}, {50, 60}}));
  EXPECT_EQ(total_length(u), 30 + 5 + 10);
}

TEST(Intervals, UnionDropsEmptyAndInvertedIntervals) {
  EXPECT_TRUE(union_of({}).empty());
  EXPECT_TRUE(union_of({{5, 5}, {9, 3}}).empty());
  // A zero-length interval inside a gap must not bridge it.
  EXPECT_EQ(union_of({{0, 10}, {15, 15}, {20, 30}}), (IntervalSet{{0, 10}, {20, 30}}));
  EXPECT_EQ(total_length(union_of({{7, 7}})), 0);
}

TEST(Intervals, IntersectionOfDisjointTouchingAndNested) {
  const IntervalSet a = union_of({{0, 10}, {20, 30}});
  EXPECT_EQ(intersection_length(a, union_of({{10, 20}})), 0);          // touching only
  EXPECT_EQ(intersection_length(a, union_of({{40, 50}})), 0);          // disjoint
  EXPECT_EQ(intersect(a, union_of({{2, 4}})), (IntervalSet{{2, 4}}));  // nested
  const IntervalSet b = union_of({{5, 25}, {28, 100}});
  EXPECT_EQ(intersect(a, b), (IntervalSet{{5, 10}, {20, 25}, {28, 30}}));
  EXPECT_EQ(intersection_length(a, b), 5 + 5 + 2);
  EXPECT_EQ(intersection_length(b, a), intersection_length(a, b));
  EXPECT_EQ(intersection_length(a, {}), 0);
}

TEST(Intervals, OneLongIntervalAgainstManyShortOnes) {
  const IntervalSet longer = union_of({{0, 1000}});
  const IntervalSet shorts = union_of({{-10, 5}, {100, 200}, {300, 301}, {999, 2000}});
  EXPECT_EQ(intersection_length(longer, shorts), 5 + 100 + 1 + 1);
  EXPECT_EQ(intersection_length(shorts, longer), 5 + 100 + 1 + 1);
}

TEST(Intervals, Subtract) {
  const IntervalSet a = union_of({{0, 100}, {200, 300}});
  EXPECT_EQ(subtract(a, {}), a);
  EXPECT_TRUE(subtract(a, union_of({{-5, 400}})).empty());
  EXPECT_EQ(subtract(a, union_of({{10, 20}, {50, 250}, {290, 310}})),
            (IntervalSet{{0, 10}, {20, 50}, {250, 290}}));
  // Touching edges remove nothing.
  EXPECT_EQ(subtract(a, union_of({{100, 200}})), a);
  EXPECT_EQ(subtract(a, union_of({{0, 100}})), (IntervalSet{{200, 300}}));
}

TEST(Intervals, UniteAndClip) {
  const IntervalSet a = union_of({{0, 10}, {30, 40}});
  const IntervalSet b = union_of({{10, 15}, {35, 50}});
  EXPECT_EQ(unite(a, b), (IntervalSet{{0, 15}, {30, 50}}));
  EXPECT_EQ(clip(a, {5, 35}), (IntervalSet{{5, 10}, {30, 35}}));
  EXPECT_TRUE(clip(a, {20, 20}).empty());
}

TEST(Intervals, InclusionExclusionHoldsOnAPseudoRandomSet) {
  // |A ∪ B| = |A| + |B| − |A ∩ B| and |A \ B| = |A| − |A ∩ B|: checks the sweeps
  // against each other on many irregular intervals.
  std::vector<Interval> ra, rb;
  std::uint64_t x = 12345;
  auto next = [&] { return static_cast<std::int64_t>((x = x * 6364136223846793005ULL + 1) >> 40); };
  for (int i = 0; i < 300; ++i) {
    const std::int64_t s = next() % 10000;
    ra.push_back({s, s + next() % 60});
    const std::int64_t t = next() % 10000;
    rb.push_back({t, t + next() % 90});
  }
  const IntervalSet a = union_of(ra), b = union_of(rb);
  const std::int64_t inter = intersection_length(a, b);
  EXPECT_EQ(total_length(intersect(a, b)), inter);
  EXPECT_EQ(total_length(unite(a, b)), total_length(a) + total_length(b) - inter);
  EXPECT_EQ(total_length(subtract(a, b)), total_length(a) - inter);
  EXPECT_EQ(intersection_length(subtract(a, b), b), 0);
  // Brute force over unit cells.
  std::int64_t brute = 0;
  for (std::int64_t t = 0; t < 10100; ++t) {
    auto covers = [t](const IntervalSet& s) {
      for (const Interval& i : s)
        if (i.start_ns <= t && t < i.end_ns) return true;
      return false;
    };
    brute += covers(a) && covers(b);
  }
  EXPECT_EQ(inter, brute);
}

}  // namespace
}  // namespace tandem
