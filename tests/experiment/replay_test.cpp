// The replay's measured scheduling gaps (experiment/replay.h, idle_gaps): the time a rank
// stood idle before each pass, after whatever it did before (a pass, a wait, a
// give-back), averaged so that the step pays their sum.
#include "experiment/replay.h"

#include <gtest/gtest.h>

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
  // follows forward L0 after 0, 0 and 900 ns, the last behind a give-back.
  span(Lane::kCompute, SpanKind::kForward, 0, 0, 0, 100);
  span(Lane::kCompute, SpanKind::kForward, 0, 1, 5100, 5200);
  span(Lane::kCompute, SpanKind::kForward, 1, 0, 10000, 10100);
  span(Lane::kCompute, SpanKind::kForward, 1, 1, 10100, 10200);
  span(Lane::kCompute, SpanKind::kForward, 2, 0, 20000, 20100);
  span(Lane::kWait, SpanKind::kWait, 2, 1, 20100, 20300);
  span(Lane::kCompute, SpanKind::kForward, 2, 1, 20300, 20400);
  span(Lane::kCompute, SpanKind::kForward, 3, 0, 30000, 30100);
  span(Lane::kIdle, SpanKind::kMemory, 3, 0, 30100, 30200, give_back);
  span(Lane::kCompute, SpanKind::kForward, 3, 1, 31100, 31200);
  const auto gaps = idle_gaps(run);
  const auto it = gaps.find({SpanKind::kForward, 1});
  ASSERT_NE(it, gaps.end());
  EXPECT_DOUBLE_EQ(it->second, 900e-9 / 3);  // the mean: the median would be 0
  // The first pass of a step has nothing before it in the step.
  EXPECT_FALSE(gaps.contains({SpanKind::kForward, 0}));
}

}  // namespace
}  // namespace tandem
