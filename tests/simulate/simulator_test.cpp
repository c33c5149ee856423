// tandem simulate on hand-computed cases: the ring all-reduce formula, a sequential step,
// one overlap with contention, a straggler, and the errors.
#include "simulate/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "analysis/metrics.h"
#include "analysis/waiting.h"
#include "core/error.h"
#include "ddp/sharded.h"
#include "engine/pipeline.h"
#include "engine/pipeline_schedule.h"
#include "model/layout.h"
#include "simulate/round_cluster.h"

namespace tandem {
namespace {

using testing::round_cluster;

TrainConfig mlp_config(const std::string& model, int ranks, const std::string& strategy) {
  TrainConfig c;
  c.model = ModelSpec::parse(model);
  c.ranks = ranks;
  c.batch = 32;
  c.steps = 2;
  c.reducer.plan.strategy = Strategy::parse(strategy);
  return c;
}

// One step of a 2-stage pipeline (bucketed replicas when ranks > 2).
TrainConfig pipeline_config(const std::string& model, int ranks, int micro_batches) {
  TrainConfig c = mlp_config(model, ranks, "bucketed");
  c.steps = 1;
  c.pipeline.stages = 2;
  c.pipeline.micro_batches = micro_batches;
  return c;
}

double seconds(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }

// The first step's time (its record's window).
double first_step_s(const TrainResult& r) {
  return seconds(r.steps.front().end_ns - r.steps.front().start_ns);
}

TEST(AllreduceSecondsTest, OneNodeIsTheRingFormula) {
  const Cluster c = round_cluster(1, 8);
  const double S = 64e6;
  for (int n : {2, 4, 8}) {
    const double want = 2.0 * (n - 1) / n * S / 10e9 + 2.0 * (n - 1) * 1e-6;
    EXPECT_NEAR(allreduce_seconds(c, n, S), want, 1e-12) << n;
  }
  EXPECT_EQ(allreduce_seconds(c, 1, S), 0);
}

TEST(AllreduceSecondsTest, AcrossNodesAddsTheNodesRingOnEachDevicesShare) {
  const Cluster c = round_cluster(4, 4);
  const double S = 64e6;
  // Inside: 2 x 3/4 of S at 10 GB/s + 6 hops; across 4 nodes: each device's S/4 over its
  // share of 2 NICs (2 x 1 GB/s / 4 devices), 2 x 3/4 of it + 6 hops of 10 us.
  const double inside = 2.0 * 3 / 4 * S / 10e9 + 6 * 1e-6;
  const double across = 2.0 * 3 / 4 * (S / 4) / (2 * 1e9 / 4) + 6 * 10e-6;
  EXPECT_NEAR(allreduce_seconds(c, 16, S), inside + across, 1e-12);
  // 8 ranks fill two nodes.
  const double two =
      2.0 * 3 / 4 * S / 10e9 + 6 * 1e-6 + 2.0 / 2 * (S / 4) / (2 * 1e9 / 4) + 2 * 10e-6;
  EXPECT_NEAR(allreduce_seconds(c, 8, S), two, 1e-12);
}

// Sequential: each step is the compute, then every bucket's all-reduce back to back,
// then the optimizer; nothing overlaps, so the contention factors do not matter.
TEST(SimulatorTest, ASequentialStepIsComputeThenCommunicationThenOptimizer) {
  const Cluster cluster = round_cluster(1, 2, 0.5, 0.5);
  const TrainConfig config = mlp_config("mlp:4x512", 2, "sequential");
  const TrainResult r = simulate_training(config, {.cluster = cluster});
  const UnitCosts k = unit_costs(config, cluster);
  const double compute = std::accumulate(k.forward.begin(), k.forward.end(), 0.0) +
                         std::accumulate(k.backward.begin(), k.backward.end(), 0.0) +
                         k.loss_forward + k.loss_backward;
  double comm = 0;
  for (const Bucket& b : r.buckets)
    comm += allreduce_seconds(cluster, 2, static_cast<double>(b.bytes()));
  ASSERT_GT(r.buckets.size(), 1u);
  ASSERT_EQ(r.steps.size(), 4u);  // 2 ranks x 2 steps
  for (const StepRecord& s : r.steps) {
    EXPECT_NEAR(seconds(s.end_ns - s.start_ns), compute + comm + k.optimizer, 4e-9) << s.step;
  }
  const auto metrics = compute_step_metrics(r.timeline);
  ASSERT_EQ(metrics.size(), 2u);
  EXPECT_EQ(metrics[0].t_ovl_ns, 0);
  EXPECT_NEAR(seconds(static_cast<std::int64_t>(metrics[0].t_comm_ns)), comm, 4e-9);
  // One wait span per bucket: the whole all-reduce is waited for.
  const auto waits = std::count_if(r.timeline.spans.begin(), r.timeline.spans.end(),
                                   [](const Span& s) { return s.lane == Lane::kWait; });
  EXPECT_EQ(static_cast<std::size_t>(waits), 2 * 2 * r.buckets.size());
}

// --overlap-optimizer on the sequential strategy: every bucket goes after backward, back
// to back; bucket b's update starts when its own all-reduce and the update before it are
// done, so each update hides under the next bucket's all-reduce.
TEST(SimulatorTest, OverlappedUpdatesFollowEachBucketsOwnAllreduce) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = mlp_config("mlp:4x512", 2, "sequential");
  config.reducer.plan.bucket_cap_bytes = 1 << 20;  // several buckets
  const UnitCosts k = unit_costs(config, cluster);
  const double compute = std::accumulate(k.forward.begin(), k.forward.end(), 0.0) +
                         std::accumulate(k.backward.begin(), k.backward.end(), 0.0) +
                         k.loss_forward + k.loss_backward;
  const TrainResult plain = simulate_training(config, {.cluster = cluster});
  config.reducer.overlap_optimizer = true;
  const TrainResult r = simulate_training(config, {.cluster = cluster});
  ASSERT_GT(r.buckets.size(), 2u);
  double comm_end = compute, update_end = compute;
  for (const Bucket& b : r.buckets) {
    comm_end += allreduce_seconds(cluster, 2, static_cast<double>(b.bytes()));
    update_end = std::max(comm_end, update_end) +
                 k.optimizer * static_cast<double>(b.end - b.begin) / k.optimizer_numel;
  }
  for (const StepRecord& s : r.steps) {
    EXPECT_NEAR(seconds(s.end_ns - s.start_ns), update_end, 4e-9) << s.step;
  }
  EXPECT_LT(r.steps[0].end_ns - r.steps[0].start_ns,
            plain.steps[0].end_ns - plain.steps[0].start_ns);
  std::size_t updates = 0;
  for (const Span& s : r.timeline.spans) updates += s.kind == SpanKind::kOptimizer;
  EXPECT_EQ(updates, 2 * 2 * r.buckets.size());  // a span per bucket, rank and step
}

// --double-buffer: the previous step's all-reduces go out as the step begins and run under
// its forward and backward; when they take less than that, the step is its compute and
// its update, and every all-reduce starts with the step.
TEST(SimulatorTest, DoubleBufferingHidesTheAllreducesUnderTheWholeStep) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = mlp_config("mlp:4x512", 2, "bucketed");
  config.batch = 256;  // compute longer than the all-reduces
  config.reducer.double_buffer = true;
  const UnitCosts k = unit_costs(config, cluster);
  const double compute = std::accumulate(k.forward.begin(), k.forward.end(), 0.0) +
                         std::accumulate(k.backward.begin(), k.backward.end(), 0.0) +
                         k.loss_forward + k.loss_backward;
  const TrainResult r = simulate_training(config, {.cluster = cluster});
  double comm = 0;
  for (const Bucket& b : r.buckets)
    comm += allreduce_seconds(cluster, 2, static_cast<double>(b.bytes()));
  ASSERT_LT(comm, compute);
  for (const StepRecord& s : r.steps) {
    EXPECT_NEAR(seconds(s.end_ns - s.start_ns), compute + k.optimizer, 4e-9) << s.step;
  }
  for (const Span& s : r.timeline.spans) {
    if (s.kind != SpanKind::kAllreduce || s.rank != 0 || s.step != 0 || s.tag != 0) continue;
    EXPECT_EQ(s.start_ns, r.steps[0].start_ns) << "the first bucket goes out as the step begins";
  }
}

