// The body of analyze's summary.json: what the importer found and the analysis, without
// the header (ResultsWriter's).
#include "report/analyze_summary.h"

#include <gtest/gtest.h>

#include "import/kineto_builder.h"
#include "report/summary_header.h"

namespace tandem::testing {
namespace {

TEST(AnalyzeSummaryTest, BodyHasTheAnalysisAndNoHeaderKeys) {
  TraceImporter importer;
  for (int rank = 0; rank < 2; ++rank) {
    KinetoBuilder b(rank);
    for (int step = 0; step < 3; ++step) {
      const double t = 1000.0 * step;
      b.profiler_step(step, t, 1000).kernel("sm80_gemm", t, 120);
      b.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", t + 60, 100, 13);
    }
    importer.add_bytes(b.str(), "r" + std::to_string(rank) + ".json", rank);
  }
  const ImportResult run = importer.finish();
  const AnalyzeResult a = analyze_timeline(run.timeline, nullptr, 1);
  const nlohmann::json j = analyze_summary_body(a, run, nullptr, {});
  EXPECT_EQ(j["measured_iterations"], 2);
  EXPECT_EQ(j["inputs"].size(), 2u);
  EXPECT_EQ(j["iterations"].size(), 4u);
  EXPECT_TRUE(j["baseline_inputs"].is_null());
  EXPECT_DOUBLE_EQ(j["metrics"]["overlap_ratio"]["median"].get<double>(), 0.5);
  const nlohmann::ordered_json header = summary_header(ResultsCommand::kAnalyze, {});
  for (const auto& [key, value] : header.items()) EXPECT_FALSE(j.contains(key)) << key;
}

}  // namespace
}  // namespace tandem::testing
