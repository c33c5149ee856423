// A tensor-parallel run calibrates the simulator (experiment/calibrate.h): each compute
// piece of its passes between the group's collectives is a sample, its data-parallel
// collectives are the ring's, its tensor group's collectives (waited for in place) give
// the hand-off. Fitted on a simulation of a machine whose rates are known, the fit gives
// them back.
#include <gtest/gtest.h>

#include <array>

#include "experiment/calibrate.h"
#include "simulate/calibration.h"
#include "simulate/simulator.h"

namespace tandem {
namespace {

TEST(TensorCalibrationTest, ATensorParallelRunsPiecesGiveBackTheMachinesRates) {
  Calibration machine;
  machine.gemm_flops_per_s = {50e9, 0, 0, 0};
  machine.memory_bytes_per_s = 20e9;
  machine.link = {.bandwidth_bytes_per_s = 5e9, .latency_s = 0, .overhead_s = 50e-6};
  // 0: plain, 1: sequence-parallel, 2: and --tp-overlap (a ring's blocks are spans of its
  // product's name: the pieces after it must still find their own).
  for (const int mode : {0, 1, 2}) {
    const bool sequence_parallel = mode >= 1;
    TrainConfig c;
    c.model = ModelSpec::parse("gpt:layers=2,dim=64,heads=4,seq=32,vocab=256");
    c.model.tensor = 2;
    c.model.sequence_parallel = sequence_parallel;
    c.model.tp_overlap = mode == 2;
    c.ranks = 4;  // two tensor groups, two replicas
    c.batch = 4;
    c.steps = 3;
    c.reducer.mode = CommMode::kSequential;  // nothing overlaps: every piece is a sample
    const TrainResult r =
        simulate_training(c, {.cluster = calibrated_cluster(machine, c.ranks, 1e12, "test")});
    const MeasuredRun run{.what = "sim", .config = c, .timeline = r.timeline, .warmup = 1};
    const std::vector<ComputeSample> compute = compute_samples({run});
    const std::vector<CommSample> comm = comm_samples({run});
    // Each block's pieces apart: more samples than units.
    EXPECT_GT(compute.size(), 4u * 2) << mode;
    ASSERT_FALSE(comm.empty()) << mode;
    // The replicas' all-reduces (transfers) and the tensor groups' (blocked, hand-off).
    int handoffs = 0;
    for (const CommSample& s : comm) {
      EXPECT_EQ(s.ranks, 2) << s.what;
      handoffs += s.handoff;
    }
    EXPECT_GT(handoffs, 0);
    EXPECT_LT(handoffs, static_cast<int>(comm.size()));
    const Calibration fit = fit_calibration(compute, comm, {});
    EXPECT_NEAR(fit.gemm_flops_per_s[0], 50e9, 0.01 * 50e9) << mode;
    EXPECT_NEAR(fit.memory_bytes_per_s, 20e9, 0.01 * 20e9) << mode;
    EXPECT_NEAR(fit.link.bandwidth_bytes_per_s, 5e9, 0.01 * 5e9) << mode;
    EXPECT_NEAR(fit.link.overhead_s, 50e-6, 0.01 * 50e-6) << mode;
    EXPECT_LT(fit.compute.max, 0.01) << fit.compute.worst;
  }
}

// A pipeline's stages each update the units they keep (gpt's tied embedding on both its
// stages): update_seconds gives back the whole model's update the simulation priced, where
// pass_seconds' median over the ranks is one stage's.
TEST(TensorCalibrationTest, APipelinesUpdateIsItsStagesScaledToTheModel) {
  Calibration machine;
  machine.gemm_flops_per_s = {50e9, 0, 0, 0};
  machine.memory_bytes_per_s = 20e9;
  machine.link = {.bandwidth_bytes_per_s = 5e9, .latency_s = 0};
  for (const char* model : {"mlp:5x64", "gpt:layers=2,dim=64,heads=4,seq=32,vocab=256"}) {
    TrainConfig c;
    c.model = ModelSpec::parse(model);
    c.ranks = 2;
    c.batch = 4;
    c.steps = 2;
    c.pipeline.stages = 2;
    c.pipeline.micro_batches = 2;
    const Cluster cluster = calibrated_cluster(machine, c.ranks, 1e12, "test");
    const TrainResult r = simulate_training(c, {.cluster = cluster});
    const MeasuredRun run{.what = "sim", .config = c, .timeline = r.timeline, .warmup = 0};
    const double whole = unit_costs(c, cluster).optimizer;
    EXPECT_NEAR(update_seconds(run, /*clean_only=*/false), whole, 1e-6 * whole) << model;
    EXPECT_LT(pass_seconds(run, /*clean_only=*/false).at({SpanKind::kOptimizer, -1}), 0.9 * whole)
        << model;
  }
}

// Note [ring steps replayed]: a ring step's receive costs from its issue to the end of the
// wait its completion fell in; another point-to-point transfer (a pipeline's) costs its
// span; a ring receive no wait held costs from its issue to its end.
TEST(TensorCalibrationTest, ARingStepCostsFromItsIssueToTheEndOfItsWait) {
  MeasuredRun run{.what = "made"};
  run.config.model = ModelSpec::parse("gpt:layers=2,dim=64,heads=4,seq=32,vocab=256");
  run.config.model.tensor = 2;
  run.config.model.tp_overlap = true;
  run.config.ranks = 2;
  Timeline& t = run.timeline;
  t.ranks = 2;
  const NameId tp = t.names->intern("tp");
  const NameId stage = t.names->intern("activations");
  const auto receive = [&](int rank, NameId name, std::int64_t issue, std::int64_t start,
                           std::int64_t end, std::int64_t bytes) {
    t.spans.push_back({.rank = rank,
                       .lane = Lane::kComm,
                       .kind = SpanKind::kRecv,
                       .name = name,
                       .step = 0,
                       .start_ns = start,
                       .end_ns = end,
                       .bytes = bytes,
                       .issue_ns = issue});
  };
  const auto wait = [&](int rank, std::int64_t start, std::int64_t end) {
    t.spans.push_back({.rank = rank,
                       .lane = Lane::kWait,
                       .kind = SpanKind::kWait,
                       .step = 0,
                       .start_ns = start,
                       .end_ns = end});
  };
  // Rank 0: a ring receive issued at 1000, moving 1200..1300, waited for 1250..1800.
  receive(0, tp, 1000, 1200, 1300, 64);
  wait(0, 1250, 1800);
  // Rank 1: one done before its wait began (its own wait starts later).
  receive(1, tp, 1100, 1200, 1300, 64);
  wait(1, 1400, 1450);
  // A pipeline's receive of another size, inside a wait too: its span alone.
  receive(0, stage, 4000, 5000, 5400, 128);
  wait(0, 4500, 6000);
  const TransferTimes times = transfer_seconds(run, /*clean_only=*/false);
  const auto ring = times.find({SpanKind::kSend, -1, 64});
  ASSERT_NE(ring, times.end());
  ASSERT_EQ(ring->second.size(), 1u);
  EXPECT_DOUBLE_EQ(ring->second[0], (800e-9 + 200e-9) / 2);  // median of 800 and 200 ns
  const auto pipeline = times.find({SpanKind::kSend, -1, 128});
  ASSERT_NE(pipeline, times.end());
  EXPECT_DOUBLE_EQ(pipeline->second.at(0), 400e-9);
}

// Note [pipeline transfers replayed]: a pipeline's receive posted ahead of its send costs
// from the send's start (the peer's, the latest of the same step, micro-batch and bytes
// that started before the receive ended) to its end, not the whole span that waited.
TEST(TensorCalibrationTest, APipelineReceivePostedAheadCostsFromItsSend) {
  MeasuredRun run{.what = "made"};
  run.config.model = ModelSpec::parse("mlp:4x64");
  run.config.ranks = 2;
  Timeline& t = run.timeline;
  t.ranks = 2;
  const auto p2p = [&](int rank, SpanKind kind, std::int64_t start, std::int64_t end) {
    t.spans.push_back({.rank = rank,
                       .lane = Lane::kComm,
                       .kind = kind,
                       .step = 0,
                       .tag = 0,
                       .micro = 0,
                       .start_ns = start,
                       .end_ns = end,
                       .bytes = 128});
  };
  // Micro-batch 0's activations: stage 1 posts its receive at 1000; stage 0 sends at 2800.
  p2p(1, SpanKind::kRecv, 1000, 3000);
  p2p(0, SpanKind::kSend, 2800, 2810);
  // Its gradient back: stage 0 posts at 2900 (after its own send), stage 1 sends at 5700.
  p2p(0, SpanKind::kRecv, 2900, 6000);
  p2p(1, SpanKind::kSend, 5700, 5710);
  const TransferTimes times = transfer_seconds(run, /*clean_only=*/false);
  const auto it = times.find({SpanKind::kSend, -1, 128});
  ASSERT_NE(it, times.end());
  ASSERT_EQ(it->second.size(), 1u);
  EXPECT_DOUBLE_EQ(it->second[0], (200e-9 + 300e-9) / 2);  // not the spans' 2000 and 3100
}

// The give-back samples: every "give back" span of the idle lane from the warm-up on, and
// nothing else there (an imported trace's memcpy is on the idle lane too).
TEST(TensorCalibrationTest, GiveBackSamplesAreTheGiveBackSpansAfterTheWarmUp) {
  MeasuredRun run{.what = "made"};
  run.warmup = 1;
  run.config.model = ModelSpec::parse("mlp:4x64");
  Timeline& t = run.timeline;
  t.ranks = 1;
  const NameId give_back = t.names->intern("give back");
  const NameId memcpy = t.names->intern("memcpy");
  const auto span = [&](NameId name, int step, std::int64_t ns) {
    t.spans.push_back({.lane = Lane::kIdle,
                       .kind = SpanKind::kMemory,
                       .name = name,
                       .step = step,
                       .start_ns = 1000,
                       .end_ns = 1000 + ns});
  };
  span(give_back, 0, 900);  // warm-up
  span(give_back, 1, 30);
  span(give_back, 2, 50);
  span(memcpy, 2, 70);
  EXPECT_EQ(give_back_samples({run}), (std::vector<double>{30e-9, 50e-9}));
}

// A sample stands for every time its pass or collective ran, and a step pays their sum:
// the fit takes the mean (Note [a step pays the mean]). Four steps of 100 ns and one of
// 600 ns give 200 ns, where a median would give 100 and every prediction come out short.
TEST(TensorCalibrationTest, ASamplesSecondsAreTheMeanOfItsOccurrences) {
  MeasuredRun run{.what = "made"};
  run.config.model = ModelSpec::parse("mlp:1x64");
  run.config.ranks = 2;
  run.config.reducer.mode = CommMode::kSequential;
  run.timeline.ranks = 2;
  const std::array<std::int64_t, 5> lengths{100, 100, 600, 100, 100};
  for (int step = 0; step < 5; ++step) {
    const std::int64_t at = 10'000 * step;
    const std::int64_t ns = lengths[static_cast<std::size_t>(step)];
    for (int rank = 0; rank < 2; ++rank) {
      // A forward beside nothing, then the all-reduce both ranks start together.
      run.timeline.spans.push_back({.rank = rank,
                                    .lane = Lane::kCompute,
                                    .kind = SpanKind::kForward,
                                    .step = step,
                                    .tag = 0,
                                    .start_ns = at,
                                    .end_ns = at + ns});
      run.timeline.spans.push_back({.rank = rank,
                                    .lane = Lane::kComm,
                                    .kind = SpanKind::kAllreduce,
                                    .step = step,
                                    .tag = 0,
                                    .start_ns = at + 1000,
                                    .end_ns = at + 1000 + 2 * ns,
                                    .bytes = 4096});
    }
  }
  const std::vector<ComputeSample> compute = compute_samples({run});
  ASSERT_EQ(compute.size(), 1u);
  EXPECT_DOUBLE_EQ(compute[0].seconds, 200e-9) << compute[0].what;
  const std::vector<CommSample> comm = comm_samples({run});
  ASSERT_EQ(comm.size(), 1u);
  EXPECT_DOUBLE_EQ(comm[0].seconds, 400e-9) << comm[0].what;
}

}  // namespace
}  // namespace tandem
