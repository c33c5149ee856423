// Span names, NameTable, RankRecorder and Timeline::name_of.
#include "timeline/span.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

TEST(SpanNames, EveryLaneAndKindRoundTrips) {
  const std::vector<std::string> lanes = {"compute", "comm", "wait", "idle"};
  for (int i = 0; i < kLaneCount; ++i) {
    EXPECT_EQ(to_string(static_cast<Lane>(i)), lanes[i]);
    EXPECT_EQ(parse_lane(lanes[i]), static_cast<Lane>(i));
  }
  const std::vector<std::string> kinds = {
      "forward", "backward", "optimizer", "allreduce", "reduce_scatter", "allgather", "broadcast",
      "barrier", "send",     "recv",      "wait",      "kernel",         "memory",    "other"};
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(to_string(static_cast<SpanKind>(i)), kinds[i]);
    EXPECT_EQ(parse_span_kind(kinds[i]), static_cast<SpanKind>(i));
  }
}

TEST(SpanNames, UnknownNamesThrowUsageErrorListingChoices) {
  try {
    parse_span_kind("Allreduce");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'Allreduce'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("reduce_scatter"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_lane(""), UsageError);
  EXPECT_THROW(parse_lane("gpu"), UsageError);
}

TEST(NameTable, InternsOnceAndReservesIdZeroForEmpty) {
  NameTable table;
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.name(kNoName), "");
  EXPECT_EQ(table.intern(""), kNoName);
  const NameId a = table.intern("layer0.weight");
  const NameId b = table.intern("layer1.weight");
  EXPECT_NE(a, kNoName);
  EXPECT_NE(a, b);
  EXPECT_EQ(table.intern("layer0.weight"), a);
  EXPECT_EQ(table.name(a), "layer0.weight");
  EXPECT_EQ(table.name(b), "layer1.weight");
  EXPECT_EQ(table.size(), 3u);
}

