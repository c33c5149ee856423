// Iteration, step and derived metrics on hand-made spans; every expected value below was
// worked out by hand from the span times in the comments.
#include "analysis/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tandem {
namespace {

Span span(int rank, int step, Lane lane, SpanKind kind, std::int64_t start, std::int64_t end,
          std::int64_t bytes = 0) {
  Span s;
  s.rank = rank;
  s.step = step;
  s.lane = lane;
  s.kind = kind;
  s.start_ns = start;
  s.end_ns = end;
  s.bytes = bytes;
  return s;
}
Span comp(int rank, int step, std::int64_t start, std::int64_t end,
          SpanKind kind = SpanKind::kBackward) {
  return span(rank, step, Lane::kCompute, kind, start, end);
}
Span comm(int rank, int step, std::int64_t start, std::int64_t end, std::int64_t bytes = 0) {
  return span(rank, step, Lane::kComm, SpanKind::kAllreduce, start, end, bytes);
}
Span wait(int rank, int step, std::int64_t start, std::int64_t end) {
  return span(rank, step, Lane::kWait, SpanKind::kWait, start, end);
}

IterationMetrics only_iteration(const Timeline& t) {
  const std::vector<IterationMetrics> m = compute_iteration_metrics(t);
  EXPECT_EQ(m.size(), 1u);
  return m.empty() ? IterationMetrics{} : m[0];
}

// The identity the header promises, with |∪compute| = t_comp when compute does not nest.
void expect_identity(const IterationMetrics& m) {
  EXPECT_EQ(m.e2e_ns, m.t_comp_ns + m.t_exposed_comm_ns + m.t_other_ns);
}

TEST(IterationMetrics, PartialOverlap) {
  // compute: fwd [0,100) bwd [100,300) opt [400,450); comm [250,380) 1000 B;
  // wait [300,400).
  // W = [0,450): e2e 450; T_comp 350; T_comm 130; overlap [250,300) = 50;
  // exposed [300,380) = 80; other [380,400) = 20.
  Timeline t;
  t.spans = {comp(0, 0, 0, 100, SpanKind::kForward), comp(0, 0, 100, 300),
             comp(0, 0, 400, 450, SpanKind::kOptimizer), comm(0, 0, 250, 380, 1000),
             wait(0, 0, 300, 400)};
  const IterationMetrics m = only_iteration(t);
  EXPECT_EQ(m.rank, 0);
  EXPECT_EQ(m.step, 0);
  EXPECT_EQ(m.start_ns, 0);
  EXPECT_EQ(m.e2e_ns, 450);
  EXPECT_EQ(m.t_comp_ns, 350);
  EXPECT_EQ(m.t_comm_ns, 130);
  EXPECT_EQ(m.t_ovl_ns, 50);
  EXPECT_EQ(m.t_exposed_comm_ns, 80);
  EXPECT_EQ(m.t_other_ns, 20);
  EXPECT_EQ(m.t_wait_ns, 100);
  EXPECT_EQ(m.t_comm_outside_ns, 0);
  EXPECT_EQ(m.bytes, 1000);
  EXPECT_EQ(m.compute_spans, 3);
  EXPECT_EQ(m.comm_spans, 1);
  expect_identity(m);
}

TEST(IterationMetrics, CommLongerThanComputeStaysOutsideE2E) {
  // compute [1000,1100); comm [950,1020) and [1060,1300).
  // W = [1000,1100): e2e 100; T_comm 70+240 = 310; overlap [1000,1020)+[1060,1100) = 60;
  // comm inside W is all under compute: exposed 0; outside W: 310-60 = 250.
  Timeline t;
  t.spans = {comp(0, 4, 1000, 1100), comm(0, 4, 950, 1020, 8), comm(0, 4, 1060, 1300, 8)};
  const IterationMetrics m = only_iteration(t);
  EXPECT_EQ(m.step, 4);
  EXPECT_EQ(m.start_ns, 1000);
  EXPECT_EQ(m.e2e_ns, 100);
  EXPECT_EQ(m.t_comp_ns, 100);
  EXPECT_EQ(m.t_comm_ns, 310);
  EXPECT_EQ(m.t_ovl_ns, 60);
  EXPECT_EQ(m.t_exposed_comm_ns, 0);
  EXPECT_EQ(m.t_comm_outside_ns, 250);
  EXPECT_EQ(m.t_other_ns, 0);
  EXPECT_EQ(m.bytes, 16);
  expect_identity(m);
}

TEST(IterationMetrics, NoOverlapSequential) {
  // fwd [0,100) bwd [100,200); comm [200,260) and [260,300) touching; opt [300,350).
  // e2e 350; T_comp 250; T_comm 100; overlap 0; exposed 100; other 0.
  Timeline t;
  t.spans = {comp(0, 1, 0, 100, SpanKind::kForward), comp(0, 1, 100, 200), comm(0, 1, 200, 260),
             comm(0, 1, 260, 300), comp(0, 1, 300, 350, SpanKind::kOptimizer)};
  const IterationMetrics m = only_iteration(t);
  EXPECT_EQ(m.e2e_ns, 350);
  EXPECT_EQ(m.t_comp_ns, 250);
  EXPECT_EQ(m.t_comm_ns, 100);
  EXPECT_EQ(m.t_ovl_ns, 0);
  EXPECT_EQ(m.t_exposed_comm_ns, 100);
  EXPECT_EQ(m.t_other_ns, 0);
  expect_identity(m);
}

TEST(IterationMetrics, NestedComputeCountsSumButOverlapUsesTheUnion) {
  // compute [0,100) with a nested kernel [20,40); comm [30,50) and [90,110).
  // T_comp = 100 + 20 = 120 (a sum); overlap with ∪compute [0,100): 20 + 10 = 30;
  // comm inside W [0,100) is all covered: exposed 0; outside [100,110) = 10.
  Timeline t;
  t.spans = {comp(0, 0, 0, 100), comp(0, 0, 20, 40, SpanKind::kKernel), comm(0, 0, 30, 50),
             comm(0, 0, 90, 110)};
  const IterationMetrics m = only_iteration(t);
  EXPECT_EQ(m.e2e_ns, 100);
  EXPECT_EQ(m.t_comp_ns, 120);
  EXPECT_EQ(m.t_comm_ns, 40);
  EXPECT_EQ(m.t_ovl_ns, 30);
  EXPECT_EQ(m.t_exposed_comm_ns, 0);
  EXPECT_EQ(m.t_comm_outside_ns, 10);
  EXPECT_EQ(m.t_other_ns, 0);
}

TEST(IterationMetrics, CommOnlyStepUsesTheCommHull) {
  // comm [0,50) and [60,100), no compute: W = [0,100); exposed 90; other 10.
  Timeline t;
  t.spans = {comm(2, 0, 0, 50), comm(2, 0, 60, 100)};
  const IterationMetrics m = only_iteration(t);
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.e2e_ns, 100);
  EXPECT_EQ(m.t_comp_ns, 0);
  EXPECT_EQ(m.t_ovl_ns, 0);
  EXPECT_EQ(m.t_exposed_comm_ns, 90);
  EXPECT_EQ(m.t_other_ns, 10);
}