// --compress (Note [compression] in ddp/reducer.cpp): fp16 moves half the bytes, each
// bucket cast before its all-reduce and widened after its wait (6 bytes per element at the
// memory's rate, spans named "compress"); PowerSGD two all-reduces per bucket of the
// factors' sizes, the second after backward.
TEST(SimulatorTest, CompressionHalvesTheBytesAndPricesItsCasts) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = mlp_config("mlp:4x512", 2, "layerwise");
  const TrainResult plain = simulate_training(config, {.cluster = cluster});
  config.reducer.compress = Compression::parse("fp16");
  const TrainResult half = simulate_training(config, {.cluster = cluster});
  EXPECT_EQ(2 * half.bytes_per_step, plain.bytes_per_step);
  EXPECT_EQ(half.uncompressed_bytes_per_step, plain.bytes_per_step);
  const UnitCosts k = unit_costs(config, cluster);
  double casts = 0;
  int spans = 0;
  for (const Span& s : half.timeline.spans) {
    if (s.rank != 0 || s.step != 0 || s.name != op_name(ModelOp::kCompress)) continue;
    casts += seconds(s.end_ns - s.start_ns);
    ++spans;
  }
  EXPECT_EQ(spans, 2 * static_cast<int>(half.buckets.size()));
  // Every element cast twice; casts overlapping an all-reduce run slower (contention).
  EXPECT_GE(
      casts,
      2 * 6.0 * static_cast<double>(ModelLayout(config.model).numel()) * k.rates.byte_s - 1e-9);
  config.reducer.compress = Compression::parse("powersgd:1");
  const TrainResult low = simulate_training(config, {.cluster = cluster});
  EXPECT_LT(low.bytes_per_step, plain.bytes_per_step / 50);
  int allreduces = 0;
  for (const Span& s : low.timeline.spans) {
    if (s.rank == 0 && s.step == 0 && s.kind == SpanKind::kAllreduce) ++allreduces;
  }
  EXPECT_EQ(allreduces, 2 * static_cast<int>(low.buckets.size()));  // P and Q of each bucket
}

// Layerwise on 2 layers: the last layer's all-reduce starts when its backward ends and
// overlaps layer 0's backward. Both slow down while they overlap; the hand computation
// follows the piecewise rates.
TEST(SimulatorTest, OverlapSlowsBothLanesByTheProfilesFactors) {
  const double cs = 0.25, ms = 0.5;
  const Cluster cluster = round_cluster(1, 2, cs, ms);
  TrainConfig config = mlp_config("linear:1024x1024", 2, "layerwise");
  config.model = ModelSpec::parse("mlp:2x1024");
  config.steps = 1;
  const TrainResult r = simulate_training(config, {.cluster = cluster});
  const UnitCosts k = unit_costs(config, cluster);
  ASSERT_EQ(r.buckets.size(), 2u);
  // Plan order: the last layer's bucket first.
  const double c1 = allreduce_seconds(cluster, 2, static_cast<double>(r.buckets[0].bytes()));
  const double c0 = allreduce_seconds(cluster, 2, static_cast<double>(r.buckets[1].bytes()));
  const double b0 = k.backward[0];
  const double t1 = k.forward[0] + k.forward[1] + k.loss_forward + k.loss_backward + k.backward[1];
  // From t1 both run: compute at 1/(1+cs), comm at 1/(1+ms).
  double end;
  if (b0 * (1 + cs) <= c1 * (1 + ms)) {
    const double tb = t1 + b0 * (1 + cs);               // layer 0's backward ends
    const double left = c1 - b0 * (1 + cs) / (1 + ms);  // bucket 1's work left, full rate
    end = tb + left;                                    // then bucket 0 alone
    end = std::max(end, tb) + c0;
  } else {
    const double tc = t1 + c1 * (1 + ms);               // bucket 1 done first
    const double left = b0 - c1 * (1 + ms) / (1 + cs);  // layer 0's backward left
    end = tc + left + c0;
  }
  end += k.optimizer;
  for (const StepRecord& s : r.steps) EXPECT_NEAR(seconds(s.end_ns - s.start_ns), end, 4e-9);
  const auto metrics = compute_step_metrics(r.timeline);
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_GT(metrics[0].t_ovl_ns, 0);
}

TEST(SimulatorTest, AStragglerDelaysEveryRanksAllreduceAndTheOthersWait) {
  const Cluster cluster = round_cluster(1, 4);
  const TrainConfig config = mlp_config("mlp:4x512", 4, "sequential");
  const TrainResult even = simulate_training(config, {.cluster = cluster});
  const TrainResult slow =
      simulate_training(config, {.cluster = cluster, .stragglers = {{.rank = 2, .compute = 2}}});
  const UnitCosts k = unit_costs(config, cluster);
  const double compute = std::accumulate(k.forward.begin(), k.forward.end(), 0.0) +
                         std::accumulate(k.backward.begin(), k.backward.end(), 0.0) +
                         k.loss_forward + k.loss_backward;
  auto step0 = [](const TrainResult& r, int rank) {
    for (const StepRecord& s : r.steps) {
      if (s.step == 0 && s.rank == rank) return seconds(s.end_ns - s.start_ns);
    }
    return -1.0;
  };
  // Rank 2 computes twice as long (optimizer included); the others wait for it before
  // the first all-reduce can move.
  EXPECT_NEAR(step0(slow, 2) - step0(even, 2), compute + k.optimizer, 4e-9);
  EXPECT_NEAR(step0(slow, 0) - step0(even, 0), compute, 4e-9);
  double waited = 0;
  for (const Span& s : slow.timeline.spans) {
    if (s.rank == 0 && s.step == 0 && s.lane == Lane::kWait) waited += seconds(s.duration_ns());
  }
  double waited_even = 0;
  for (const Span& s : even.timeline.spans) {
    if (s.rank == 0 && s.step == 0 && s.lane == Lane::kWait)
      waited_even += seconds(s.duration_ns());
  }
  EXPECT_NEAR(waited - waited_even, compute, 4e-9);

  // A timeline of 2 ranks keeps the straggler's class and the first other rank; every
  // rank's steps remain.
  const TrainResult few = simulate_training(
      config, {.cluster = cluster, .stragglers = {{.rank = 2, .compute = 2}}, .recorded_ranks = 2});
  std::set<int> ranks;
  for (const Span& s : few.timeline.spans) ranks.insert(s.rank);
  EXPECT_EQ(ranks, (std::set<int>{0, 2}));
  EXPECT_EQ(few.steps.size(), slow.steps.size());
}

// Note [a rank's own start]: as a measured span does, a rank's span of a collective starts
// when its own wire took it up (its post, or the end of its collective before), so the
// rank that arrived first holds the wait for the straggler in its span, and the analysis
// of waiting reads that as skew; the transfer itself moves once both have posted.
TEST(SimulatorTest, ARanksCollectiveSpanStartsWhenItsOwnWireTookItUp) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = mlp_config("mlp:4x512", 2, "layerwise");
  config.steps = 1;
  const TrainResult r =
      simulate_training(config, {.cluster = cluster, .stragglers = {{.rank = 1, .compute = 2}}});
  std::map<int, std::vector<Span>> allreduces;  // by rank, in issue order
  for (const Span& s : r.timeline.spans) {
    if (s.kind == SpanKind::kAllreduce) allreduces[s.rank].push_back(s);
  }
  for (auto& [rank, spans] : allreduces) {
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.issue_ns < b.issue_ns; });
  }
  const std::vector<Span>& fast = allreduces[0];
  const std::vector<Span>& slow = allreduces[1];
  ASSERT_GE(fast.size(), 3u);
  ASSERT_EQ(fast.size(), slow.size());
  EXPECT_LT(fast[0].start_ns, slow[0].start_ns);  // the first waited for the straggler
  double fast_comm = 0, slow_comm = 0;
  for (std::size_t b = 0; b < fast.size(); ++b) {
    const std::int64_t wire_free = b == 0 ? 0 : fast[b - 1].end_ns;
    EXPECT_EQ(fast[b].start_ns, std::max(fast[b].issue_ns, wire_free)) << b;
    EXPECT_EQ(fast[b].end_ns, slow[b].end_ns) << b;      // one collective, ended for both
    EXPECT_LE(fast[b].start_ns, slow[b].start_ns) << b;  // the straggler posts later
    fast_comm += seconds(fast[b].duration_ns());
    slow_comm += seconds(slow[b].duration_ns());
  }
  EXPECT_GT(fast_comm, slow_comm);  // the first to arrive waited inside its spans
  const WaitingAnalysis waiting = explain_waiting(r.timeline);
  ASSERT_NE(waiting.rank(0), nullptr);
  EXPECT_GT(waiting.rank(0)->skew_ns, 0);
  EXPECT_EQ(waiting.most_often_last, 1);

  // Alike ranks post together: their spans of a collective coincide.
  const TrainResult even = simulate_training(config, {.cluster = cluster});
  std::map<std::tuple<int, int>, std::vector<std::int64_t>> starts;  // (step, tag) -> starts
  for (const Span& s : even.timeline.spans) {
    if (s.kind == SpanKind::kAllreduce) starts[{s.step, s.tag}].push_back(s.start_ns);
  }
  for (const auto& [key, at] : starts) {
    ASSERT_EQ(at.size(), 2u);
    EXPECT_EQ(at[0], at[1]) << std::get<1>(key);
  }
}

