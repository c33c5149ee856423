// The metric suite's oracle: synthetic phases in ideal mode put their spans on the
// schedule computed by hand (a virtual clock, nothing sleeps), so every metric, through
// the four scenarios, the launcher, the timeline and the statistics, must come out as the
// value computed by hand, to the nanosecond; no timing of this machine is involved.
#include <gtest/gtest.h>

#include "core/error.h"
#include "experiment/characterize.h"

namespace tandem {
namespace {

constexpr double kMs = 1e6;

struct Expected {
  double t_comp_iso, t_comm_iso, e2e_seq, t_comp_ovl, t_comm_ovl, t_ovl, e2e_ovl;  // ms
  double slowdown, overlap_ratio, e2e_ideal, e2e_seq_model, hidden_share, benefit, contention_loss,
      efficiency, exposed;
};

// Equal to the expected value up to floating-point rounding (times are whole
// nanoseconds; ratios are quotients of them).
void expect_exact(const char* what, double got, double want, double scale) {
  const double tolerance = 1e-12 * (want != 0 ? std::abs(want) : scale) + 1e-9;
  EXPECT_NEAR(got, want, tolerance) << what;
}

void check(const Characterization& c, const Expected& e) {
  const ScenarioMetrics& m = c.metrics;
  const double base = e.t_comp_iso * kMs;
  expect_exact("T_comp_iso", m.t_comp_iso_ns.median, e.t_comp_iso * kMs, base);
  expect_exact("T_comm_iso", m.t_comm_iso_ns.median, e.t_comm_iso * kMs, base);
  expect_exact("E2E_seq", m.e2e_seq_ns.median, e.e2e_seq * kMs, base);
  expect_exact("T_comp_ovl", m.t_comp_ovl_ns.median, e.t_comp_ovl * kMs, base);
  expect_exact("T_comm_ovl", m.t_comm_ovl_ns.median, e.t_comm_ovl * kMs, base);
  expect_exact("T_ovl", m.t_ovl_ns.median, e.t_ovl * kMs, base);
  expect_exact("E2E_ovl", m.e2e_ovl_ns.median, e.e2e_ovl * kMs, base);
  expect_exact("S", m.compute_slowdown.median, e.slowdown, 1.0);
  expect_exact("R", m.overlap_ratio.median, e.overlap_ratio, 1.0);
  expect_exact("E2E_ideal", m.e2e_ideal_ns.median, e.e2e_ideal * kMs, base);
  expect_exact("E2E_seq_model", m.e2e_seq_model_ns.median, e.e2e_seq_model * kMs, base);
  expect_exact("hidden share", m.hidden_share.median, e.hidden_share, 1.0);
  expect_exact("overlap benefit", m.overlap_benefit_ns.median, e.benefit * kMs, base);
  expect_exact("contention loss", m.contention_loss_ns.median, e.contention_loss * kMs, base);
  expect_exact("overlap efficiency", m.overlap_efficiency.median, e.efficiency, 1.0);
  expect_exact("exposed comm", m.exposed_comm_ns.median, e.exposed * kMs, base);
}

Characterization run(std::string_view spec_text, int ranks) {
  SyntheticSpec spec = SyntheticSpec::parse(std::string(spec_text) + ",mode=ideal");
  spec.ranks = ranks;
  auto workload = make_synthetic_workload(spec);
  return characterize(*workload, {.warmup = 1, .iterations = 5});
}

TEST(SyntheticOracleTest, PartialOverlapCommShorterThanCompute) {
  // 5 compute chunks of 80 ms; after chunk i, comm chunk i (40 ms) runs at once, so it
  // ends before compute chunk i+1 does: chunks 0..3 hide fully, chunk 4 runs after
  // compute, exposed. T_ovl = 4 x 40 = 160; E2E_ovl = 400 + 40; sequential = 400 + 200.
  const Characterization c = run("synthetic:compute=400ms,comm=200ms,chunks=5", 2);
  check(c, {.t_comp_iso = 400,
            .t_comm_iso = 200,
            .e2e_seq = 600,
            .t_comp_ovl = 400,
            .t_comm_ovl = 200,
            .t_ovl = 160,
            .e2e_ovl = 440,
            .slowdown = 0,
            .overlap_ratio = 0.4,
            .e2e_ideal = 440,
            .e2e_seq_model = 600,
            .hidden_share = 0.8,
            .benefit = 160,
            .contention_loss = 0,
            .efficiency = 0.8,
            .exposed = 40});
}

TEST(SyntheticOracleTest, CommLongerThanCompute) {
  // 4 compute chunks of 25 ms, 4 comm chunks of 75 ms queued on one comm thread:
  // comm 0 runs [25,100) under compute [0,100); comm 1..3 run [100,325) alone.
  // T_ovl = 75; E2E_ovl = 325; sequential = 100 + 300 = 400.
  const Characterization c = run("synthetic:compute=100ms,comm=300ms,chunks=4", 1);
  check(c, {.t_comp_iso = 100,
            .t_comm_iso = 300,
            .e2e_seq = 400,
            .t_comp_ovl = 100,
            .t_comm_ovl = 300,
            .t_ovl = 75,
            .e2e_ovl = 325,
            .slowdown = 0,
            .overlap_ratio = 0.75,
            .e2e_ideal = 325,
            .e2e_seq_model = 400,
            .hidden_share = 0.25,
            .benefit = 75,
            .contention_loss = 0,
            .efficiency = 0.75,
            .exposed = 225});
}

TEST(SyntheticOracleTest, OneChunkCannotOverlap) {
  // Communication starts only after the single compute chunk: nothing hides.
  const Characterization c = run("synthetic:compute=200ms,comm=100ms,chunks=1", 1);
  check(c, {.t_comp_iso = 200,
            .t_comm_iso = 100,
            .e2e_seq = 300,
            .t_comp_ovl = 200,
            .t_comm_ovl = 100,
            .t_ovl = 0,
            .e2e_ovl = 300,
            .slowdown = 0,
            .overlap_ratio = 0,
            .e2e_ideal = 300,
            .e2e_seq_model = 300,
            .hidden_share = 0,
            .benefit = 0,
            .contention_loss = 0,
            .efficiency = 0,
            .exposed = 100});
}

TEST(SyntheticSpecTest, ParsesAndRejects) {
  const SyntheticSpec s = SyntheticSpec::parse("synthetic:compute=350ms,comm=175ms,chunks=10");
  EXPECT_EQ(s.compute_ns, 350'000'000);
  EXPECT_EQ(s.comm_ns, 175'000'000);
  EXPECT_EQ(s.chunks, 10);
  EXPECT_EQ(s.mode, SyntheticMode::kSleep);
  EXPECT_EQ(SyntheticSpec::parse("synthetic:compute=1ms,comm=1ms,mode=busy").mode,
            SyntheticMode::kBusy);
  EXPECT_EQ(SyntheticSpec::parse("synthetic:compute=1ms,comm=1ms,mode=ideal").mode,
            SyntheticMode::kIdeal);
  for (const char* bad :
       {"synthetic:compute=1ms", "synthetic:compute=1ms,comm=0ms",
        "synthetic:compute=1ms,comm=1ms,chunks=0", "synthetic:compute=1ms,comm=1ms,mode=fast",
        "synthetic:compute=1ms,comm=1ms,color=red", "compute=1ms,comm=1ms",
        "synthetic:compute=1ms,compute=2ms,comm=1ms"}) {
    EXPECT_THROW(SyntheticSpec::parse(bad), UsageError) << bad;
  }
}

}  // namespace
}  // namespace tandem
