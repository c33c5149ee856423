// Note [contention's collectives] (experiment/calibrate.cpp): the slowdown of collectives
// beside compute is fitted from the collectives' time once every member has issued them,
// not from T_comm, which holds the wait for a peer still computing. Checked on simulated
// runs, whose collectives take exactly the modelled time. And the ranks' jitter, from
// simulated ranks of given paces.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "experiment/calibrate.h"
#include "experiment/workload.h"
#include "simulate/simulator.h"

namespace tandem {
namespace {

Cluster machine(double comm_slowdown) {
  Calibration c;
  c.gemm_flops_per_s = {50e9, 0, 0, 0};
  c.memory_bytes_per_s = 20e9;
  c.link = {.bandwidth_bytes_per_s = 2e9, .latency_s = 10e-6};
  c.overlap_comm_slowdown = comm_slowdown;
  return calibrated_cluster(c, 2, 1e12, "test");
}

TrainConfig layerwise_mlp() {
  TrainConfig c;
  c.model = ModelSpec::parse("mlp:4x512");
  c.ranks = 2;
  c.batch = 64;
  c.steps = 3;
  c.reducer.plan.strategy = Strategy::parse("layerwise");
  return c;
}

MeasuredRun scenario_run(const TrainConfig& base, Scenario scenario, const Cluster& cluster,
                         std::vector<Straggler> stragglers = {}) {
  TrainConfig c = scenario_config(base, scenario);
  const TrainResult r =
      simulate_training(c, {.cluster = cluster, .stragglers = std::move(stragglers)});
  return {
      .what = std::string(to_string(scenario)), .config = c, .timeline = r.timeline, .warmup = 1};
}

// A made timeline of step 0: {rank, lane (0 compute, 1 comm), tag, start, end} each; a
// compute span is a forward (tag 0) or a backward (tag 1), a comm span an all-reduce of
// 4096 bytes, or with tag -1 a receive.
MeasuredRun made(const std::vector<std::array<std::int64_t, 5>>& spans) {
  MeasuredRun run{.what = "made"};
  run.config.model = ModelSpec::parse("mlp:4x512");
  run.config.ranks = 2;
  run.timeline.ranks = 2;
  for (const auto& [rank, lane, tag, start, end] : spans) {
    const bool comm = lane == 1;
    run.timeline.spans.push_back(
        {.rank = static_cast<std::int32_t>(rank),
         .lane = comm ? Lane::kComm : Lane::kCompute,
         .kind = comm ? (tag < 0 ? SpanKind::kRecv : SpanKind::kAllreduce)
                      : (tag == 0 ? SpanKind::kForward : SpanKind::kBackward),
         .step = 0,
         .tag = static_cast<std::int32_t>(tag),
         .start_ns = start,
         .end_ns = end,
         .bytes = comm ? 4096 : 0});
  }
  return run;
}

TEST(ContentionCalibrationTest, OverlappedCollectivesAreTimedFromTheirLastMembersStart) {
  const TrainConfig base = layerwise_mlp();
  // Rank 1 computes 1.5 times as long: rank 0 issues every all-reduce first and waits.
  const std::vector<Straggler> slow = {{.rank = 1, .compute = 1.5}};
  // No contention: the overlapped scenario's collectives take what the comm-only ones do.
  Cluster cluster = machine(0);
  const MeasuredRun ovl = scenario_run(base, Scenario::kOverlapped, cluster, slow);
  const MeasuredRun iso = scenario_run(base, Scenario::kCommOnly, cluster, slow);
  const auto [ovl_s, iso_s] = matched_collective_seconds(ovl, iso);
  ASSERT_GT(iso_s, 0);
  EXPECT_NEAR(ovl_s / iso_s, 1, 1e-6);

  // With contention the overlapped collectives are slower, and by no more than the factor.
  cluster = machine(0.5);
  const auto [slow_s, base_s] =
      matched_collective_seconds(scenario_run(base, Scenario::kOverlapped, cluster, slow), iso);
  EXPECT_GT(slow_s, 1.01 * base_s);
  EXPECT_LE(slow_s, 1.5 * base_s + 1e-9);
}

// On a made timeline: rank 0 starts the all-reduce at 0 and rank 1, still computing, at
// 500; it ends at 700 on both. It took 200 ns once both had issued it (rank 0's span holds
// 500 ns of waiting), as long as in the comm-only run. A collective one run lacks, and a
// point-to-point transfer, are not counted.
TEST(ContentionCalibrationTest, AWaitForAPeerIsNotCountedAsSlowdown) {
  const MeasuredRun ovl = made({{0, 1, 0, 0, 700},
                                {1, 1, 0, 500, 700},  // waited for rank 1
                                {0, 1, 1, 800, 900},
                                {1, 1, 1, 800, 900},    // not in comm-only
                                {1, 1, -1, 0, 5000}});  // a receive
  const MeasuredRun iso = made({{0, 1, 0, 100, 300}, {1, 1, 0, 100, 300}});
  const auto [ovl_s, iso_s] = matched_collective_seconds(ovl, iso);
  EXPECT_DOUBLE_EQ(ovl_s, 200e-9);
  EXPECT_DOUBLE_EQ(iso_s, 200e-9);
  // Slower once both had issued it: counted.
  const auto [slow_s, base_s] =
      matched_collective_seconds(made({{0, 1, 0, 0, 900}, {1, 1, 0, 500, 900}}), iso);
  EXPECT_DOUBLE_EQ(slow_s, 400e-9);
  EXPECT_DOUBLE_EQ(base_s, 200e-9);
}

// Note [contention's passes]: on a simulated machine whose compute runs 1.5 times slower
// while a collective moves (the simulator's collectives are in flight only then), the
// passes beside collectives give that factor back exactly.
TEST(ContentionCalibrationTest, PassesBesideCollectivesGiveBackTheComputeSlowdown) {
  const TrainConfig base = layerwise_mlp();
  Cluster cluster = machine(0);
  cluster.device.overlap_compute_slowdown = 0.5;
  const PassContention p = pass_contention(scenario_run(base, Scenario::kOverlapped, cluster),
                                           scenario_run(base, Scenario::kComputeOnly, cluster));
  ASSERT_GT(p.beside_s, 0);
  const double grew = p.overlapped_s - p.alone_s;
  EXPECT_NEAR(grew / (p.beside_s - grew), 0.5, 1e-4);
}

// Contention by what overlaps, end to end: on a simulated machine whose compute slows by
// 0.2 beside all-reduces and by 0.8 beside reduce-scatters and all-gathers, layerwise's
// and fsdp's scenarios give each family's factor back, and the fit keeps them apart.
TEST(ContentionCalibrationTest, EachFamilysSlowdownIsFittedFromItsOwnStrategies) {
  Cluster cluster = machine(0);
  cluster.device.overlap_compute_slowdown = 0.2;
  cluster.device.sharded_compute_slowdown = 0.8;
  TrainConfig fsdp = layerwise_mlp();
  fsdp.reducer.plan.strategy = Strategy::parse("fsdp");
  fsdp.shard.prefetch = 1;
  std::vector<ContentionSample> samples;
  for (const TrainConfig& base : {layerwise_mlp(), fsdp}) {
    std::vector<MeasuredRun> runs;
    std::map<Scenario, std::size_t> at;
    for (const Scenario s : {Scenario::kOverlapped, Scenario::kComputeOnly}) {
      at[s] = runs.size();
      runs.push_back(scenario_run(base, s, cluster));
    }
    ContentionSample sample;
    time_training_contention(sample, runs, at);
    ASSERT_GT(sample.comp_beside, 0) << base.reducer.plan.strategy.to_string();
    samples.push_back(sample);
  }
  EXPECT_FALSE(samples[0].sharded);
  EXPECT_TRUE(samples[1].sharded);
  for (ContentionSample& s : samples) {  // communication is not what is checked here
    s.comm_iso = s.comm_ovl = s.comm_beside = 0;
  }
  const std::vector<ComputeSample> compute = {
      {.flops = 1e9, .seconds = 1e9 / 50e9, .what = "gemm"}};
  const std::vector<CommSample> comm = {{.ranks = 2, .bytes = 1e6, .seconds = 1e6 / 2e9}};
  const Calibration c = fit_calibration(compute, comm, samples);
  EXPECT_NEAR(c.overlap_compute_slowdown, 0.2, 1e-3);
  EXPECT_NEAR(c.sharded_compute_slowdown, 0.8, 1e-3);
}

// On a made timeline: rank 0 has the all-reduce in flight 0..300 (rank 1 joins at 100).
// Rank 0's forward ran 50..350 beside it for 250 ns (its wait for rank 1 included: its
// communication thread had the core), 300 ns against 200 alone; its backward, beside
// nothing, ran 110 against 100 alone: the runs' drift, 1.1, by which the forward's time
// alone is scaled.
TEST(ContentionCalibrationTest, APassIsBesideItsRanksCollectiveInFlight) {
  const MeasuredRun ovl = made({{0, 1, 0, 0, 300}, {1, 1, 0, 100, 300},  // the all-reduce
                                {0, 0, 0, 50, 350},                      // beside it
                                {0, 0, 1, 400, 510}});                   // beside nothing
  const MeasuredRun alone = made({{0, 0, 0, 0, 200}, {0, 0, 1, 300, 400}});
  const PassContention p = pass_contention(ovl, alone);
  // One rank and step recorded passes: per rank and step, the same.
  EXPECT_DOUBLE_EQ(p.overlapped_s, 300e-9);
  EXPECT_DOUBLE_EQ(p.alone_s, 1.1 * 200e-9);
  EXPECT_DOUBLE_EQ(p.beside_s, 250e-9);
}

// Note [ranks apart] (simulate/simulator.cpp): each measured step's compute per rank,
// against the mean of the ranks that run the same work. Rank 0 at 0.9 and rank 1 at 1.1
// of the model's pace stand 0.1 each way from their mean every step: a standard deviation
// of 0.1 sqrt(2) (one degree of freedom a step). A pipeline's stages run different work:
// only a stage's replicas are compared.
TEST(RankSpreadTest, EachStepsRanksAgainstTheirPeersMean) {
  const TrainConfig base = layerwise_mlp();
  const Cluster cluster = machine(0);
  const MeasuredRun run = scenario_run(base, Scenario::kSequential, cluster,
                                       {{.rank = 0, .compute = 0.9}, {.rank = 1, .compute = 1.1}});
  const std::vector<RankSpreadSample> spread = spread_samples({run});
  ASSERT_EQ(spread.size(), 2u);  // steps 1 and 2, after the warm-up
  for (const RankSpreadSample& s : spread) {
    ASSERT_EQ(s.seconds.size(), 2u);
    EXPECT_NEAR(s.seconds[1] / s.seconds[0], 1.1 / 0.9, 1e-5);
  }
  const Calibration c =
      fit_calibration(compute_samples({run}), comm_samples({run}), {}, {}, spread);
  EXPECT_NEAR(c.compute_jitter, 0.1 * std::sqrt(2.0), 1e-5);
  EXPECT_EQ(c.jitter_samples, 4);
  // Alike ranks: none.
  const MeasuredRun even = scenario_run(base, Scenario::kSequential, cluster);
  EXPECT_NEAR(
      fit_calibration(compute_samples({even}), comm_samples({even}), {}, {}, spread_samples({even}))
          .compute_jitter,
      0, 1e-6);

  // 2 stages x 2 replicas: ranks 0 and 2 run stage 0, 1 and 3 stage 1; rank 2 at 1.2.
  TrainConfig piped = base;
  piped.ranks = 4;
  piped.reducer.plan.strategy = Strategy::parse("bucketed");
  piped.pipeline.stages = 2;
  piped.pipeline.micro_batches = 2;
  Calibration four;
  four.gemm_flops_per_s = {50e9, 0, 0, 0};
  four.memory_bytes_per_s = 20e9;
  four.link = {.bandwidth_bytes_per_s = 2e9, .latency_s = 10e-6};
  const MeasuredRun stages =
      scenario_run(piped, Scenario::kSequential, calibrated_cluster(four, 4, 1e12, "test"),
                   {{.rank = 2, .compute = 1.2}});
  std::vector<double> ratios;
  for (const RankSpreadSample& s : spread_samples({stages})) {
    ASSERT_EQ(s.seconds.size(), 2u);
    ratios.push_back(s.seconds[1] / s.seconds[0]);
  }
  std::sort(ratios.begin(), ratios.end());
  ASSERT_EQ(ratios.size(), 4u);  // two steps of two stages
  EXPECT_NEAR(ratios[0], 1, 1e-5);
  EXPECT_NEAR(ratios[1], 1, 1e-5);
  EXPECT_NEAR(ratios[2], 1.2, 1e-5);
  EXPECT_NEAR(ratios[3], 1.2, 1e-5);
}

// Note [the last issuer's core] (simulate/simulator.cpp): measured back from simulated
// runs whose last issuer sat out a known share of each transfer. The straggler issues
// every collective last.
TEST(IssuerHoldTest, TheShareOfTheTransferTheLastIssuerSatOut) {
  const TrainConfig base = layerwise_mlp();
  for (const double held : {0.0, 0.4, 1.0}) {
    Calibration fast;
    fast.gemm_flops_per_s = {50e9, 0, 0, 0};
    fast.memory_bytes_per_s = 20e9;
    fast.link = {.bandwidth_bytes_per_s = 20e9, .latency_s = 1e-6};
    fast.issuer_held = held;
    const MeasuredRun run =
        scenario_run(base, Scenario::kOverlapped, calibrated_cluster(fast, 2, 1e12, "test"),
                     {{.rank = 1, .compute = 2}});
    const std::vector<IssuerSample> samples = issuer_samples({run});
    // 4 layers' all-reduces in each of steps 1 and 2; the last of each step waited for,
    // unless held through: then it was over when its wait came, and the optimizer followed.
    EXPECT_EQ(samples.size(), held < 1 ? 6u : 8u) << held;
    for (const IssuerSample& s : samples) {
      EXPECT_GT(s.moving_s, 0);
      EXPECT_NEAR(s.held_s, held * s.moving_s, 2e-9) << held;
    }
    const Calibration c =
        fit_calibration(compute_samples({run}), comm_samples({run}), {}, {}, {}, samples);
    EXPECT_NEAR(c.issuer_held, held, 1e-4);
    EXPECT_EQ(c.issuer_samples, static_cast<int>(samples.size()));
    EXPECT_DOUBLE_EQ(calibrated_cluster(c, 2, 1e12, "test").device.issuer_held, c.issuer_held);
  }
}

}  // namespace
}  // namespace tandem