// Note [the last issuer's core]: the rank whose issue lets a collective move (here always
// the straggler) goes on with its next operation only once issuer_held of the transfer has
// gone by; a rank that issued it earlier goes on at once.
TEST(SimulatorTest, TheLastIssuerComputesAgainAsFarIntoTheTransferAsItsCoreIsHeld) {
  TrainConfig config = mlp_config("mlp:8x512", 2, "layerwise");
  config.steps = 1;
  std::map<double, std::int64_t> step_ns;
  for (const double held : {0.0, 0.5, 1.0}) {
    Cluster cluster = round_cluster(1, 2);
    cluster.intra.bandwidth_bytes_per_s = 100e9;  // each transfer moves before the next issue
    cluster.device.issuer_held = held;
    const TrainResult r =
        simulate_training(config, {.cluster = cluster, .stragglers = {{.rank = 1, .compute = 2}}});
    std::map<int, std::vector<Span>> own;  // by rank: what its training thread did, by start
    std::map<int, std::vector<Span>> allreduces;
    for (const Span& s : r.timeline.spans) {
      if (s.kind == SpanKind::kAllreduce) allreduces[s.rank].push_back(s);
      if (s.lane != Lane::kComm) own[s.rank].push_back(s);
    }
    for (auto& [rank, spans] : own) {
      std::sort(spans.begin(), spans.end(),
                [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
    }
    const auto next_after = [&](int rank, std::int64_t t) {
      const auto it = std::find_if(own[rank].begin(), own[rank].end(),
                                   [&](const Span& s) { return s.start_ns >= t; });
      return it == own[rank].end() ? std::int64_t{-1} : it->start_ns;
    };
    int checked = 0;
    for (const Span& s : allreduces[1]) {
      if (s.start_ns != s.issue_ns) continue;  // it queued: the fast rank had it moving
      const std::int64_t expected = s.issue_ns + std::llround(held * (s.end_ns - s.issue_ns));
      EXPECT_NEAR(next_after(1, s.issue_ns), expected, 2) << held << " tag " << s.tag;
      ++checked;
    }
    EXPECT_GE(checked, 6) << held;
    for (const Span& s : allreduces[0]) {
      EXPECT_LT(s.issue_ns, s.end_ns);
      EXPECT_EQ(next_after(0, s.issue_ns), s.issue_ns) << held << " tag " << s.tag;
    }
    step_ns[held] = r.steps.back().end_ns - r.steps.back().start_ns;
  }
  EXPECT_LT(step_ns[0.0], step_ns[0.5]);
  EXPECT_LT(step_ns[0.5], step_ns[1.0]);
}

TEST(ExpectedSlowestTest, IsTheLargestOfNStandardNormals) {
  EXPECT_EQ(expected_slowest(1), 0);
  // The closed forms for 2 to 5 (1/sqrt(pi), 3/(2 sqrt(pi)), ...) and the tables' 10 and 100.
  EXPECT_NEAR(expected_slowest(2), 1 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_slowest(3), 1.5 / std::sqrt(std::numbers::pi), 1e-9);
  EXPECT_NEAR(expected_slowest(4), 1.0293753730, 1e-9);
  EXPECT_NEAR(expected_slowest(5), 1.1629644736, 1e-9);
  EXPECT_NEAR(expected_slowest(10), 1.5387527, 1e-6);
  EXPECT_NEAR(expected_slowest(100), 2.5075937, 1e-6);
}

// Note [ranks apart]: with a device's compute_jitter sigma the last of N ranks alike
// computes at the expected slowest pace, 1 + sigma e(N), and every other at
// 1 - sigma e(N) / (N - 1): the same step as those paces given as stragglers, and a
// longer one than alike ranks take. A pipeline's ranks alike are one stage's: with 8
// ranks on 2 stages, 4 replicas of each, ranks 6 and 7 (the last replica) are slow.
TEST(SimulatorTest, JitteringRanksRunAsTheExpectedSlowestAndTheRest) {
  for (const auto& [ranks, pipeline] : {std::pair{2, false}, {4, false}, {8, true}}) {
    Cluster cluster = round_cluster(1, ranks);
    const TrainConfig config = pipeline ? pipeline_config("mlp:4x512", ranks, 2)
                                        : mlp_config("mlp:4x512", ranks, "bucketed");
    const int stage_ranks = pipeline ? ranks / 2 : ranks;
    const double spread = 0.1 * expected_slowest(stage_ranks);
    std::vector<Straggler> paces;
    for (int r = 0; r < ranks; ++r) {
      const bool slowest = pipeline ? r >= ranks - 2 : r == ranks - 1;
      paces.push_back(
          {.rank = r, .compute = slowest ? 1 + spread : 1 - spread / (stage_ranks - 1)});
    }
    const TrainResult alike = simulate_training(config, {.cluster = cluster});
    const TrainResult given = simulate_training(config, {.cluster = cluster, .stragglers = paces});
    cluster.device.compute_jitter = 0.1;
    const TrainResult jittered = simulate_training(config, {.cluster = cluster});
    const auto spans_of = [](const TrainResult& r) {
      std::vector<std::tuple<int, std::int64_t, std::int64_t, int, int>> out;
      for (const Span& s : r.timeline.spans) {
        out.emplace_back(s.rank, s.start_ns, s.end_ns, static_cast<int>(s.kind), s.tag);
      }
      std::sort(out.begin(), out.end());
      return out;
    };
    EXPECT_EQ(spans_of(jittered), spans_of(given)) << ranks;
    ASSERT_EQ(jittered.steps.size(), alike.steps.size());
    for (std::size_t i = 0; i < alike.steps.size(); ++i) {
      const StepRecord& a = alike.steps[i];
      const StepRecord& j = jittered.steps[i];
      EXPECT_GT(j.end_ns - j.start_ns, a.end_ns - a.start_ns) << ranks << " rank " << a.rank;
    }
  }
}

// The same spans in the same order, their starts and ends within `ns`.
void expect_same_spans(const TrainResult& a, const TrainResult& b, std::int64_t ns) {
  ASSERT_EQ(a.timeline.spans.size(), b.timeline.spans.size());
  for (std::size_t i = 0; i < a.timeline.spans.size(); ++i) {
    EXPECT_LE(std::abs(a.timeline.spans[i].start_ns - b.timeline.spans[i].start_ns), ns) << i;
    EXPECT_LE(std::abs(a.timeline.spans[i].end_ns - b.timeline.spans[i].end_ns), ns) << i;
  }
}

// A part of every step's, compute_jitter_s, is its share of the rank's compute in a step
// as the model prices it: j_s = 0.1 T paces the ranks as compute_jitter 0.1 does.
TEST(SimulatorTest, RanksApartByAPartOfEveryStepIsItsShareOfTheStep) {
  const TrainConfig config = mlp_config("mlp:4x512", 2, "bucketed");
  Cluster cluster = round_cluster(1, 2);
  const UnitCosts costs = unit_costs(config, cluster);
  double step = costs.loss_forward + costs.loss_backward + costs.optimizer;
  for (std::size_t u = 0; u < costs.forward.size(); ++u)
    step += costs.forward[u] + costs.backward[u];
  cluster.device.compute_jitter = 0.1;
  const TrainResult relative = simulate_training(config, {.cluster = cluster});
  cluster.device.compute_jitter = 0;
  cluster.device.compute_jitter_s = 0.1 * step;
  const TrainResult fixed = simulate_training(config, {.cluster = cluster});
  expect_same_spans(fixed, relative, 1);
  // Both parts at once add as squares: 0.06 and 0.08 T are 0.1.
  cluster.device.compute_jitter = 0.06;
  cluster.device.compute_jitter_s = 0.08 * step;
  expect_same_spans(simulate_training(config, {.cluster = cluster}), relative, 1);
}

// A pipeline of one replica runs different work on every rank: no rank is alike another,
// so compute_jitter leaves its stages at the model's paces (it priced the lighter stage
// of a 2-stage mlp slow when the last rank was taken for the slowest).
TEST(SimulatorTest, APipelineOfOneReplicaHasNoRanksAlike) {
  Cluster cluster = round_cluster(1, 2);
  const TrainConfig config = pipeline_config("mlp:4x512", 2, 2);
  const TrainResult alike = simulate_training(config, {.cluster = cluster});
  cluster.device.compute_jitter = 0.1;
  const TrainResult jittered = simulate_training(config, {.cluster = cluster});
  expect_same_spans(jittered, alike, 0);
}

// A replay's ranks keep their own pace (experiment/replay.cpp): a rank faster than the
// typical one computes faster (a factor under 1 is not the typical rank's), and its idle
// gaps before passes take its own factor times the typical rank's.
TEST(SimulatorTest, ARanksComputeAndIdleFactorsAreItsOwn) {
  const Cluster cluster = round_cluster(1, 2);
  const TrainConfig config = mlp_config("mlp:4x512", 2, "sequential");
  SimulateOptions options{.cluster = cluster,
                          .stragglers = {{.rank = 1, .compute = 0.5, .idle = 3}}};
  options.idle_before = [](SpanKind kind, int tag) {
    return kind == SpanKind::kForward && tag == 1 ? 1e-3 : 0.0;
  };
  const TrainResult r = simulate_training(config, options);
  std::map<std::pair<int, int>, const Span*> forward;  // (rank, unit) in step 0
  for (const Span& s : r.timeline.spans) {
    if (s.step == 0 && s.lane == Lane::kCompute && s.kind == SpanKind::kForward)
      forward[{s.rank, s.tag}] = &s;
  }
  for (const int unit : {0, 1, 2}) {
    EXPECT_NEAR(seconds(forward.at({1, unit})->duration_ns()),
                0.5 * seconds(forward.at({0, unit})->duration_ns()), 2e-9)
        << unit;
  }
  const auto idle = [&](int rank) {
    return seconds(forward.at({rank, 1})->start_ns - forward.at({rank, 0})->end_ns);
  };
  EXPECT_NEAR(idle(0), 1e-3, 2e-9);
  EXPECT_NEAR(idle(1), 3e-3, 2e-9);
}

// Note [gaps beside waits]: a replay's gap before a pass runs from the end of the rank's
// work before it, beside the waits the pass follows: the optimizer starts at the later of
// its gap's end and its all-reduces' ends, waiting only for what is left.
TEST(SimulatorTest, AGapRunsBesideTheWaitsBeforeItsPass) {
  const Cluster cluster = round_cluster(1, 2);
  const TrainConfig config = mlp_config("mlp:4x512", 2, "sequential");
  struct Rank0 {
    double backward_end = 0, comm_end = 0, optimizer_start = 0, waited = 0;
  };
  const auto run = [&](double gap) {
    SimulateOptions options{.cluster = cluster};
    options.idle_before = [gap](SpanKind kind, int) {
      return kind == SpanKind::kOptimizer ? gap : 0.0;
    };
    Rank0 r;
    for (const Span& s : simulate_training(config, options).timeline.spans) {
      if (s.step != 0 || s.rank != 0) continue;
      const double end = seconds(s.end_ns);
      if (s.kind == SpanKind::kBackward) r.backward_end = std::max(r.backward_end, end);
      if (s.lane == Lane::kComm) r.comm_end = std::max(r.comm_end, end);
      if (s.kind == SpanKind::kOptimizer) r.optimizer_start = seconds(s.start_ns);
      if (s.lane == Lane::kWait) r.waited += seconds(s.duration_ns());
    }
    return r;
  };
  const Rank0 none = run(0);
  const double comm = none.comm_end - none.backward_end;
  ASSERT_GT(comm, 0);
  // Half the all-reduces' time: hidden beside them, the rest waited for.
  const Rank0 half = run(comm / 2);
  EXPECT_NEAR(half.optimizer_start, none.comm_end, 2e-9);
  EXPECT_NEAR(half.waited, comm / 2, 2e-9);
  // Twice it: the optimizer after the gap, nothing waited for.
  const Rank0 twice = run(2 * comm);
  EXPECT_NEAR(twice.optimizer_start, none.backward_end + 2 * comm, 2e-9);
  EXPECT_EQ(twice.waited, 0);
}

TEST(CollectiveSecondsTest, AReduceScatterOrAllgatherIsHalfAnAllreduce) {
  for (const Cluster& c : {round_cluster(1, 8), round_cluster(4, 4)}) {
    for (int n : {2, 8, 16}) {
      if (n > c.devices()) continue;
      const double ar = collective_seconds(c, SpanKind::kAllreduce, n, 48e6);
      EXPECT_NEAR(collective_seconds(c, SpanKind::kReduceScatter, n, 48e6), ar / 2, 1e-15) << n;
      EXPECT_NEAR(collective_seconds(c, SpanKind::kAllgather, n, 48e6), ar / 2, 1e-15) << n;
    }
  }
}

// Across many nodes an all-reduce takes a tree where its 2 log2(n) hops beat the ring's
// 2 (n-1) (small messages), and the ring where its bandwidth term wins (large ones).
TEST(CollectiveSecondsTest, ManyNodesTakeTheTreeWhereItIsFaster) {
  const Cluster c = round_cluster(16, 4);
  const auto inside = [](double S) { return 2.0 * 3 / 4 * S / 10e9 + 6 * 1e-6; };
  const double net = 2 * 1e9 / 4;  // a device's share of the node's 2 NICs
  double S = 4096;
  EXPECT_NEAR(allreduce_seconds(c, 64, S), inside(S) + 2 * (S / 4) / net + 2 * 4 * 10e-6, 1e-12);
  S = 4e9;
  EXPECT_NEAR(allreduce_seconds(c, 64, S),
              inside(S) + 2.0 * 15 / 16 * (S / 4) / net + 2 * 15 * 10e-6, 1e-9);
  // Reduce-scatter and all-gather stay rings.
  EXPECT_NEAR(collective_seconds(c, SpanKind::kAllgather, 64, 4096),
              3.0 / 4 * 4096 / 10e9 + 3 * 1e-6 + 15.0 / 16 * 1024 / net + 15 * 10e-6, 1e-12);
}

// A degraded node slows every collective that spans it, at its link's pace, and nothing
// that does not.
TEST(CollectiveSecondsTest, ADegradedLinkSlowsTheCollectivesThatSpanIt) {
  Cluster c = round_cluster(4, 4);
  c.degraded.push_back(DegradedLink::parse("node=2,network=0.5x,intra=0.25"));
  const double S = 64e6;
  const double inside = 2.0 * 3 / 4 * S / (0.25 * 10e9) + 6 * 1e-6;
  const double across = 2.0 * 3 / 4 * (S / 4) / (0.5 * 2 * 1e9 / 4) + 6 * 10e-6;
  EXPECT_NEAR(allreduce_seconds(c, 16, S), inside + across, 1e-12);
  // Two nodes (0 and 1) do not reach node 2.
  EXPECT_NEAR(allreduce_seconds(c, 8, S), allreduce_seconds(round_cluster(4, 4), 8, S), 1e-15);
  for (const char* bad : {"node=1", "node=1,network=0", "node=1,network=2x", "intra=0.5",
                          "node=-1,intra=0.5", "node=1,network=fast"}) {
    EXPECT_THROW(DegradedLink::parse(bad), UsageError) << bad;
  }
}

// What the sharded hand computations need: per unit, its padded bytes and the seconds of
// its all-gather (= its reduce-scatter) on `ranks` ranks; the step's compute.
struct ShardedCase {
  std::vector<double> gather;  // per unit
  double compute = 0;
  double optimizer = 0;  // SGD on the rank's shards
  int units = 0;
  std::int64_t full = 0;     // bytes of every unit, padded
  std::int64_t largest = 0;  // bytes of the largest unit, padded
};

ShardedCase sharded_case(const TrainConfig& config, const Cluster& cluster) {
  const ModelLayout layout(config.model, sharded_layout(config.ranks));
  const UnitCosts k = unit_costs(config, cluster);
  ShardedCase c;
  c.units = layout.units();
  double shard_numel = 0;
  for (int u = 0; u < layout.units(); ++u) {
    const double numel = static_cast<double>(layout.unit(u).padded_end - layout.unit(u).begin);
    c.gather.push_back(collective_seconds(cluster, SpanKind::kAllgather, config.ranks, 4 * numel));
    shard_numel += numel / config.ranks;
    c.full += static_cast<std::int64_t>(4 * numel);
    c.largest = std::max(c.largest, static_cast<std::int64_t>(4 * numel));
  }
  c.compute = std::accumulate(k.forward.begin(), k.forward.end(), 0.0) +
              std::accumulate(k.backward.begin(), k.backward.end(), 0.0) + k.loss_forward +
              k.loss_backward;
  c.optimizer = k.optimizer * shard_numel / k.optimizer_numel;
  return c;
}

int count_spans(const TrainResult& r, int rank, SpanKind kind) {
  return static_cast<int>(std::count_if(
      r.timeline.spans.begin(), r.timeline.spans.end(),
      [&](const Span& s) { return s.rank == rank && s.step == 0 && s.kind == kind; }));
}

// fsdp in the sequential scenario: every gather and reduce-scatter waited for as soon as
// it is issued. A unit's parameters are gathered before its forward and again before its
// backward, except the last unit, whose backward follows its forward at once.
TEST(SimulatorTest, ASequentialFsdpStepWaitsForEveryGatherAndReduceScatter) {
  const Cluster cluster = round_cluster(1, 2, 0.5, 0.5);
  TrainConfig config = mlp_config("mlp:4x512", 2, "fsdp");
  config.reducer.mode = CommMode::kSequential;
  const ShardedCase c = sharded_case(config, cluster);
  const TrainResult r = simulate_training(config, {.cluster = cluster});
  double comm = 0;
  for (int u = 0; u < c.units; ++u) {
    comm += c.gather[static_cast<std::size_t>(u)] * (u == c.units - 1 ? 2 : 3);  // AG, AG, RS
  }
  for (const StepRecord& s : r.steps) {
    EXPECT_NEAR(seconds(s.end_ns - s.start_ns), c.compute + comm + c.optimizer, 4e-9);
  }
  EXPECT_EQ(count_spans(r, 0, SpanKind::kAllgather), 2 * c.units - 1);
  EXPECT_EQ(count_spans(r, 1, SpanKind::kReduceScatter), c.units);
  EXPECT_EQ(count_spans(r, 1, SpanKind::kWait), 3 * c.units - 1);
  // Memory as ShardedSync keeps it: shards of everything, one unit gathered at a time.
  ASSERT_EQ(r.memory.size(), 2u);
  EXPECT_EQ(r.memory[0].state.params, c.full / 2);
  EXPECT_EQ(r.memory[0].state.grads, c.full / 2);
  EXPECT_EQ(r.memory[0].state.optimizer, c.full / 2);
  EXPECT_EQ(r.memory[0].state.gathered_peak, c.largest);
  EXPECT_GT(r.memory[0].state.grads_peak, 0);
}

// Memory a sharded strategy gave back costs its bytes at the device's first-touch rate
// when touched again: in a sequential step (nothing overlaps) fsdp's every gather writes
// into a unit released, and zero2's and fsdp's first backward of each unit rewrites its
// gradient given back; zero1 gives nothing back. Units under 1 MiB are zeroed in place,
// not given back.
TEST(SimulatorTest, MemoryGivenBackCostsItsFirstTouch) {
  constexpr double kTouch = 1e10;
  const auto step_s = [](const TrainResult& r) {
    return seconds(r.steps[0].end_ns - r.steps[0].start_ns);
  };
  for (const char* strategy : {"fsdp", "zero2", "zero1"}) {
    Cluster cluster = round_cluster(1, 2, 0.5, 0.5);
    TrainConfig config = mlp_config("mlp:4x1024", 2, strategy);
    config.reducer.mode = CommMode::kSequential;
    config.steps = 1;
    const TrainResult free = simulate_training(config, {.cluster = cluster});
    cluster.device.first_touch_bytes_per_s = kTouch;
    const TrainResult paid = simulate_training(config, {.cluster = cluster});
    const ModelLayout layout(config.model, sharded_layout(2));
    const std::vector<std::int64_t> rewritten = backward_touched_bytes(layout);
    double touch = 0;
    for (int u = 0; u < layout.units(); ++u) {
      const auto i = static_cast<std::size_t>(u);
      EXPECT_EQ(rewritten[i], given_back_bytes(layout, u));  // an mlp's backward writes its own
      if (std::string(strategy) == "zero1") continue;
      touch += static_cast<double>(rewritten[i]) / kTouch;
      const double gathers =
          std::string(strategy) == "fsdp" ? (u == layout.units() - 1 ? 1 : 2) : 0;
      touch += gathers * static_cast<double>(given_back_bytes(layout, u)) / kTouch;
    }
    EXPECT_NEAR(step_s(paid) - step_s(free), touch, 4e-9) << strategy;
    config.reducer.mode = CommMode::kOff;  // compute-only: a replica, nothing given back
    EXPECT_FALSE(touched_again(config).params || touched_again(config).grads) << strategy;
  }
  // The huge pages a unit's values cover: 1024 x 1024 + 1024 floats (4.0 MiB) fault three
  // back in, the 10-class output layer's 41 KB one.
  const ModelLayout layout(ModelSpec::parse("mlp:4x1024"), sharded_layout(2));
  EXPECT_EQ(given_back_bytes(layout, 0), std::int64_t{6} << 20);
  EXPECT_EQ(given_back_bytes(layout, layout.units() - 1), std::int64_t{2} << 20);
  // Without the sharded layout's alignment a small unit is zeroed in place, not given back.
  EXPECT_EQ(given_back_bytes(ModelLayout(ModelSpec::parse("mlp:2x256")), 0), 0);
  // gpt: the head's backward is the first to write the tied embedding's gradient.
  const ModelLayout gpt(ModelSpec::parse("gpt:layers=1,dim=256,heads=4,seq=64"), sharded_layout(2));
  const std::vector<std::int64_t> rewritten = backward_touched_bytes(gpt);
  const int head = gpt.units() - 1;
  ASSERT_GT(given_back_bytes(gpt, 0), 0);
  EXPECT_EQ(rewritten[static_cast<std::size_t>(head)],
            given_back_bytes(gpt, head) + given_back_bytes(gpt, 0));
  EXPECT_EQ(rewritten[0], 0);
}

// The training thread's give-backs (Note [giving back, timed] in ddp/sharded.cpp), each
// DeviceProfile::give_back_s on the rank's critical path in a sequential step, drawn as
// idle-lane spans tagged with their unit: zero2 each unit's gradient once, fsdp its
// gradient and its parameters after each pass that released them (the last unit's kept
// from its forward to its backward), zero1 nothing.
TEST(SimulatorTest, EachGiveBackCostsTheDevicesTimeOnTheRanksThread) {
  constexpr double kGiveBack = 1e-4;
  const auto step_s = [](const TrainResult& r) {
    return seconds(r.steps[0].end_ns - r.steps[0].start_ns);
  };
  for (const auto& [strategy, per_step] :
       {std::pair{"fsdp", 4 + 7}, std::pair{"zero2", 4}, std::pair{"zero1", 0}}) {
    Cluster cluster = round_cluster(1, 2, 0.5, 0.5);
    TrainConfig config = mlp_config("mlp:4x1024", 2, strategy);
    config.reducer.mode = CommMode::kSequential;
    config.steps = 1;
    const TrainResult free = simulate_training(config, {.cluster = cluster});
    EXPECT_EQ(count_spans(free, 0, SpanKind::kMemory), 0) << strategy;
    cluster.device.give_back_s = kGiveBack;
    const TrainResult paid = simulate_training(config, {.cluster = cluster});
    EXPECT_NEAR(step_s(paid) - step_s(free), per_step * kGiveBack, 4e-9) << strategy;
    std::map<int, int> per_unit;
    for (const Span& sp : paid.timeline.spans) {
      if (sp.rank != 0 || sp.kind != SpanKind::kMemory) continue;
      EXPECT_EQ(sp.lane, Lane::kIdle) << strategy;
      EXPECT_EQ(paid.timeline.names->name(sp.name), "give back") << strategy;
      ++per_unit[sp.tag];
    }
    if (std::string(strategy) == "fsdp") {
      EXPECT_EQ(per_unit, (std::map<int, int>{{0, 3}, {1, 3}, {2, 3}, {3, 2}}));
    }
    EXPECT_EQ(count_spans(paid, 0, SpanKind::kMemory), per_step) << strategy;
  }
}

// Overlapped fsdp: with prefetch 0 every gather is issued just before the pass that needs
// it, and waits behind the reduce-scatter issued before it, so the step costs what the
// sequential one does. With prefetch 1 and compute longer than any collective (no
// contention), only the first gather and the last reduce-scatter are exposed.
TEST(SimulatorTest, FsdpPrefetchHidesEveryGatherButTheFirst) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = mlp_config("mlp:4x512", 2, "fsdp");
  config.batch = 8192;  // every pass outlasts every collective
  config.steps = 1;
  const ShardedCase c = sharded_case(config, cluster);
  const UnitCosts k = unit_costs(config, cluster);
  ASSERT_GT(*std::min_element(k.forward.begin(), k.forward.end()),
            *std::max_element(c.gather.begin(), c.gather.end()));
  double sequential = c.compute + c.optimizer;
  for (int u = 0; u < c.units; ++u)
    sequential += c.gather[static_cast<std::size_t>(u)] * (u == c.units - 1 ? 2 : 3);

  config.shard.prefetch = 0;
  TrainResult r = simulate_training(config, {.cluster = cluster});
  EXPECT_NEAR(seconds(r.steps[0].end_ns - r.steps[0].start_ns), sequential, 4e-9);

  config.shard.prefetch = 1;
  r = simulate_training(config, {.cluster = cluster});
  EXPECT_NEAR(seconds(r.steps[0].end_ns - r.steps[0].start_ns),
              c.gather[0] + c.compute + c.gather[0] + c.optimizer, 4e-9);
  // Kept from forward to backward: each unit gathered once.
  config.shard.reshard_after_forward = false;
  r = simulate_training(config, {.cluster = cluster});
  EXPECT_EQ(count_spans(r, 0, SpanKind::kAllgather), c.units);
}

// Contention by what overlaps: a sharded strategy's reduce-scatters and all-gathers slow
// compute (and are slowed) by the sharded factors, an all-reduce by the others.
TEST(SimulatorTest, ContentionIsTheFactorOfTheCollectivesFamilyInFlight) {
  const auto step_s = [](const TrainConfig& config, double compute_slow, double comm_slow,
                         std::optional<double> sharded_compute,
                         std::optional<double> sharded_comm) {
    Cluster cluster = round_cluster(1, 2, compute_slow, comm_slow);
    cluster.device.sharded_compute_slowdown = sharded_compute;
    cluster.device.sharded_comm_slowdown = sharded_comm;
    const TrainResult r = simulate_training(config, {.cluster = cluster});
    return seconds(r.steps[0].end_ns - r.steps[0].start_ns);
  };
  TrainConfig fsdp = mlp_config("mlp:4x512", 2, "fsdp");
  fsdp.batch = 512;
  fsdp.steps = 1;
  fsdp.shard.prefetch = 1;
  // fsdp runs only sharded collectives: its sharded factors are what the unset ones
  // (the others') would be.
  const double sharded = step_s(fsdp, 0.1, 0.2, 0.6, 0.3);
  EXPECT_EQ(sharded, step_s(fsdp, 0.6, 0.3, std::nullopt, std::nullopt));
  EXPECT_GT(sharded, step_s(fsdp, 0.1, 0.2, std::nullopt, std::nullopt));
  EXPECT_GT(sharded, step_s(fsdp, 0.6, 0.2, 0.6, 0.2));  // the comm factor is its own too
  // Layerwise runs all-reduces: the sharded factors leave it as it was.
  TrainConfig layerwise = mlp_config("mlp:4x512", 2, "layerwise");
  layerwise.steps = 1;
  const double allreduce = step_s(layerwise, 0.1, 0.2, std::nullopt, std::nullopt);
  EXPECT_EQ(step_s(layerwise, 0.1, 0.2, 0.6, 0.3), allreduce);
  EXPECT_GT(step_s(layerwise, 0.6, 0.3, 0.1, 0.2), allreduce);
}

// zero1 in the sequential scenario: each unit's reduce-scatter waited for after its
// backward, SGD on the shard, then every updated block gathered and waited for at the
// step's end. The model keeps full parameters and gradients.
TEST(SimulatorTest, ASequentialZero1StepReduceScattersThenGathersAfterTheOptimizer) {
  const Cluster cluster = round_cluster(1, 4, 0.5, 0.5);
  TrainConfig config = mlp_config("mlp:4x512", 4, "zero1");
  config.reducer.mode = CommMode::kSequential;
  const ShardedCase c = sharded_case(config, cluster);
  const TrainResult r = simulate_training(config, {.cluster = cluster});
  const double comm = 2 * std::accumulate(c.gather.begin(), c.gather.end(), 0.0);
  for (const StepRecord& s : r.steps) {
    EXPECT_NEAR(seconds(s.end_ns - s.start_ns), c.compute + comm + c.optimizer, 4e-9);
  }
  EXPECT_EQ(r.memory[3].state.params, c.full);
  EXPECT_EQ(r.memory[3].state.grads, c.full + c.full / 4);
  EXPECT_EQ(r.memory[3].state.gathered_peak, 0);
  EXPECT_EQ(r.bytes_per_step, 2 * c.full);
}

// A pipeline's compute follows its schedule exactly as engine/pipeline_schedule.h's
// idealized machine runs it: with free transfers and no contention every action of every
// stage starts and ends when simulate_schedule says, for each schedule.
TEST(SimulatorTest, PipelineStagesRunTheirScheduleAsTheIdealMachineDoes) {
  Cluster cluster = round_cluster(1, 4);
  cluster.intra = {.bandwidth_bytes_per_s = 1e300, .latency_s = 0};
  for (const char* schedule : {"gpipe", "1f1b", "interleaved:2"}) {
    TrainConfig config = mlp_config("mlp:8x256", 4, "bucketed");
    config.steps = 1;
    config.batch = 64;
    config.pipeline.stages = 4;
    config.pipeline.micro_batches = 8;
    config.pipeline.schedule = parse_schedule(schedule);
    const TrainResult r = simulate_training(config, {.cluster = cluster});
    const StagePlan plan = stage_plan(config);
    const UnitCosts k = unit_costs(config, cluster);
    const int U = static_cast<int>(k.forward.size());
    ScheduleCosts costs;
    for (const auto& [first, last] : plan.chunks) {
      double f = 0, b = 0;
      for (int u = first; u <= last; ++u) {
        f += k.forward[static_cast<std::size_t>(u)];
        b += k.backward[static_cast<std::size_t>(u)];
      }
      if (last == U - 1) {
        f += k.loss_forward;
        b += k.loss_backward;
      }
      costs.forward.push_back(f);
      costs.backward.push_back(b);
    }
    const SimulatedStep ideal = simulate_schedule(plan.shape, costs);
    for (int stage = 0; stage < 4; ++stage) {
      // The stage's compute spans in order, grouped into its actions.
      std::vector<Span> spans;
      for (const Span& s : r.timeline.spans) {
        if (s.rank == stage && s.lane == Lane::kCompute && s.kind != SpanKind::kOptimizer)
          spans.push_back(s);
      }
      std::sort(spans.begin(), spans.end(),
                [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
      std::size_t next = 0;
      for (const TimedAction& a : ideal.stages[static_cast<std::size_t>(stage)].actions) {
        const int g = global_chunk(plan.shape, stage, a.action.chunk);
        const auto [first, last] = plan.chunks[static_cast<std::size_t>(g)];
        const std::size_t n = static_cast<std::size_t>(last - first + 1) + (last == U - 1 ? 1 : 0);
        ASSERT_LE(next + n, spans.size()) << schedule;
        EXPECT_NEAR(seconds(spans[next].start_ns), a.start, 4e-9)
            << schedule << " stage " << stage << " " << to_string(a.action);
        EXPECT_NEAR(seconds(spans[next + n - 1].end_ns), a.end, 4e-9)
            << schedule << " stage " << stage << " " << to_string(a.action);
        EXPECT_EQ(spans[next].micro, a.action.micro);
        next += n;
      }
      EXPECT_EQ(next, spans.size()) << schedule;
    }
  }
}

// A unit's passes (Note [a GEMM's weights]): forward's product reads the weights, in
// quadrature with its FLOPs; backward's input gradient reads them again, except the mlp's
// first layer, which computes none, and every layer reads and writes its gradient (added
// into) at the memory bandwidth. Activations: out x rows, written and read in forward,
// twice that in backward.
TEST(UnitCostsTest, ProductsReadTheWeightsInQuadratureAndBackwardRewritesTheGradient) {
  TrainConfig config = mlp_config("mlp:3x64", 2, "bucketed");
  Cluster cluster = round_cluster(1, 2);
  for (const double weight_rate : {0.0, 2e9}) {
    cluster.device.weight_bytes_per_s = weight_rate;
    const double rate = weight_rate > 0 ? weight_rate : 1e12;  // else the memory's
    const UnitCosts k = unit_costs(config, cluster);
    const ModelLayout layout(config.model);
    ASSERT_EQ(k.backward_bytes.size(), 3u);
    for (int u = 0; u < 3; ++u) {
      const auto i = static_cast<std::size_t>(u);
      const LinearLayout& l = layout.layer(u);
      const double rows = micro_batch_rows(config);
      const double flops = 2 * rows * l.in * l.out;
      const double weights = 4.0 * static_cast<double>(layout.unit_end(u) - layout.unit_begin(u));
      const double activations = 4.0 * 2 * rows * l.out;
      EXPECT_DOUBLE_EQ(k.forward_weight_flops[i], flops) << u;
      EXPECT_DOUBLE_EQ(k.forward_weight_bytes[i], weights) << u;
      EXPECT_DOUBLE_EQ(k.forward_bytes[i], activations) << u;
      EXPECT_DOUBLE_EQ(k.backward_weight_flops[i], u == 0 ? 0 : flops) << u;
      EXPECT_DOUBLE_EQ(k.backward_weight_bytes[i], u == 0 ? 0 : weights) << u;
      EXPECT_DOUBLE_EQ(k.backward_bytes[i], 2 * weights + 2 * activations) << u;
      const double product = std::hypot(flops / 1e12, weights / rate);
      EXPECT_NEAR(k.forward[i], product + activations / 1e12, 1e-18) << u;
      EXPECT_NEAR(
          k.backward[i],
          (u == 0 ? flops / 1e12 : product + flops / 1e12) + (2 * weights + 2 * activations) / 1e12,
          1e-18)
          << u;
    }
  }
  // Few rows are bound by their weights, many by their FLOPs: per FLOP, a batch of 2's
  // forward costs more than a batch of 8192's, which runs at the GEMM rate.
  cluster.device.weight_bytes_per_s = 8e9;
  const auto per_flop = [&](int batch) {
    TrainConfig c = mlp_config("mlp:3x1024", 2, "bucketed");
    c.batch = batch;
    const UnitCosts k = unit_costs(c, cluster);
    return k.forward[1] / k.forward_flops[1];
  };
  EXPECT_GT(per_flop(2), 10 * per_flop(8192));
  EXPECT_LT(per_flop(8192), 1.01 / 1e12);
}

// Tensor parallelism cuts a pass into pieces, each with its share of the products' FLOPs
// and weights: the pieces sum to the pass, quadrature and all.
TEST(UnitCostsTest, TensorParallelPiecesSumToTheirPass) {
  TrainConfig config = mlp_config("gpt:layers=2,dim=64,heads=4,seq=16", 2, "bucketed");
  config.model.tensor = 2;
  config.batch = 4;
  Cluster cluster = round_cluster(1, 2);
  cluster.device.weight_bytes_per_s = 1e9;
  const UnitCosts k = unit_costs(config, cluster);
  ASSERT_FALSE(k.forward_pieces.empty());
  for (std::size_t u = 0; u < k.forward.size(); ++u) {
    double weight_flops = 0, weight_bytes = 0;
    for (const PassPiece& piece : k.forward_pieces[u]) {
      weight_flops += piece.weight_flops;
      weight_bytes += piece.weight_bytes;
    }
    EXPECT_NEAR(weight_flops, k.forward_weight_flops[u], 1e-6 * (1 + weight_flops)) << u;
    EXPECT_NEAR(weight_bytes, k.forward_weight_bytes[u], 1e-6 * (1 + weight_bytes)) << u;
    const PassRates rates{.flop_s = 1e-12, .byte_s = 1e-12, .weight_byte_s = 1e-9};
    EXPECT_NEAR(k.forward[u],
                pass_seconds(rates, k.forward_flops[u], k.forward_bytes[u],
                             k.forward_weight_flops[u], k.forward_weight_bytes[u]),
                1e-9 * k.forward[u])
        << u;
    if (u >= 1 && u <= 2) {
      EXPECT_GT(k.forward_weight_bytes[u], 0) << u;
    }
  }
}

// --split auto in a simulation: the units balanced by their predicted times, replayed ones
// included (options.costs), and the simulation runs that split.
TEST(SimulatorTest, SplitAutoBalancesThePredictedUnitTimes) {
  TrainConfig config = pipeline_config("mlp:4x64", 2, 2);
  config.pipeline.split_auto = true;
  SimulateOptions options{.cluster = round_cluster(1, 2)};
  UnitCosts heavy_first = unit_costs(config, options.cluster);
  ASSERT_EQ(heavy_first.forward.size(), 4u);
  heavy_first.forward = {10, 1, 1, 1};
  heavy_first.backward = {10, 1, 1, 1};
  heavy_first.loss_forward = heavy_first.loss_backward = 0;
  options.costs = &heavy_first;
  EXPECT_EQ(predicted_split(config, options), (std::vector<int>{1, 3}));
  const TrainResult r = simulate_training(config, options);
  EXPECT_NE(r.pipeline.find("units 0 | 1-3"), std::string::npos) << r.pipeline;
  // The loss belongs to the last unit: a heavy loss moves the cut the other way.
  heavy_first.forward = {1, 1, 1, 1};
  heavy_first.backward = {1, 1, 1, 1};
  heavy_first.loss_forward = 10;
  EXPECT_EQ(predicted_split(config, options), (std::vector<int>{3, 1}));
  // The cluster's own model: every unit of the split, each chunk at least one.
  options.costs = nullptr;
  const std::vector<int> split = predicted_split(config, options);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0] + split[1], 4);
}

// Pipeline replicas average each stage's gradients among themselves: one all-reduce group
// per stage, moving that stage's bytes; a straggler slows its own replica's stages and,
// through the stage's all-reduce, the others'.
TEST(SimulatorTest, PipelineReplicasAverageEachStagesGradients) {
  const Cluster cluster = round_cluster(1, 4);
  TrainConfig config = pipeline_config("mlp:4x512", 4, 4);
  const TrainResult even = simulate_training(config, {.cluster = cluster});
  const auto reduced = [](const TrainResult& r, int rank) {
    std::int64_t bytes = 0;
    for (const Span& s : r.timeline.spans) {
      if (s.rank == rank && s.kind == SpanKind::kAllreduce) bytes += s.bytes;
    }
    return bytes;
  };
  // Ranks 0 and 2 are stage 0 of replicas 0 and 1; ranks 1 and 3 stage 1.
  EXPECT_GT(reduced(even, 0), 0);
  EXPECT_EQ(reduced(even, 0), reduced(even, 2));
  EXPECT_EQ(reduced(even, 1), reduced(even, 3));
  EXPECT_EQ(reduced(even, 0) + reduced(even, 1),
            static_cast<std::int64_t>(4 * ModelLayout(config.model).numel()));
  const TrainResult slow =
      simulate_training(config, {.cluster = cluster, .stragglers = {{.rank = 3, .compute = 2}}});
  auto step_of = [](const TrainResult& r, int rank) {
    for (const StepRecord& s : r.steps) {
      if (s.rank == rank) return seconds(s.end_ns - s.start_ns);
    }
    return -1.0;
  };
  for (int rank = 0; rank < 4; ++rank) EXPECT_GT(step_of(slow, rank), step_of(even, rank)) << rank;
}

// A pipeline stage updates its own units' parameters only (StageSync): its optimizer span
// is the whole model's update times its share of the elements, the stages' summing to the
// whole.
TEST(SimulatorTest, APipelineStageUpdatesItsOwnUnitsOnly) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = pipeline_config("mlp:5x256", 2, 2);
  const TrainResult r = simulate_training(config, {.cluster = cluster});
  const UnitCosts k = unit_costs(config, cluster);
  const ModelLayout layout(config.model);
  const StagePlan plan = stage_plan(config);
  double total = 0;
  for (int stage = 0; stage < 2; ++stage) {
    const std::vector<bool> owned = plan.owned_units(stage, layout.units());
    double numel = 0;
    for (int u = 0; u < layout.units(); ++u) {
      if (owned[static_cast<std::size_t>(u)])
        numel += static_cast<double>(layout.unit_end(u) - layout.unit_begin(u));
    }
    double update = 0;
    for (const Span& s : r.timeline.spans) {
      if (s.rank == stage && s.kind == SpanKind::kOptimizer) update += seconds(s.duration_ns());
    }
    EXPECT_NEAR(update, k.optimizer * numel / k.optimizer_numel, 2e-9) << stage;
    EXPECT_LT(update, 0.9 * k.optimizer) << stage;
    total += update;
  }
  EXPECT_NEAR(total, k.optimizer, 4e-9);
}

