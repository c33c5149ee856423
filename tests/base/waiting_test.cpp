// Waiting explained (analysis/waiting.h): skew and transfer on hand-built timelines.
#include "analysis/waiting.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tandem {
namespace {

Span comm(int rank, int step, int tag, std::int64_t start, std::int64_t end,
          SpanKind kind = SpanKind::kAllreduce, std::uint32_t group = 0) {
  return {.rank = rank,
          .lane = Lane::kComm,
          .kind = kind,
          .step = step,
          .tag = tag,
          .start_ns = start,
          .end_ns = end,
          .group = group};
}
Span wait(int rank, int step, std::int64_t start, std::int64_t end) {
  return {.rank = rank,
          .lane = Lane::kWait,
          .kind = SpanKind::kWait,
          .step = step,
          .start_ns = start,
          .end_ns = end};
}

// Rank 1 arrives 30 ns after rank 0; both finish at 100. Rank 0 waits from 10 to 100:
// 20 ns with nothing in flight, 30 of skew, 40 of transfer.
TEST(WaitingTest, SplitsRankZerosWaitAtTheLastArrival) {
  Timeline t;
  t.spans = {comm(0, 0, 0, 30, 100), comm(1, 0, 0, 60, 100), wait(0, 0, 10, 100),
             wait(1, 0, 60, 100)};
  const WaitingAnalysis w = explain_waiting(t);
  ASSERT_EQ(w.ranks.size(), 2u);
  EXPECT_TRUE(w.from_wait_spans);
  EXPECT_EQ(w.collectives, 1);
  const RankWaiting& r0 = *w.rank(0);
  EXPECT_DOUBLE_EQ(r0.blocked_ns, 90);
  EXPECT_DOUBLE_EQ(r0.other_ns, 20);
  EXPECT_DOUBLE_EQ(r0.skew_ns, 30);
  EXPECT_DOUBLE_EQ(r0.transfer_ns, 40);
  const RankWaiting& r1 = *w.rank(1);
  EXPECT_DOUBLE_EQ(r1.skew_ns, 0);
  EXPECT_DOUBLE_EQ(r1.transfer_ns, 40);
  EXPECT_EQ(w.most_often_last, 1);
  EXPECT_EQ(r1.last_arrivals, 1);
  EXPECT_DOUBLE_EQ(r1.late_by_ns, 30);
  EXPECT_EQ(r0.last_arrivals, 0);
  // Means over ranks.
  EXPECT_DOUBLE_EQ(w.skew_ns, 15);
  EXPECT_DOUBLE_EQ(w.transfer_ns, 40);
  ASSERT_EQ(w.kinds.size(), 1u);
  EXPECT_EQ(w.kinds[0].kind, SpanKind::kAllreduce);
  EXPECT_DOUBLE_EQ(w.kinds[0].arrival_spread_ns, 30);
}

// The n-th span of a key on one rank pairs with the n-th on the other, whatever the
// arrival order across keys; steps before first_step are left out and times are per step.
TEST(WaitingTest, PairsOccurrencesAndAveragesPerStep) {
  Timeline t;
  for (int step = 0; step < 3; ++step) {
    const std::int64_t base = 1000 * step;
    // Two buckets per step: rank 0 is late at the first by 10, rank 1 at the second by 20.
    t.spans.push_back(comm(0, step, 0, base + 10, base + 50));
    t.spans.push_back(comm(1, step, 0, base + 0, base + 50));
    t.spans.push_back(comm(0, step, 1, base + 100, base + 150));
    t.spans.push_back(comm(1, step, 1, base + 120, base + 150));
  }
  const WaitingAnalysis w = explain_waiting(t, /*first_step=*/1);
  EXPECT_FALSE(w.from_wait_spans);  // no wait lane: the comm spans are the blocked time
  EXPECT_EQ(w.collectives, 4);
  const RankWaiting& r0 = *w.rank(0);
  EXPECT_EQ(r0.steps, 2);
  EXPECT_DOUBLE_EQ(r0.blocked_ns, 40 + 50);
  EXPECT_DOUBLE_EQ(r0.skew_ns, 20);  // waited at the second bucket for rank 1
  EXPECT_DOUBLE_EQ(r0.transfer_ns, 70);
  const RankWaiting& r1 = *w.rank(1);
  EXPECT_DOUBLE_EQ(r1.skew_ns, 10);
  EXPECT_EQ(r0.last_arrivals, 2);
  EXPECT_EQ(r1.last_arrivals, 2);
  EXPECT_DOUBLE_EQ(r0.late_by_ns, 10);
  EXPECT_DOUBLE_EQ(r1.late_by_ns, 20);
  EXPECT_EQ(w.most_often_last, 0);  // a tie goes to the lower rank
}

// Two groups with the same step, kind and tag (two tensor-parallel pairs) are two
// collectives, not one of four ranks.
TEST(WaitingTest, GroupsKeepSimultaneousCollectivesApart) {
  Timeline t;
  t.spans = {comm(0, 0, 0, 0, 100, SpanKind::kAllreduce, 7),
             comm(1, 0, 0, 40, 100, SpanKind::kAllreduce, 7),
             comm(2, 0, 0, 60, 100, SpanKind::kAllreduce, 9),
             comm(3, 0, 0, 60, 100, SpanKind::kAllreduce, 9)};
  const WaitingAnalysis w = explain_waiting(t);
  EXPECT_EQ(w.collectives, 2);
  EXPECT_DOUBLE_EQ(w.rank(0)->skew_ns, 40);
  EXPECT_DOUBLE_EQ(w.rank(2)->skew_ns, 0);  // a tie: nobody waits for the other
  EXPECT_DOUBLE_EQ(w.rank(3)->skew_ns, 0);
  EXPECT_EQ(w.most_often_last, 1);
}

// A wait covering two collectives in flight: skew of either beats transfer of the other;
// point-to-point transfers have no skew.
TEST(WaitingTest, SkewOfAnyCollectiveInFlightCountsFirst) {
  Timeline t;
  t.spans = {comm(0, 0, 0, 0, 100),
             comm(1, 0, 0, 0, 100),
             comm(0, 0, 1, 50, 150, SpanKind::kAllgather),
             comm(1, 0, 1, 120, 150, SpanKind::kAllgather),
             comm(0, 0, 2, 150, 200, SpanKind::kRecv),
             wait(0, 0, 0, 200)};
  const WaitingAnalysis w = explain_waiting(t);
  const RankWaiting& r0 = *w.rank(0);
  EXPECT_DOUBLE_EQ(r0.blocked_ns, 200);
  EXPECT_DOUBLE_EQ(r0.skew_ns, 70);  // 50..120, the all-gather waiting for rank 1
  EXPECT_DOUBLE_EQ(r0.transfer_ns, 130);
  EXPECT_DOUBLE_EQ(r0.skew_ns + r0.transfer_ns + r0.other_ns, r0.blocked_ns);
  WaitingAnalysis named = w;
  named.clocks = "one clock";
  const nlohmann::json j = waiting_json(named);
  EXPECT_EQ(j["clocks"], "one clock");
  EXPECT_EQ(j["ranks"][0]["skew_ms"], 70e-6);
  bool saw_recv = false;
  for (const auto& k : j["kinds"]) {
    if (k["kind"] == "recv") {
      saw_recv = true;
      EXPECT_EQ(k["collectives"], 0);  // not matched: no skew
    }
  }
  EXPECT_TRUE(saw_recv);
  EXPECT_NE(format_waiting(w, "  ").find("rank 1 arrived last at 1 of 2 collectives"),
            std::string::npos);
}

TEST(WaitingTest, NothingCommunicatedIsEmpty) {
  Timeline t;
  t.spans = {wait(0, 0, 0, 10)};
  const WaitingAnalysis w = explain_waiting(t);
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(format_waiting(w, "  "), "");
}

}  // namespace
}  // namespace tandem
