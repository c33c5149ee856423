// analyze_timeline and its outputs: the breakdown adds up, warm-up drops whole
// iterations, a compute-only baseline gives slowdown (eq. 1) and ideal time (eq. 4).
#include "trace_import/analyze_report.h"

#include <gtest/gtest.h>

#include "import/import_support.h"
#include "import/kineto_builder.h"

namespace tandem::testing {
namespace {

constexpr const char* kGemm = "sm80_gemm";
constexpr const char* kAllReduce = "ncclKernel_AllReduce_RING_LL_Sum_float";

// Steps 0..2, each 1000 us apart: compute [0,120) as two kernels, comm [60,160), so per
// step e2e 120 us, T_comp 120, T_comm 100, T_ovl 60.
std::string three_steps(int rank) {
  KinetoBuilder b(rank);
  for (int step = 0; step < 3; ++step) {
    const double t = 1000.0 * step;
    b.profiler_step(step, t, 1000).kernel(kGemm, t, 60).kernel(kGemm, t + 60, 60);
    b.kernel(kAllReduce, t + 60, 100, 13);
  }
  return b.str();
}

TEST(AnalyzeReportTest, BreakdownAddsUpToIterationTime) {
  const auto r = import_text(KinetoBuilder()
                                 .kernel(kGemm, 0, 50)
                                 .kernel(kAllReduce, 40, 40, 13)
                                 .memcpy(80, 5)
                                 .kernel(kGemm, 100, 20)
                                 .str());
  const IterationMetrics m = iteration(r.timeline, 0, 0);
  const IterationBreakdown b = breakdown(m);
  EXPECT_EQ(b.compute_only_ns + b.overlapped_ns + b.exposed_comm_ns + b.idle_ns, m.e2e_ns);
  EXPECT_EQ(b.compute_only_ns, us(60));  // [0,40) + [100,120)
  EXPECT_EQ(b.overlapped_ns, us(10));
  EXPECT_EQ(b.exposed_comm_ns, us(30));
  EXPECT_EQ(b.idle_ns, us(20));
  EXPECT_DOUBLE_EQ(b.hidden_share, 10.0 / 40);
  EXPECT_DOUBLE_EQ(b.overlap_ratio, 10.0 / 70);
}

TEST(AnalyzeReportTest, SummaryAcrossRanksAndWarmup) {
  TraceImporter importer;
  importer.add_bytes(three_steps(0), "r0.json", 0);
  importer.add_bytes(three_steps(1), "r1.json", 1);
  const ImportResult run = importer.finish();
  const AnalyzeResult a = analyze_timeline(run.timeline, nullptr, 1);
  ASSERT_EQ(a.steps.size(), 2u);
  EXPECT_EQ(a.steps[0].step, 1);          // step 0 was warm-up
  EXPECT_EQ(a.iterations.size(), 4u);     // 2 ranks x 2 measured steps
  EXPECT_DOUBLE_EQ(a.hidden_share, 0.6);  // 60 / 100
  EXPECT_DOUBLE_EQ(a.e2e_ms.median, 0.12);
  EXPECT_DOUBLE_EQ(a.scenario.overlap_ratio.median, 0.5);  // 60 / 120
  EXPECT_FALSE(a.has_baseline);
  EXPECT_TRUE(std::isnan(a.scenario.compute_slowdown.median));

  const std::string csv = iterations_csv(a);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 4);
}

TEST(AnalyzeReportTest, BaselineGivesSlowdownAndIdealTime) {
  const ImportResult run = import_text(three_steps(0));
  // Compute-only: the same compute, 100 us instead of 120.
  KinetoBuilder b(0);
  for (int step = 0; step < 3; ++step)
    b.profiler_step(step, 1000.0 * step, 1000).kernel(kGemm, 1000.0 * step, 100);
  const ImportResult baseline = import_text(b.str());
  const AnalyzeResult a = analyze_timeline(run.timeline, &baseline.timeline, 0);
  ASSERT_TRUE(a.has_baseline);
  EXPECT_DOUBLE_EQ(a.scenario.compute_slowdown.median, 0.2);           // (120 - 100) / 100
  EXPECT_DOUBLE_EQ(a.scenario.e2e_ideal_ns.median, us(120) - us(20));  // eq. 4
  EXPECT_NE(format_analyze_summary(a).find("compute slowdown S"), std::string::npos);
}

TEST(AnalyzeReportTest, NothingToAnalyzeIsAUsageError) {
  const ImportResult empty = import_text(R"({"traceEvents":[]})");
  EXPECT_THROW(analyze_timeline(empty.timeline, nullptr, 0), UsageError);
  const ImportResult run = import_text(three_steps(0));
  EXPECT_THROW(analyze_timeline(run.timeline, nullptr, 3), UsageError);  // all warm-up
}

}  // namespace
}  // namespace tandem::testing