TEST(IterationMetrics, IgnoresSpansWithoutStepAndWaitOnlySteps) {
  Timeline t;
  t.spans = {comp(0, -1, 0, 1000), comm(0, -1, 0, 1000), wait(0, 3, 0, 10), comp(0, 0, 10, 20)};
  const IterationMetrics m = only_iteration(t);
  EXPECT_EQ(m.step, 0);
  EXPECT_EQ(m.e2e_ns, 10);
  EXPECT_EQ(m.t_ovl_ns, 0);
}

TEST(IterationMetrics, ZeroLengthSpansStillMarkTheWindow) {
  Timeline t;
  t.spans = {comp(0, 0, 0, 0, SpanKind::kForward), comp(0, 0, 50, 80)};
  const IterationMetrics m = only_iteration(t);
  EXPECT_EQ(m.start_ns, 0);
  EXPECT_EQ(m.e2e_ns, 80);
  EXPECT_EQ(m.t_comp_ns, 30);
  EXPECT_EQ(m.t_other_ns, 50);
}

// Two ranks, two steps, spans listed out of order.
//   step 0, rank 0: compute [0,100), comm [50,150): e2e 100, comp 100, comm 100, ovl 50
//   step 0, rank 1: compute [0,80) [100,130), comm [80,100): e2e 130, comp 110, comm 20,
//                   ovl 0, exposed 20
//   step 1, rank 0: compute [200,260): e2e 60, comp 60
//   step 1, rank 1: compute [200,260): e2e 60, comp 60, comm [210,230): ovl 20
Timeline two_ranks() {
  Timeline t;
  t.ranks = 2;
  t.spans = {comp(1, 1, 200, 260),     comm(1, 1, 210, 230, 64), comp(0, 0, 0, 100),
             comp(1, 0, 100, 130),     comm(0, 0, 50, 150, 100), comp(1, 0, 0, 80),
             comm(1, 0, 80, 100, 100), comp(0, 1, 200, 260)};
  return t;
}