// Replay's late starts (SimulateOptions::collective_delay): a collective starts its delay
// after it could, the ones behind it on the channel waiting; side by side
// (collectives_at_once) a collective starts when posted, whatever is in flight.
TEST(SimulatorTest, ACollectiveStartsItsDelayLateAndSideBySideWhenPosted) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = mlp_config("mlp:4x512", 2, "layerwise");
  config.steps = 1;
  const auto allreduces = [](const TrainResult& r) {
    std::vector<Span> out;
    for (const Span& s : r.timeline.spans) {
      if (s.rank == 0 && s.kind == SpanKind::kAllreduce) out.push_back(s);
    }
    std::sort(out.begin(), out.end(),
              [](const Span& a, const Span& b) { return a.issue_ns < b.issue_ns; });
    return out;  // in issue order
  };
  const std::vector<Span> plain = allreduces(simulate_training(config, {.cluster = cluster}));
  ASSERT_GE(plain.size(), 3u);
  constexpr double kDelay = 0.25;  // longer than the step: every collective waits for it
  SimulateOptions late{.cluster = cluster};
  late.collective_delay = [](SpanKind, int, std::int64_t) { return kDelay; };
  const std::vector<Span> delayed = allreduces(simulate_training(config, late));
  ASSERT_EQ(delayed.size(), plain.size());
  EXPECT_NEAR(seconds(delayed[0].start_ns - delayed[0].issue_ns), kDelay, 1e-9);
  for (std::size_t b = 1; b < delayed.size(); ++b) {
    // Each could start when the one before it ended, and starts kDelay after.
    EXPECT_NEAR(seconds(delayed[b].start_ns - delayed[b - 1].end_ns), kDelay, 1e-9) << b;
  }
  SimulateOptions at_once = late;
  at_once.collectives_at_once = true;
  const std::vector<Span> side = allreduces(simulate_training(config, at_once));
  ASSERT_EQ(side.size(), plain.size());
  for (std::size_t b = 0; b < side.size(); ++b) {
    EXPECT_NEAR(seconds(side[b].start_ns - side[b].issue_ns), kDelay, 1e-9) << b;
  }
  EXPECT_LT(side.back().start_ns, delayed.back().start_ns);  // not behind the others
}