// prefix + i, built by appending: GCC 12 warns (-Wrestrict, a false positive) on
// "literal" + std::to_string(i) at -O3.
std::string numbered(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

TEST(NameTable, ReferencesStayValidWhileTheTableGrows) {
  NameTable table;
  const NameId first = table.intern("first");
  const std::string& ref = table.name(first);
  for (int i = 0; i < 10000; ++i) table.intern(numbered("name", i));
  EXPECT_EQ(ref, "first");
  EXPECT_EQ(&ref, &table.name(first));
}

TEST(NameTable, ConcurrentInternAgreesOnIds) {
  NameTable table;
  constexpr int kThreads = 4;
  constexpr int kNames = 500;
  std::vector<std::vector<NameId>> ids(kThreads, std::vector<NameId>(kNames));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kNames; ++i) {
        ids[t][i] = table.intern(numbered("n", i));
        // Reading while others intern must be safe too.
        EXPECT_EQ(table.name(ids[t][i]), numbered("n", i));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(table.size(), static_cast<std::size_t>(kNames) + 1);
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(ids[t], ids[0]);
}

Span make_span(Lane lane, SpanKind kind, std::int64_t start, std::int64_t end) {
  Span s;
  s.lane = lane;
  s.kind = kind;
  s.start_ns = start;
  s.end_ns = end;
  s.step = 0;
  return s;
}

TEST(RankRecorder, DropsAndCountsSpansBeyondCapacity) {
  RankRecorder rec(3, 2);
  for (int i = 0; i < 5; ++i) {
    rec.record(make_span(Lane::kCompute, SpanKind::kBackward, i * 10, i * 10 + 5));
  }
  rec.record(make_span(Lane::kComm, SpanKind::kAllreduce, 0, 1));
  EXPECT_EQ(rec.lane(Lane::kCompute).size(), 2u);
  EXPECT_EQ(rec.lane(Lane::kCompute).dropped(), 3u);
  EXPECT_EQ(rec.lane(Lane::kComm).size(), 1u);
  EXPECT_EQ(rec.dropped(), 3u);
  // The first spans are kept, not the last.
  EXPECT_EQ(rec.collect().back().start_ns, 10);
  rec.clear();
  EXPECT_EQ(rec.dropped(), 0u);
  EXPECT_TRUE(rec.collect().empty());
  rec.record(make_span(Lane::kWait, SpanKind::kWait, 7, 9));
  EXPECT_EQ(rec.collect().size(), 1u);
}

TEST(RankRecorder, CollectMergesLanesSortedByStartAndStampsRank) {
  RankRecorder rec(5, 8);
  rec.record(make_span(Lane::kCompute, SpanKind::kForward, 0, 100));
  rec.record(make_span(Lane::kCompute, SpanKind::kBackward, 100, 300));
  rec.record(make_span(Lane::kComm, SpanKind::kAllreduce, 150, 400));
  rec.record(make_span(Lane::kComm, SpanKind::kAllreduce, 50, 120));
  rec.record(make_span(Lane::kWait, SpanKind::kWait, 300, 400));
  Span other_rank = make_span(Lane::kCompute, SpanKind::kOptimizer, 400, 450);
  other_rank.rank = 9;  // the recorder's rank wins
  rec.record(other_rank);
  const std::vector<Span> spans = rec.collect();
  const std::vector<std::int64_t> starts = {0, 50, 100, 150, 300, 400};
  ASSERT_EQ(spans.size(), starts.size());
  for (std::size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(spans[i].start_ns, starts[i]) << i;
    EXPECT_EQ(spans[i].rank, 5) << i;
  }
  EXPECT_EQ(spans[1].lane, Lane::kComm);
  EXPECT_EQ(spans[4].lane, Lane::kWait);
}

// A communicator and one split from it record on one comm lane from two threads: every
// span lands in its own slot, and what exceeds the capacity is counted, not lost.
TEST(RankRecorder, SeveralWritersOfOneLaneKeepEverySpan) {
  constexpr int kWriters = 4;
  constexpr int kPerWriter = 1000;
  RankRecorder rec(1, kWriters * kPerWriter - 10);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&rec, w] {
      for (int i = 0; i < kPerWriter; ++i) {
        Span span = make_span(Lane::kComm, SpanKind::kAllreduce, i, i + 1);
        span.tag = w * kPerWriter + i;
        rec.record(span);
      }
    });
  }
  for (std::thread& t : writers) t.join();
  const SpanBuffer& lane = rec.lane(Lane::kComm);
  EXPECT_EQ(lane.size(), static_cast<std::size_t>(kWriters * kPerWriter - 10));
  EXPECT_EQ(lane.dropped(), 10u);
  std::vector<int> seen(kWriters * kPerWriter, 0);
  for (const Span& s : lane) ++seen[static_cast<std::size_t>(s.tag)];
  int kept = 0;
  for (int count : seen) {
    EXPECT_LE(count, 1);
    kept += count;
  }
  EXPECT_EQ(kept, kWriters * kPerWriter - 10);
}

TEST(RankRecorder, DisabledRecordsNothing) {
  RankRecorder rec(0, 16, /*enabled=*/false);
  EXPECT_FALSE(rec.enabled());
  rec.record(make_span(Lane::kCompute, SpanKind::kForward, 0, 10));
  { ScopedSpan scoped(rec, Lane::kComm, SpanKind::kAllreduce, 0); }
  EXPECT_TRUE(rec.collect().empty());
  EXPECT_EQ(rec.dropped(), 0u);
}

TEST(RankRecorder, ScopedSpanRecordsItsFields) {
  RankRecorder rec(2, 4);
  { ScopedSpan scoped(rec, Lane::kComm, SpanKind::kAllreduce, 7, 3, kNoName, 0, 4096); }
  const std::vector<Span> spans = rec.collect();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].rank, 2);
  EXPECT_EQ(spans[0].lane, Lane::kComm);
  EXPECT_EQ(spans[0].kind, SpanKind::kAllreduce);
  EXPECT_EQ(spans[0].step, 7);
  EXPECT_EQ(spans[0].tag, 3);
  EXPECT_EQ(spans[0].bytes, 4096);
  EXPECT_GE(spans[0].end_ns, spans[0].start_ns);
}

TEST(Timeline, NameOfPrefersTheInternedName) {
  Timeline t;
  Span s = make_span(Lane::kCompute, SpanKind::kBackward, 0, 1);
  EXPECT_EQ(t.name_of(s), "backward");
  s.name = t.names->intern("fc2.backward");
  EXPECT_EQ(t.name_of(s), "fc2.backward");
}

}  // namespace
}  // namespace tandem
