// The replay's measured scheduling (experiment/replay.h): the time a rank stood idle
// before each pass, after whatever it did before (a pass, a wait, a give-back), averaged
// so that the step pays their sum (idle_gaps); collectives started late
// (collective_delays) and side by side (collectives_overlapped).
#include "experiment/replay.h"

#include <gtest/gtest.h>

#include <set>

#include "experiment/calibrate.h"

namespace tandem {
namespace {

TEST(ReplayGapsTest, APassWaitsTheMeanGapBeforeItAfterAnythingTheRankDid) {
  MeasuredRun run;
  run.what = "made";
  run.warmup = 1;
  Timeline& t = run.timeline;
  t.ranks = 1;
  const NameId give_back = t.names->intern("give back");
  const auto span = [&](Lane lane, SpanKind kind, int step, int tag, std::int64_t start,
                        std::int64_t end, NameId name = kNoName) {
    t.spans.push_back({.lane = lane,
                       .kind = kind,
                       .name = name,
                       .step = step,
                       .tag = tag,
                       .start_ns = start,
                       .end_ns = end});
  };
  // Three measured steps (step 0 is the warm-up, its 5000 ns gap left out): forward L1
  // follows forward L0 after 0, 0 and 900 ns, the last behind a give-back 50 ns after L0.
  span(Lane::kCompute, SpanKind::kForward, 0, 0, 0, 100);
  span(Lane::kCompute, SpanKind::kForward, 0, 1, 5100, 5200);
  span(Lane::kCompute, SpanKind::kForward, 1, 0, 10000, 10100);
  span(Lane::kCompute, SpanKind::kForward, 1, 1, 10100, 10200);
  span(Lane::kCompute, SpanKind::kForward, 2, 0, 20000, 20100);
  span(Lane::kWait, SpanKind::kWait, 2, 1, 20100, 20300);
  span(Lane::kCompute, SpanKind::kForward, 2, 1, 20300, 20400);
  span(Lane::kCompute, SpanKind::kForward, 3, 0, 30000, 30100);
  span(Lane::kIdle, SpanKind::kMemory, 3, 0, 30150, 30250, give_back);
  span(Lane::kCompute, SpanKind::kForward, 3, 1, 31150, 31250);
  const auto gaps = idle_gaps(run);
  const auto it = gaps.find({SpanKind::kForward, 1});
  ASSERT_NE(it, gaps.end());
  EXPECT_DOUBLE_EQ(it->second, 900e-9 / 3);  // the mean: the median would be 0
  // The first pass of a step has nothing before it in the step.
  EXPECT_FALSE(gaps.contains({SpanKind::kForward, 0}));
  // A give-back is the rank's own work too: the gap before it is its own (the training
  // thread that found its collective done only when it got the core back).
  const auto before_give_back = gaps.find({SpanKind::kMemory, 0});
  ASSERT_NE(before_give_back, gaps.end());
  EXPECT_DOUBLE_EQ(before_give_back->second, 50e-9);
}

// Two ranks, two all-reduces a step (buckets 0 and 1), each rank's spans with their issue.
struct TwoBuckets {
  MeasuredRun run;
  TwoBuckets() {
    run.what = "made";
    run.config.model = ModelSpec::parse("mlp:4x64");
    run.config.ranks = 2;
    run.timeline.ranks = 2;
  }
  void collective(int rank, int step, int bucket, std::int64_t issue, std::int64_t start,
                  std::int64_t end) {
    run.timeline.spans.push_back({.rank = rank,
                                  .lane = Lane::kComm,
                                  .kind = SpanKind::kAllreduce,
                                  .step = step,
                                  .tag = bucket,
                                  .start_ns = start,
                                  .end_ns = end,
                                  .bytes = 4096,
                                  .issue_ns = issue});
  }
};

// Note [a faster network, emulated]: over an emulated link only the wire time divides.
TEST(FasterNetworkTest, AnEmulatedLinksWireTimeAloneIsDivided) {
  const LinkModel link = LinkModel::parse("1GB/s,10us");
  // A 1 MB all-reduce over 2 ranks: 2 hops of 10 us + 0.5 MB at 1 GB/s = 1020 us of wire.
  const double wire = 1020e-6;
  ASSERT_NEAR(static_cast<double>(link.wire_time_ns(SpanKind::kAllreduce, 1'000'000, 2)) / 1e9,
              wire, 1e-9);
  const FasterNetwork faster{.factor = 2, .wire = link, .ranks = 2};
  EXPECT_NEAR(faster(SpanKind::kAllreduce, 1'000'000, wire + 300e-6), 300e-6 + wire / 2, 1e-12);
  // Shorter than its wire time (the span began after the data moved): all of it wire.
  EXPECT_NEAR(faster(SpanKind::kAllreduce, 1'000'000, 600e-6), 300e-6, 1e-12);
  // Over a real network the whole is.
  EXPECT_NEAR((FasterNetwork{.factor = 2})(SpanKind::kAllreduce, 1'000'000, 0.004), 0.002, 1e-15);
  // None measured stays so; no change changes nothing.
  EXPECT_EQ(faster(SpanKind::kAllreduce, 1'000'000, -1), -1);
  EXPECT_EQ((FasterNetwork{.wire = link})(SpanKind::kAllreduce, 1'000'000, 0.004), 0.004);
}

// Note [collectives never measured, emulated]: the emulated wire time exactly, and the
// rest fitted as a + b x the bytes a ring moves per rank.
TEST(EmulatedCollectivesTest, FitsWhatTheWireDoesNotTake) {
  const LinkModel link = LinkModel::parse("1GB/s,10us");
  const auto wire = [&](SpanKind kind, std::int64_t bytes, int n) {
    return static_cast<double>(link.wire_time_ns(kind, bytes, n)) / 1e9;
  };
  // Two all-reduces over 2 ranks (a ring moves their bytes once per rank), each 100 us plus
  // 1 ns per such byte beside their wire; the odd slow one of the second is not the median.
  TransferTimes measured;
  measured[{SpanKind::kAllreduce, 0, 10'000}] = {100e-6 + 10e-6 +
                                                 wire(SpanKind::kAllreduce, 10'000, 2)};
  const double big = 100e-6 + 4e-3 + wire(SpanKind::kAllreduce, 4'000'000, 2);
  measured[{SpanKind::kAllreduce, 1, 4'000'000}] = {big, big, 5 * big};
  measured[{SpanKind::kSend, -1, 1'000}] = {1.0};  // point to point: not the collectives'
  const EmulatedCollectives fit = EmulatedCollectives::fit(link, 2, measured);
  EXPECT_NEAR(fit.a, 100e-6, 1e-9);
  EXPECT_NEAR(fit.b, 1e-9, 1e-15);
  // A 1 MB all-reduce over 4 ranks: 1.5 MB a rank, and the wire's six hops.
  EXPECT_NEAR(fit(SpanKind::kAllreduce, 1'000'000, 4),
              100e-6 + 1.5e-3 + wire(SpanKind::kAllreduce, 1'000'000, 4), 1e-9);
  EXPECT_NEAR(fit(SpanKind::kReduceScatter, 1'000'000, 4),
              100e-6 + 0.75e-3 + wire(SpanKind::kReduceScatter, 1'000'000, 4), 1e-9);
  EXPECT_EQ(fit(SpanKind::kAllreduce, 1'000'000, 1), 0);
  // One size: through the origin; nothing measured: only the wire.
  measured.erase({SpanKind::kAllreduce, 0, 10'000});
  EXPECT_NEAR(EmulatedCollectives::fit(link, 2, measured).b, (100e-6 + 4e-3) / 4e6, 1e-15);
  const EmulatedCollectives none = EmulatedCollectives::fit(link, 2, {});
  EXPECT_EQ(none.a, 0);
  EXPECT_EQ(none.b, 0);
}

// Note [collectives started late]: a collective could start once its members had all
// issued it and, one after another, ended the ones before; what it started after that is
// its delay, the mean over its steps. Side by side, the ones before do not count.
TEST(ReplayDelaysTest, ACollectiveStartedLateIsDelayedByItsMeanLateness) {
  TwoBuckets m;
  for (int step = 0; step < 2; ++step) {
    const std::int64_t t = 100000 * step;
    // Bucket 0 issued at 1000 on both, started at once; bucket 1 issued at 2000 while
    // bucket 0 moved until 3000 (rank 0) and 3500 (rank 1): rank 0 started it at 3100,
    // rank 1 at 4500 (step 0) and 3200 (step 1, with its bucket 0 still in flight).
    m.collective(0, step, 0, t + 1000, t + 1000, t + 3000);
    m.collective(1, step, 0, t + 1000, t + 1000, t + 3500);
    m.collective(0, step, 1, t + 2000, t + 3100, t + 6000);
    m.collective(1, step, 1, t + 2000, t + (step == 0 ? 4500 : 3200), t + 6000);
  }
  const TransferTimes one_by_one = collective_delays(m.run, /*at_once=*/false);
  const auto first = one_by_one.at({SpanKind::kAllreduce, 0, 4096});
  const auto second = one_by_one.at({SpanKind::kAllreduce, 1, 4096});
  EXPECT_DOUBLE_EQ(first.at(0), 0);
  // From bucket 0's later end (3500) to bucket 1's later start: 1000 ns, and none.
  EXPECT_DOUBLE_EQ(second.at(0), 500e-9);
  // Side by side: from its issue (2000): 2500 and 1200 ns.
  EXPECT_DOUBLE_EQ(
      collective_delays(m.run, /*at_once=*/true).at({SpanKind::kAllreduce, 1, 4096}).at(0),
      1850e-9);
  EXPECT_TRUE(collectives_overlapped(m.run));  // rank 1's buckets in step 1
}

// A rank waiting for a collective when it ended resumed after a wake-up: the mean over the
// ranks and steps that waited; one that did not wait adds nothing.
TEST(ReplayDelaysTest, AWaitEndingAfterItsCollectiveIsAWakeUp) {
  TwoBuckets m;
  const auto wait = [&](int rank, int step, int bucket, std::int64_t start, std::int64_t end) {
    m.run.timeline.spans.push_back({.rank = rank,
                                    .lane = Lane::kWait,
                                    .kind = SpanKind::kWait,
                                    .step = step,
                                    .tag = bucket,
                                    .start_ns = start,
                                    .end_ns = end});
  };
  for (int step = 0; step < 2; ++step) {
    const std::int64_t t = 100000 * step;
    m.collective(0, step, 0, t + 1000, t + 1000, t + 3000);
    m.collective(1, step, 0, t + 1000, t + 1000, t + 3000);
  }
  wait(0, 0, 0, 2000, 3400);      // 400 ns after its end
  wait(1, 0, 0, 2500, 3100);      // 100
  wait(0, 1, 0, 102000, 103600);  // 600; rank 1 did not wait in step 1
  wait(1, 1, 0, 104000, 104100);  // another wait, after the end: not this one's
  const TransferTimes wake_ups = collective_wake_ups(m.run);
  EXPECT_DOUBLE_EQ(wake_ups.at({SpanKind::kAllreduce, 0, 4096}).at(0), 1100e-9 / 3);
}

TEST(ReplayDelaysTest, CollectivesOneAfterAnotherDoNotOverlap) {
  TwoBuckets m;
  m.collective(0, 0, 0, 1000, 1000, 3000);
  m.collective(1, 0, 0, 1000, 1000, 3000);
  m.collective(0, 0, 1, 2000, 3000, 5000);
  m.collective(1, 0, 1, 2000, 3000, 5000);
  EXPECT_FALSE(collectives_overlapped(m.run));
}

// Note [replayed step by step]: the replay replays the middle half of the steps by E2E, so
// a step a hiccup stretched is left out, and so is the quickest quarter.
TEST(ReplayMiddleStepsTest, KeepsTheMiddleHalfOfTheStepsByTheirTime) {
  MeasuredRun run;
  run.what = "made";
  run.warmup = 1;
  run.config.model = ModelSpec::parse("mlp:2x64");
  run.timeline.ranks = 1;
  // Step 0 (the warm-up) and 8 measured steps of one forward pass each: 1000 ns, but step
  // 3 took 9000 and step 5 5000, step 7 900 and step 8 950.
  const std::vector<std::int64_t> length = {4000, 1000, 1000, 9000, 1000, 5000, 1000, 900, 950};
  std::int64_t t = 0;
  for (int step = 0; step < static_cast<int>(length.size()); ++step) {
    run.timeline.spans.push_back({.lane = Lane::kCompute,
                                  .kind = SpanKind::kForward,
                                  .step = step,
                                  .tag = 0,
                                  .start_ns = t,
                                  .end_ns = t + length[static_cast<std::size_t>(step)]});
    t += 10000;
  }
  const MeasuredRun middle = middle_steps(run);
  std::set<int> steps;
  for (const Span& s : middle.timeline.spans) steps.insert(s.step);
  EXPECT_EQ(steps, (std::set<int>{0, 1, 2, 4, 6}));  // the warm-up stays (nothing reads it)
  EXPECT_DOUBLE_EQ(pass_seconds(middle, false, Typical::kMean).at({SpanKind::kForward, 0}), 1e-6);
  // Over every step the mean would take the hiccups.
  EXPECT_GT(pass_seconds(run, false, Typical::kMean).at({SpanKind::kForward, 0}), 2e-6);
  EXPECT_DOUBLE_EQ(typical_of({1, 2, 9}, Typical::kMedian), 2);
  EXPECT_DOUBLE_EQ(typical_of({1, 2, 9}, Typical::kMean), 4);
}

// Note [point-to-point transfers late]: a pipeline's sends start the mean of their delays
// after their issue, and a stage waiting for a receive resumes the mean of its wake-ups
// after it ends; one mean per size.
TEST(ReplayDelaysTest, APipelinesTransfersAreLateAndWokenLateByTheirMeans) {
  TwoBuckets m;
  const auto p2p = [&](int rank, SpanKind kind, int micro, std::int64_t issue, std::int64_t start,
                       std::int64_t end) {
    m.run.timeline.spans.push_back({.rank = rank,
                                    .lane = Lane::kComm,
                                    .kind = kind,
                                    .step = 0,
                                    .tag = micro,
                                    .start_ns = start,
                                    .end_ns = end,
                                    .bytes = 8192,
                                    .issue_ns = issue});
  };
  const auto wait = [&](int rank, int micro, std::int64_t start, std::int64_t end) {
    m.run.timeline.spans.push_back({.rank = rank,
                                    .lane = Lane::kWait,
                                    .kind = SpanKind::kWait,
                                    .step = 0,
                                    .tag = micro,
                                    .start_ns = start,
                                    .end_ns = end});
  };
  // Rank 0 sends micro-batches 0 and 1, the second 3000 ns after its issue (the training
  // thread held the core); rank 1 receives them, waiting for the first, which it left 400
  // ns after it arrived, and not for the second.
  p2p(0, SpanKind::kSend, 0, 1000, 1000, 1100);
  p2p(0, SpanKind::kSend, 1, 2000, 5000, 5100);
  p2p(1, SpanKind::kRecv, 0, 500, 500, 1200);
  wait(1, 0, 600, 1600);
  p2p(1, SpanKind::kRecv, 1, 1700, 1700, 5200);
  const TransferTimes delays = collective_delays(m.run, /*at_once=*/false);
  EXPECT_DOUBLE_EQ(delays.at({SpanKind::kSend, -1, 8192}).at(0), 1500e-9);  // (0 + 3000) / 2
  const TransferTimes wake_ups = collective_wake_ups(m.run);
  EXPECT_DOUBLE_EQ(wake_ups.at({SpanKind::kSend, -1, 8192}).at(0), 400e-9);  // the one waited
}

}  // namespace
}  // namespace tandem