// Replay's wake-ups (SimulateOptions::collective_wake_up): a rank waiting for a collective
// resumes that long after it ends; one that did not wait is not held.
TEST(SimulatorTest, ARankWaitingForACollectiveResumesItsWakeUpAfterItEnds) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = mlp_config("mlp:4x512", 2, "sequential");
  config.steps = 1;
  // One bucket: with two, the second moves while the first's waiter wakes up.
  config.reducer.plan.first_bucket_cap_bytes = config.reducer.plan.bucket_cap_bytes;
  constexpr double kWakeUp = 0.01;
  SimulateOptions late{.cluster = cluster};
  late.collective_wake_up = [](SpanKind, int, std::int64_t) { return kWakeUp; };
  const TrainResult plain = simulate_training(config, {.cluster = cluster});
  const TrainResult r = simulate_training(config, late);
  std::map<int, std::int64_t> ends;  // bucket -> its all-reduce's end on rank 0
  for (const Span& s : r.timeline.spans) {
    if (s.rank == 0 && s.kind == SpanKind::kAllreduce) ends[s.tag] = s.end_ns;
  }
  ASSERT_FALSE(ends.empty());
  int waits = 0;
  for (const Span& s : r.timeline.spans) {
    if (s.rank != 0 || s.lane != Lane::kWait) continue;
    ++waits;
    EXPECT_NEAR(seconds(s.end_ns - ends.at(s.tag)), kWakeUp, 1e-9) << s.tag;
  }
  EXPECT_EQ(waits, 1);
  // Sequential: the one bucket waited.
  EXPECT_NEAR(first_step_s(r) - first_step_s(plain), kWakeUp, 1e-9);
}

