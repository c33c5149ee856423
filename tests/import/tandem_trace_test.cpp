// tandem's own trace.json, read by the importer: the spans read_chrome_trace would give.
#include <gtest/gtest.h>

#include "import/import_support.h"
#include "timeline/chrome_trace.h"

namespace tandem::testing {
namespace {

Timeline sample_timeline() {
  Timeline t;
  t.ranks = 2;
  const NameId custom = t.names->intern("my <fused> kernel");
  const NameId give_back = t.names->intern("give back");
  const std::int64_t base = 1'700'000'000'123'456'789;  // steady clocks start anywhere
  t.spans = {
      {.rank = 0,
       .lane = Lane::kCompute,
       .kind = SpanKind::kBackward,
       .name = kNoName,
       .step = 0,
       .tag = 3,
       .start_ns = base,
       .end_ns = base + 1501,
       .bytes = 0,
       .flops = 2e9},
      {.rank = 0,
       .lane = Lane::kComm,
       .kind = SpanKind::kAllreduce,
       .name = kNoName,
       .step = 0,
       .tag = 1,
       .start_ns = base + 700,
       .end_ns = base + 3001,
       .bytes = 4096,
       .flops = 0},
      {.rank = 1,
       .lane = Lane::kWait,
       .kind = SpanKind::kWait,
       .name = kNoName,
       .step = 1,
       .tag = -1,
       .start_ns = base + 5,
       .end_ns = base + 9,
       .bytes = 0,
       .flops = 0},
      {.rank = 1,
       .lane = Lane::kCompute,
       .kind = SpanKind::kForward,
       .name = custom,
       .step = 1,
       .tag = 0,
       .start_ns = base + 1,
       .end_ns = base + 2,
       .bytes = 0,
       .flops = 0},
      // zero2/fsdp's memory given back: drawn, counted as memory, in no metric.
      {.rank = 1,
       .lane = Lane::kIdle,
       .kind = SpanKind::kMemory,
       .name = give_back,
       .step = 1,
       .tag = 0,
       .start_ns = base + 2,
       .end_ns = base + 4,
       .bytes = 0,
       .flops = 0},
  };
  t.spans[1].issue_ns = base + 500;  // the all-reduce queued 200 ns behind earlier work
  return t;
}

TEST(TandemTraceImportTest, SpansComeBackExactly) {
  const Timeline original = sample_timeline();
  const ImportResult r = import_text(to_chrome_trace(original).dump());
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0].format, "tandem");
  EXPECT_EQ(r.files[0].compute, 2u);
  EXPECT_EQ(r.files[0].comm, 1u);
  EXPECT_EQ(r.files[0].memory, 1u);
  EXPECT_EQ(r.timeline.ranks, 2);
  ASSERT_EQ(r.timeline.spans.size(), original.spans.size());
  for (std::size_t i = 0; i < original.spans.size(); ++i) {
    const Span& a = original.spans[i];
    const Span& b = r.timeline.spans[i];
    EXPECT_EQ(a.rank, b.rank) << i;
    EXPECT_EQ(a.lane, b.lane) << i;
    EXPECT_EQ(a.kind, b.kind) << i;
    EXPECT_EQ(a.step, b.step) << i;
    EXPECT_EQ(a.tag, b.tag) << i;
    EXPECT_EQ(a.start_ns, b.start_ns) << i;
    EXPECT_EQ(a.end_ns, b.end_ns) << i;
    EXPECT_EQ(a.bytes, b.bytes) << i;
    EXPECT_EQ(a.flops, b.flops) << i;
    EXPECT_EQ(a.issue_ns, b.issue_ns) << i;
    EXPECT_EQ(original.name_of(a), r.timeline.name_of(b)) << i;
    // Generated labels ("backward L3") come back as no name, as read_chrome_trace does.
    EXPECT_EQ(a.name == kNoName, b.name == kNoName) << i;
  }
}

TEST(TandemTraceImportTest, MetricsEqualThoseOfTheOriginalTimeline) {
  const Timeline original = sample_timeline();
  const ImportResult r = import_text(to_chrome_trace(original).dump());
  const auto a = compute_iteration_metrics(original);
  const auto b = compute_iteration_metrics(r.timeline);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].e2e_ns, b[i].e2e_ns);
    EXPECT_EQ(a[i].t_ovl_ns, b[i].t_ovl_ns);
    EXPECT_EQ(a[i].t_exposed_comm_ns, b[i].t_exposed_comm_ns);
    EXPECT_EQ(a[i].t_wait_ns, b[i].t_wait_ns);
  }
}

}  // namespace
}  // namespace tandem::testing