TEST(IterationMetrics, MultipleRanksSortedByRankThenStep) {
  const std::vector<IterationMetrics> m = compute_iteration_metrics(two_ranks());
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(std::make_pair(m[0].rank, m[0].step), std::make_pair(0, 0));
  EXPECT_EQ(std::make_pair(m[1].rank, m[1].step), std::make_pair(0, 1));
  EXPECT_EQ(std::make_pair(m[2].rank, m[2].step), std::make_pair(1, 0));
  EXPECT_EQ(std::make_pair(m[3].rank, m[3].step), std::make_pair(1, 1));
  EXPECT_EQ(m[0].e2e_ns, 100);
  EXPECT_EQ(m[0].t_ovl_ns, 50);
  EXPECT_EQ(m[0].t_comm_outside_ns, 50);
  EXPECT_EQ(m[2].e2e_ns, 130);
  EXPECT_EQ(m[2].t_comp_ns, 110);
  EXPECT_EQ(m[2].t_exposed_comm_ns, 20);
  EXPECT_EQ(m[3].t_ovl_ns, 20);
}

TEST(StepMetrics, E2EIsTheSlowestRankAndTheRestAreMeans) {
  const std::vector<StepMetrics> steps = compute_step_metrics(two_ranks());
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step, 0);
  EXPECT_EQ(steps[0].ranks, 2);
  EXPECT_EQ(steps[0].slowest_rank, 1);
  EXPECT_DOUBLE_EQ(steps[0].e2e_ns, 130);
  EXPECT_DOUBLE_EQ(steps[0].t_comp_ns, (100 + 110) / 2.0);
  EXPECT_DOUBLE_EQ(steps[0].t_comm_ns, (100 + 20) / 2.0);
  EXPECT_DOUBLE_EQ(steps[0].t_ovl_ns, (50 + 0) / 2.0);
  EXPECT_DOUBLE_EQ(steps[0].t_exposed_comm_ns, (0 + 20) / 2.0);
  EXPECT_DOUBLE_EQ(steps[0].bytes, 100);
  EXPECT_EQ(steps[1].step, 1);
  EXPECT_EQ(steps[1].slowest_rank, 0);  // a tie goes to the lowest rank
  EXPECT_DOUBLE_EQ(steps[1].e2e_ns, 60);
  EXPECT_DOUBLE_EQ(steps[1].t_ovl_ns, 10);
  EXPECT_DOUBLE_EQ(steps[1].bytes, 32);

  const std::vector<StepMetrics> measured = drop_warmup(steps, 1);
  ASSERT_EQ(measured.size(), 1u);
  EXPECT_EQ(measured[0].step, 1);
  EXPECT_TRUE(drop_warmup(steps, 2).empty());
}