// A pipeline's transfers are late and woken late as collectives are (Note [point-to-point
// transfers late] in experiment/calibrate.cpp): each starts its delay after both ends
// posted it, and a stage waiting for one resumes its wake-up after it ends.
TEST(SimulatorTest, APipelinesTransfersStartTheirDelayLateAndWakeTheirWaitersLate) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = pipeline_config("mlp:4x512", 2, 2);
  constexpr double kDelay = 3e-4, kWakeUp = 2e-4;
  SimulateOptions late{.cluster = cluster};
  late.collective_delay = [](SpanKind kind, int, std::int64_t) {
    return kind == SpanKind::kSend ? kDelay : 0.0;
  };
  late.collective_wake_up = [](SpanKind kind, int, std::int64_t) {
    return kind == SpanKind::kSend ? kWakeUp : 0.0;
  };
  const TrainResult r = simulate_training(config, late);
  int sends = 0, waits = 0;
  double least = 1;
  for (const Span& s : r.timeline.spans) {
    if (s.kind == SpanKind::kSend) {
      // The sender's span starts when the transfer does: at least its delay after its
      // post, exactly that where the receiver had posted first.
      ++sends;
      const double after = seconds(s.start_ns - s.issue_ns);
      EXPECT_GE(after, kDelay - 1e-9) << s.tag;
      least = std::min(least, after);
    }
    if (s.kind != SpanKind::kRecv) continue;
    for (const Span& w : r.timeline.spans) {
      if (w.lane == Lane::kWait && w.rank == s.rank && w.start_ns <= s.end_ns &&
          w.end_ns >= s.end_ns) {
        ++waits;
        EXPECT_NEAR(seconds(w.end_ns - s.end_ns), kWakeUp, 1e-9) << s.tag;
      }
    }
  }
  EXPECT_NEAR(least, kDelay, 1e-9);
  EXPECT_EQ(sends, 4);  // two activations, two gradients
  EXPECT_GT(waits, 0);
  EXPECT_GT(first_step_s(r),
            first_step_s(simulate_training(config, {.cluster = cluster})) + kDelay);
}

