#include <gtest/gtest.h>

#include "analysis/metric_catalogue.h"
#include "core/error.h"
#include "experiment/characterize.h"

namespace tandem {
namespace {

TEST(MicrobenchTest, TwoRanksRunAllFourScenariosAndTheTableIsConsistent) {
  MicrobenchSpec spec = MicrobenchSpec::parse("gemm=96x6,allreduce=256KiB");
  spec.ranks = 2;
  auto workload = make_microbench_workload(spec);
  const Characterization c = characterize(*workload, {.warmup = 1, .iterations = 4});

  ASSERT_EQ(c.runs.size(), 4u);
  for (const ScenarioRun& run : c.runs) {
    ASSERT_EQ(run.steps.size(), 4u) << to_string(run.scenario);
    for (const StepMetrics& s : run.steps) {
      EXPECT_EQ(s.ranks, 2);
      const bool computes = run.scenario != Scenario::kCommOnly;
      const bool communicates = run.scenario != Scenario::kComputeOnly;
      EXPECT_EQ(s.t_comp_ns > 0, computes) << to_string(run.scenario);
      EXPECT_EQ(s.t_comm_ns > 0, communicates) << to_string(run.scenario);
      EXPECT_EQ(s.bytes, communicates ? 256.0 * 1024 : 0.0);
      if (run.scenario == Scenario::kSequential) {
        EXPECT_EQ(s.t_ovl_ns, 0);
      }
    }
  }
  const ScenarioMetrics& m = c.metrics;
  EXPECT_EQ(m.t_comp_ovl_ns.count, 4u);
  EXPECT_GE(m.overlap_ratio.median, 0.0);
  EXPECT_LE(m.overlap_ratio.median, 1.0);
  EXPECT_GE(m.hidden_share.median, 0.0);
  EXPECT_LE(m.hidden_share.median, 1.0);
  EXPECT_LE(m.t_ovl_ns.median, std::min(m.t_comp_ovl_ns.max, m.t_comm_ovl_ns.max));
  EXPECT_EQ(c.config["gemm_count"], 6);
  EXPECT_FALSE(format_metrics_table(m).empty());
}

TEST(MicrobenchTest, CalibratesAGemmCountWhenNoneIsGiven) {
  MicrobenchSpec spec = MicrobenchSpec::parse("gemm=64,allreduce=1MiB");
  spec.ranks = 2;
  auto workload = make_microbench_workload(spec);
  Job job("local", {});
  const Timeline t = workload->run(job, Scenario::kComputeOnly, 1);
  const int count = workload->config_json()["gemm_count"];
  EXPECT_GE(count, 1);
  std::size_t kernels = 0;
  for (const Span& s : t.spans) kernels += s.kind == SpanKind::kKernel;
  EXPECT_EQ(kernels, 2u * count);
}

TEST(MicrobenchSpecTest, RejectsImpossibleSizes) {
  for (const char* bad :
       {"gemm=0,allreduce=1MiB", "gemm=64,allreduce=0", "gemm=64", "allreduce=1MiB",
        "gemm=99999999,allreduce=1MiB", "gemm=64,allreduce=1TiB", "gemm=64x0,allreduce=1MiB",
        "gemm=64,allreduce=1MiB,extra=1", "gemm=abc,allreduce=1MiB"}) {
    EXPECT_THROW(MicrobenchSpec::parse(bad), UsageError) << bad;
  }
  MicrobenchSpec huge = MicrobenchSpec::parse("gemm=32768,allreduce=4GiB");
  huge.ranks = 8;
  EXPECT_THROW(make_microbench_workload(huge), UsageError);
}

}  // namespace
}  // namespace tandem