TEST(DerivedMetrics, FromHandNumbers) {
  // iso: comp 100, comm 60; seq 170; overlapped: comp 120, comm 80, ovl 50, e2e 140.
  const DerivedMetrics d = derive(100, 60, 170, 120, 80, 50, 140);
  EXPECT_DOUBLE_EQ(d.compute_slowdown, 0.2);
  EXPECT_DOUBLE_EQ(d.overlap_ratio, 50.0 / 120.0);
  EXPECT_DOUBLE_EQ(d.e2e_ideal_ns, 120);
  EXPECT_DOUBLE_EQ(d.e2e_seq_model_ns, 170);
  EXPECT_DOUBLE_EQ(d.e2e_seq_model_error_ns, 0);
  EXPECT_DOUBLE_EQ(d.hidden_share, 0.625);
  EXPECT_DOUBLE_EQ(d.overlap_benefit_ns, 30);
  EXPECT_DOUBLE_EQ(d.contention_loss_ns, 20);
  EXPECT_DOUBLE_EQ(d.overlap_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(d.exposed_comm_ns, 30);
}

TEST(DerivedMetrics, ZeroDenominatorsAreUndefinedNotInfinite) {
  const DerivedMetrics d = derive(0, 0, 170, 0, 0, 0, 140);
  EXPECT_TRUE(std::isnan(d.compute_slowdown));
  EXPECT_TRUE(std::isnan(d.overlap_ratio));
  EXPECT_TRUE(std::isnan(d.hidden_share));
  EXPECT_TRUE(std::isnan(d.overlap_efficiency));
  EXPECT_DOUBLE_EQ(d.overlap_benefit_ns, 30);  // still defined

  // A baseline whose compute took no time (all zero-length spans) says nothing of the
  // slowdown: E2E_ideal and what rests on it are undefined, never a negative time.
  const DerivedMetrics empty_baseline = derive(0, 50, 170, 150, 80, 50, 140);
  EXPECT_TRUE(std::isnan(empty_baseline.compute_slowdown));
  EXPECT_TRUE(std::isnan(empty_baseline.e2e_ideal_ns));
  EXPECT_TRUE(std::isnan(empty_baseline.contention_loss_ns));
  EXPECT_DOUBLE_EQ(empty_baseline.overlap_benefit_ns, 30);

  const DerivedMetrics no_seq = derive(100, kUndefined, kUndefined, 120, 80, 50, 140);
  EXPECT_DOUBLE_EQ(no_seq.compute_slowdown, 0.2);
  EXPECT_TRUE(std::isnan(no_seq.overlap_benefit_ns));
  EXPECT_TRUE(std::isnan(no_seq.overlap_efficiency));
  EXPECT_TRUE(std::isnan(no_seq.e2e_seq_model_error_ns));

  const nlohmann::json j = d;
  EXPECT_TRUE(j["compute_slowdown"].is_null());
  EXPECT_DOUBLE_EQ(j["overlap_benefit_ns"].get<double>(), 30);
  EXPECT_EQ(j.dump().find("NaN"), std::string::npos);
}

TEST(ScenarioMetrics, DerivesEachIterationAgainstBaselineMedians) {
  ScenarioInputs in;
  in.t_comp_iso_ns = {400, 90, 100};  // median 100 (the mean, 196.7, would be wrong)
  in.t_comm_iso_ns = {60};
  in.e2e_seq_ns = {180, 160, 170};  // median 170
  // iteration 0: comp 120 comm 80 ovl 50 e2e 140 -> S 0.2, ideal 120, eff 0.5
  // iteration 1: comp 130 comm 80 ovl 40 e2e 160 -> S 0.3, ideal 130, eff 1/6
  in.t_comp_ovl_ns = {120, 130};
  in.t_comm_ovl_ns = {80, 80};
  in.t_ovl_ns = {50, 40};
  in.e2e_ovl_ns = {140, 160};
  const ScenarioMetrics m = compute_scenario_metrics(in);
  EXPECT_DOUBLE_EQ(m.t_comp_iso_ns.median, 100);
  EXPECT_EQ(m.t_comp_iso_ns.count, 3u);
  EXPECT_EQ(m.compute_slowdown.count, 2u);
  EXPECT_DOUBLE_EQ(m.compute_slowdown.median, 0.25);
  EXPECT_DOUBLE_EQ(m.compute_slowdown.min, 0.2);
  EXPECT_DOUBLE_EQ(m.compute_slowdown.max, 0.3);
  EXPECT_DOUBLE_EQ(m.e2e_ideal_ns.median, 125);
  EXPECT_DOUBLE_EQ(m.contention_loss_ns.mean, 25);
  EXPECT_DOUBLE_EQ(m.overlap_benefit_ns.max, 30);
  EXPECT_DOUBLE_EQ(m.overlap_benefit_ns.min, 10);
  EXPECT_DOUBLE_EQ(m.overlap_efficiency.max, 0.5);
  EXPECT_DOUBLE_EQ(m.overlap_efficiency.min, 10.0 / 60.0);
  EXPECT_DOUBLE_EQ(m.overlap_ratio.max, 50.0 / 120.0);
  EXPECT_DOUBLE_EQ(m.hidden_share.min, 0.5);
  EXPECT_DOUBLE_EQ(m.exposed_comm_ns.median, 35);
  // E2E_seq_model = ideal + ovl = 170 in both: error 0 against the measured median.
  EXPECT_DOUBLE_EQ(m.e2e_seq_model_error_ns.max, 0);
  EXPECT_DOUBLE_EQ(m.e2e_seq_model_error_ns.min, 0);
}

TEST(ScenarioMetrics, MissingBaselineLeavesDependentsUndefined) {
  ScenarioInputs in;
  in.t_comp_iso_ns = {100};
  in.t_comp_ovl_ns = {120};
  in.t_comm_ovl_ns = {80};
  in.t_ovl_ns = {50};
  in.e2e_ovl_ns = {140};
  const ScenarioMetrics m = compute_scenario_metrics(in);
  EXPECT_EQ(m.overlap_ratio.count, 1u);
  EXPECT_EQ(m.overlap_efficiency.count, 0u);
  EXPECT_TRUE(std::isnan(m.overlap_efficiency.median));
  EXPECT_EQ(m.overlap_benefit_ns.count, 0u);
  const nlohmann::json j = m;
  EXPECT_TRUE(j["overlap_efficiency"]["median"].is_null());
  EXPECT_EQ(j["overlap_efficiency"]["count"], 0);
  EXPECT_DOUBLE_EQ(j["compute_slowdown"]["median"].get<double>(), 0.2);
  EXPECT_TRUE(j.contains("e2e_ovl_ns"));
}

TEST(ScenarioMetrics, MismatchedOverlappedSeriesAreAUsageError) {
  ScenarioInputs in;
  in.t_comp_ovl_ns = {1, 2};
  in.t_comm_ovl_ns = {1};
  in.t_ovl_ns = {1, 2};
  in.e2e_ovl_ns = {1, 2};
  EXPECT_THROW(compute_scenario_metrics(in), UsageError);
}

TEST(ScenarioMetrics, InputsFromStepMetrics) {
  const std::vector<StepMetrics> ovl = compute_step_metrics(two_ranks());
  const ScenarioInputs in = scenario_inputs(ovl, ovl, ovl, ovl);
  EXPECT_EQ(in.t_comp_iso_ns, (std::vector<double>{105, 60}));
  EXPECT_EQ(in.e2e_seq_ns, (std::vector<double>{130, 60}));
  EXPECT_EQ(in.t_ovl_ns, (std::vector<double>{25, 10}));
  EXPECT_EQ(in.t_comm_iso_ns, (std::vector<double>{60, 10}));
}

TEST(MetricsJson, IterationAndStepFields) {
  const std::vector<IterationMetrics> it = compute_iteration_metrics(two_ranks());
  const nlohmann::json j = it[2];
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["e2e_ns"], 130);
  EXPECT_EQ(j["t_exposed_comm_ns"], 20);
  const nlohmann::json s = compute_step_metrics(two_ranks())[0];
  EXPECT_EQ(s["slowest_rank"], 1);
  EXPECT_DOUBLE_EQ(s["t_comp_ns"].get<double>(), 105);
}

}  // namespace
}  // namespace tandem