// Transfers moving the same way through a device share its link. A comm-only gpipe step of
// 2 stages and 2 micro-batches: both activations leave stage 0 at once and share its link
// (each takes twice its time), then both gradients leave stage 1 at once.
TEST(SimulatorTest, ConcurrentTransfersShareTheirLink) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config = pipeline_config("mlp:4x512", 2, 2);
  config.compute = false;
  config.pipeline.schedule = parse_schedule("gpipe");
  const TrainResult r = simulate_training(config, {.cluster = cluster});
  const double bytes = 4.0 * micro_batch_rows(config) * 512;  // an activation of 512 wide
  const double alone = bytes / 10e9 + 1e-6;
  for (const StepRecord& s : r.steps) {
    EXPECT_NEAR(seconds(s.end_ns - s.start_ns), 4 * alone, 4e-9) << s.rank;
  }
}

TEST(SimulatorTest, WhatItCannotRunIsOneLineNamingTheFlag) {
  const Cluster cluster = round_cluster(1, 2);
  TrainConfig config;
  config = mlp_config("mlp:4x512", 3, "bucketed");
  EXPECT_THROW(simulate_training(config, {.cluster = cluster}), UsageError);  // 3 > 2 devices
  Cluster small = cluster;
  small.device.memory_bytes = 1e6;
  config = mlp_config("mlp:4x512", 2, "bucketed");
  try {
    simulate_training(config, {.cluster = small});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes"), std::string::npos) << e.what();
  }
  Cluster no_tf32 = cluster;
  no_tf32.device.peak_flops[1] = 0;
  config.precision = Precision::kTf32;
  EXPECT_THROW(simulate_training(config, {.cluster = no_tf32}), UsageError);
  EXPECT_THROW(simulate_training(mlp_config("mlp:4x512", 2, "bucketed"),
                                 {.cluster = cluster, .stragglers = {{.rank = 5, .compute = 2}}}),
               UsageError);
}

TEST(ClusterTest, ParsesCountsAndProfilesAndRefusesTheRest) {
  const Cluster a = parse_cluster("8x8xh100");
  EXPECT_EQ(a.nodes, 8);
  EXPECT_EQ(a.devices_per_node, 8);
  EXPECT_EQ(a.device.name, "h100-80gb");
  EXPECT_DOUBLE_EQ(a.device.peak(Precision::kBf16), 989.4e12);
  const Cluster b = parse_cluster("4xMI250");
  EXPECT_EQ(b.nodes, 1);
  EXPECT_EQ(b.devices_per_node, 4);
  EXPECT_EQ(b.device.peak(Precision::kTf32), 0);
  EXPECT_EQ(parse_cluster("a100").devices(), 1);
  for (const char* bad : {"8x8xh900", "0xh100", "8x8x8xh100", "x", "h"}) {
    try {
      parse_cluster(bad);
      FAIL() << bad;
    } catch (const UsageError& e) {
      EXPECT_TRUE(std::string(e.what()).starts_with("--cluster")) << e.what();
    }
  }
}

TEST(ClusterTest, AJsonFileOverridesAProfile) {
  const auto path = std::filesystem::temp_directory_path() / "tandem_cluster_test.json";
  {
    std::ofstream out(path);
    out << R"({"nodes": 2, "devices_per_node": 4, "nics_per_node": 1,
              "device": {"profile": "h100", "gemm_efficiency": 0.5, "memory_gb": 40,
                         "first_touch_gbps": 25, "compute_jitter": 0.02, "compute_jitter_ms": 0.4,
                         "issuer_held": 0.5, "gemm_weights_gbps": 8},
              "inter": {"gbps": 12.5, "latency_us": 3}})";
  }
  const Cluster c = parse_cluster(path.string());
  EXPECT_EQ(c.devices(), 8);
  EXPECT_EQ(c.nics_per_node, 1);
  EXPECT_DOUBLE_EQ(c.device.gemm_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(c.device.memory_bytes, 40e9);
  EXPECT_DOUBLE_EQ(c.inter.bandwidth_bytes_per_s, 12.5e9);
  EXPECT_DOUBLE_EQ(c.inter.latency_s, 3e-6);
  EXPECT_DOUBLE_EQ(c.intra.bandwidth_bytes_per_s, 450e9);  // the profile's
  EXPECT_DOUBLE_EQ(c.device.first_touch_bytes_per_s, 25e9);
  EXPECT_EQ(parse_cluster("h100").device.first_touch_bytes_per_s, 0);  // a caching allocator's
  EXPECT_DOUBLE_EQ(c.device.compute_jitter, 0.02);
  EXPECT_DOUBLE_EQ(c.device.compute_jitter_s, 0.4e-3);
  EXPECT_EQ(parse_cluster("h100").device.compute_jitter, 0);  // a datasheet says nothing of it
  EXPECT_DOUBLE_EQ(c.device.issuer_held, 0.5);
  EXPECT_EQ(parse_cluster("h100").device.issuer_held, 0);  // the GPU's own stream
  EXPECT_DOUBLE_EQ(c.device.weight_rate(), 8e9);
  // A datasheet's products read their weights at the memory's bandwidth.
  EXPECT_EQ(parse_cluster("h100").device.weight_rate(),
            parse_cluster("h100").device.memory_bytes_per_s);
  // Without sharded factors, a sharded collective contends as any other.
  EXPECT_EQ(c.device.compute_slowdown(SpanKind::kAllgather), c.device.overlap_compute_slowdown);
  EXPECT_EQ(c.device.comm_slowdown(SpanKind::kReduceScatter), c.device.overlap_comm_slowdown);
  {
    std::ofstream out(path);
    out << R"({"device": {"profile": "h100", "overlap_compute_slowdown": 0.1,
                          "sharded_compute_slowdown": 0.5, "sharded_comm_slowdown": 0.25}})";
  }
  const Cluster sharded = parse_cluster(path.string());
  EXPECT_DOUBLE_EQ(sharded.device.compute_slowdown(SpanKind::kAllgather), 0.5);
  EXPECT_DOUBLE_EQ(sharded.device.compute_slowdown(SpanKind::kReduceScatter), 0.5);
  EXPECT_DOUBLE_EQ(sharded.device.compute_slowdown(SpanKind::kAllreduce), 0.1);
  EXPECT_DOUBLE_EQ(sharded.device.comm_slowdown(SpanKind::kAllgather), 0.25);
  {
    std::ofstream out(path);
    out << R"({"device": {"profile": "h100", "sharded_comm_slowdown": "high"}})";
  }
  EXPECT_THROW(parse_cluster(path.string()), UsageError);
  {
    std::ofstream out(path);
    out << R"({"device": {"profile": "h100", "first_touch_gbps": -1}})";
  }
  EXPECT_THROW(parse_cluster(path.string()), UsageError);
  {
    std::ofstream out(path);
    out << R"({"device": {"profile": "h100", "gemm_efficiency": 2}})";
  }
  EXPECT_THROW(parse_cluster(path.string()), UsageError);
  {
    std::ofstream out(path);
    out << R"({"device": {"profile": "h100", "compute_jitter": 1.5}})";
  }
  EXPECT_THROW(parse_cluster(path.string()), UsageError);
  {
    std::ofstream out(path);
    out << R"({"device": {"profile": "h100", "issuer_held": 1.5}})";
  }
  EXPECT_THROW(parse_cluster(path.string()), UsageError);
  {
    std::ofstream out(path);
    out << R"({"device": {"profile": "h100", "compute_jitter_ms": -1}})";
  }
  EXPECT_THROW(parse_cluster(path.string()), UsageError);
  {
    std::ofstream out(path);
    out << "not json";
  }
  EXPECT_THROW(parse_cluster(path.string()), UsageError);
  std::filesystem::remove(path);
}

TEST(StragglerTest, Parses) {
  const Straggler s = Straggler::parse("rank=3,compute=1.2x");
  EXPECT_EQ(s.rank, 3);
  EXPECT_DOUBLE_EQ(s.compute, 1.2);
  for (const char* bad : {"rank=3", "rank=-1,compute=2", "rank=1,compute=fast", "speed=2"}) {
    EXPECT_THROW(Straggler::parse(bad), UsageError) << bad;
  }
}

}  // namespace
}  // namespace tandem
