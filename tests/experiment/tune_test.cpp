// tandem tune's pieces (experiment/tune.h): the space and its candidates, the halving
// plan, the search driven by chosen numbers, and the calibration and predictions from a
// real characterization.
#include "experiment/tune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "experiment/calibrate.h"
#include "experiment/workload.h"
#include "simulate/calibration.h"

namespace tandem {
namespace {

TrainConfig base_config(const std::string& model, int ranks, int batch) {
  TrainConfig c;
  c.model = ModelSpec::parse(model);
  c.ranks = ranks;
  c.batch = batch;
  c.steps = 4;
  return c;
}

std::string value_of(const TuneCandidate& c, const std::string& key) {
  for (const auto& [k, v] : c.point) {
    if (k == key) return v;
  }
  return "";
}

TEST(TuneSpaceTest, DefaultsFollowTheRun) {
  // mlp:4x512: 4 x 512 x 512 weights and biases, about 4 MiB of gradient: caps of 1 and 5
  // MiB, the default's 25, and no 100 (it makes 25's plan).
  const TuneSpace s = TuneSpace::defaults(base_config("mlp:4x512", 4, 12), 8);
  EXPECT_EQ(s.bucket_mb, (std::vector<double>{1, 5, 25}));
  EXPECT_EQ(s.micro_batches, (std::vector<int>{1, 2, 4}));  // 8 does not divide 12
  EXPECT_EQ(s.pipeline, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(s.threads, (std::vector<int>{1, 2}));  // 8 cpus, 4 ranks
  EXPECT_EQ(s.strategies.size(), 8u);
  // Three ranks: no pipeline divides them but one stage; one cpu: one thread.
  const TuneSpace odd = TuneSpace::defaults(base_config("mlp:4x512", 3, 8), 1);
  EXPECT_EQ(odd.pipeline, (std::vector<int>{1}));
  EXPECT_EQ(odd.threads, (std::vector<int>{1}));
  EXPECT_EQ(odd.micro_batches, (std::vector<int>{1, 2, 4, 8}));
}

TEST(TuneSpaceTest, SetReplacesOneAxisAndNamesTheFlagOnErrors) {
  TuneSpace s = TuneSpace::defaults(base_config("mlp:4x512", 2, 8), 2);
  s.set("strategy=zero2,fsdp");
  s.set("reshard=no");
  s.set("bucket-mb=0.5,2");
  EXPECT_EQ(s.strategies, (std::vector<std::string>{"zero2", "fsdp"}));
  EXPECT_EQ(s.reshard, (std::vector<bool>{false}));
  EXPECT_EQ(s.bucket_mb, (std::vector<double>{0.5, 2}));
  for (const char* bad : {"colour=red", "strategy=zero9", "reshard=maybe", "pipeline=0",
                          "bucket-mb=-1", "schedule=zigzag", "threads=", "threads"}) {
    try {
      s.set(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--space"), std::string::npos) << e.what();
    }
  }
}

TEST(TuneCandidatesTest, EveryCandidateRunsTheSameSamplesPerStep) {
  const TrainConfig base = base_config("mlp:4x256", 4, 8);
  const std::vector<TuneCandidate> all =
      tune_candidates(base, TuneSpace::defaults(base, 4), /*split_auto=*/true);
  int defaults = 0;
  std::set<std::string> ids;
  bool pipelines = false;
  for (const TuneCandidate& c : all) {
    EXPECT_TRUE(ids.insert(c.id()).second) << "two candidates named " << c.id();
    if (c.is_default) {
      ++defaults;
      EXPECT_EQ(c.config.reducer.plan.strategy.kind, StrategyKind::kBucketed);
      EXPECT_EQ(c.config.reducer.plan.bucket_cap_bytes, 25 << 20);
      EXPECT_EQ(micro_batches(c.config), 1);
    }
    if (!c.refused.empty()) continue;
    EXPECT_EQ(global_batch(c.config), global_batch(base)) << c.label();
    if (c.config.pipeline.stages > 1) {
      pipelines = true;
      const int p = c.config.pipeline.stages;
      EXPECT_EQ(c.config.batch, base.batch * p) << c.label();
      EXPECT_EQ(micro_batches(c.config), std::stoi(value_of(c, "micro-batches")) * p);
      EXPECT_TRUE(c.config.pipeline.split_auto);
      EXPECT_EQ(c.family(),
                "pipeline=" + std::to_string(p) + " schedule=" + value_of(c, "schedule"));
    }
  }
  EXPECT_EQ(defaults, 1);
  EXPECT_TRUE(pipelines);
}

TEST(TuneCandidatesTest, FlagsSayWhatTheConfigurationIs) {
  const TrainConfig base = base_config("mlp:4x256", 2, 8);
  TuneSpace space = TuneSpace::defaults(base, 2);
  space.set("strategy=fsdp");
  space.set("micro-batches=1,3");
  space.set("pipeline=1");
  const std::vector<TuneCandidate> all = tune_candidates(base, space, false);
  int refused = 0;
  for (const TuneCandidate& c : all) {
    if (c.is_default) continue;  // added: the space leaves it out
    const bool keeps = value_of(c, "reshard") == "yes";
    const bool flagged = std::any_of(c.flags.begin(), c.flags.end(), [](const auto& f) {
      return f.first == "--no-reshard-after-forward";
    });
    EXPECT_EQ(c.config.shard.reshard_after_forward, keeps) << c.label();
    EXPECT_EQ(flagged, !keeps) << c.label();
    // 3 micro-batches of a batch of 8 cannot run: refused, with validate()'s reason.
    if (value_of(c, "micro-batches") == "3") {
      ++refused;
      EXPECT_NE(c.refused.find("--micro-batches"), std::string::npos) << c.refused;
    } else {
      EXPECT_EQ(c.refused, "") << c.label();
    }
  }
  EXPECT_EQ(refused, 4);  // 2 prefetches x 2 reshardings
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [](const auto& c) { return c.is_default; }), 1);
}

TEST(HalvingPlanTest, ThirdsEachRoundAndShrinksToTheBudget) {
  // Every step costs 1 s, every measurement 2 s more.
  const auto cost = [](int, int steps) { return 2.0 + steps; };
  const HalvingPlan p = plan_halving(12, 1e9, 28, 3, cost);
  EXPECT_EQ(p.candidates, (std::vector<int>{12, 4, 2}));
  // The last round's 28 steps in two alternating passes of 14.
  EXPECT_EQ(p.steps, (std::vector<int>{3, 9, 14}));
  EXPECT_EQ(p.passes, (std::vector<int>{1, 1, 2}));
  EXPECT_DOUBLE_EQ(p.cost_s, 13 * 5.0 + 5 * 11.0 + 3 * 2 * 16.0);
  // A budget of 150 s affords fewer first: the largest plan that fits.
  const HalvingPlan q = plan_halving(12, 150, 28, 3, cost);
  EXPECT_LE(q.cost_s, 150);
  EXPECT_GT(plan_halving(q.candidates.front() + 1, 1e9, 28, 3, cost).cost_s, 150);
  // No budget at all: still two candidates (and the default).
  const HalvingPlan r = plan_halving(12, 0, 28, 3, cost);
  EXPECT_EQ(r.candidates, (std::vector<int>{2}));
  EXPECT_EQ(r.steps, (std::vector<int>{14}));
  EXPECT_EQ(r.passes, (std::vector<int>{2}));
  // An odd --steps: two passes that hold every step (3 in halves of 1 measured 2).
  const HalvingPlan odd = plan_halving(2, 1e9, 3, 3, cost);
  EXPECT_EQ(odd.passes.back(), 2);
  EXPECT_EQ(odd.steps.back(), 2);
  EXPECT_EQ(p.limit, PlanLimit::kNone);
  EXPECT_EQ(q.limit, PlanLimit::kBudget);
  EXPECT_EQ(r.limit, PlanLimit::kBudget);
}

// Note [a quarter of the grid]: the plan tune makes by itself, with its characterization,
// is predicted at most a fifth of measuring every candidate for the last round's steps (so
// that it measures within a quarter).
TEST(HalvingPlanTest, TheSearchCostsAtMostAQuarterOfTheGrid) {
  ASSERT_LT(kGridShareAim, kGridShare);
  const auto cost = [](int, int steps) { return 2.0 + steps; };
  // 60 candidates x (2 + 20) s: the grid costs 1320 s, a fifth 264; the
  // characterization took 50 of them. 30 in the first round would cost 406 more.
  ASSERT_DOUBLE_EQ(plan_halving(30, 1e9, 20, 5, cost).cost_s, 406);
  const HalvingPlan p = plan_search(30, kLeastFirstRound, 60, 50, 1e9, 20, 5, cost);
  EXPECT_EQ(p.limit, PlanLimit::kGridShare);
  EXPECT_DOUBLE_EQ(p.grid_cost_s, 1320);
  EXPECT_LE(50 + p.cost_s, 264);
  EXPECT_LT(p.candidates.front(), 30);
  // The largest first round that fits.
  EXPECT_GT(50 + plan_halving(p.candidates.front() + 1, 1e9, 20, 5, cost).cost_s, 264);
  // A budget tighter than the fifth decides, and is named.
  const HalvingPlan b = plan_search(30, kLeastFirstRound, 60, 50, 100, 20, 5, cost);
  EXPECT_EQ(b.limit, PlanLimit::kBudget);
  EXPECT_LE(b.cost_s, 100);
  // Within the fifth: nothing cut.
  const HalvingPlan roomy = plan_search(12, kLeastFirstRound, 200, 0, 1e9, 20, 5, cost);
  EXPECT_EQ(roomy.limit, PlanLimit::kNone);
  EXPECT_EQ(roomy.candidates.front(), 12);
  // A small space, whose characterization alone is over a quarter of its grid: the first
  // round keeps kLeastFirstRound, and a first round of that size is not cut at all.
  const HalvingPlan small = plan_search(10, kLeastFirstRound, 10, 100, 1e9, 20, 5, cost);
  EXPECT_EQ(small.limit, PlanLimit::kGridShare);
  EXPECT_EQ(small.candidates.front(), kLeastFirstRound);
  const HalvingPlan least =
      plan_search(kLeastFirstRound, kLeastFirstRound, 10, 100, 1e9, 20, 5, cost);
  EXPECT_EQ(least.limit, PlanLimit::kNone);
  EXPECT_EQ(least.candidates.front(), kLeastFirstRound);
  // Never below the floor it is given (every family's best): 20 here, over the fifth.
  const HalvingPlan families = plan_search(30, 20, 60, 50, 1e9, 20, 5, cost);
  EXPECT_EQ(families.limit, PlanLimit::kGridShare);
  EXPECT_EQ(families.candidates.front(), 20);
  EXPECT_GT(50 + families.cost_s, 264);
}

// Candidates with chosen predictions and true step times: the search measures what the
// plan says and answers with the fastest measured, never slower than the default.
struct Synthetic {
  std::vector<TuneCandidate> candidates;
  std::map<int, double> truth;  // seconds per step

  void add(const std::string& strategy, const std::string& variant, double predicted,
           double truth_s, bool is_default = false) {
    TuneCandidate c;
    c.point = {{"strategy", strategy}, {"variant", variant}};
    c.predicted_s = predicted;
    c.is_default = is_default;
    truth[static_cast<int>(candidates.size())] = truth_s;
    candidates.push_back(std::move(c));
  }

  // Runs the search to its end; returns every measurement made, in order.
  std::vector<TuneMeasurement> run(TuneSearch& search) const {
    std::vector<TuneMeasurement> made;
    while (const auto m = search.next()) {
      made.push_back(*m);
      // Steps of the true time, a little spread around it.
      std::vector<double> samples;
      for (int s = 0; s < m->steps; ++s) {
        samples.push_back(truth.at(m->candidate) * (1 + 0.01 * ((s % 3) - 1)));
      }
      search.record(*m, samples, 1.0);
    }
    return made;
  }
};

TEST(TuneSearchTest, MeasuresEveryFamilyFirstAndFindsTheFastest) {
  Synthetic s;
  s.add("bucketed", "25", 1.00, 1.00, /*is_default=*/true);
  s.add("bucketed", "5", 0.90, 0.95);
  s.add("bucketed", "1", 0.91, 0.97);
  s.add("zero2", "a", 0.80, 1.10);  // predicted best, measures badly
  s.add("zero2", "b", 0.81, 1.20);
  s.add("pipeline", "a", 1.50, 0.70);  // the simulator misjudges the family: still measured
  s.add("pipeline", "b", 1.60, 0.60);  // ... but its second member is never reached
  s.candidates[2].refused = "does not fit";
  TuneSearch search(s.candidates,
                    HalvingPlan{.candidates = {3, 2}, .steps = {3, 9}, .passes = {1, 2}});
  const std::vector<TuneMeasurement> made = s.run(search);
  // Round 0: the best predicted of each family (zero2 a, bucketed 5, pipeline a), then the
  // default; round 1: the two fastest (pipeline a, bucketed 5) and the default, in two
  // alternating passes.
  std::vector<int> order;
  std::vector<std::string> ids;
  for (const TuneMeasurement& m : made) {
    order.push_back(m.candidate);
    ids.push_back(m.id());
  }
  EXPECT_EQ(order, (std::vector<int>{3, 1, 5, 0, 5, 1, 0, 5, 1, 0}));
  EXPECT_EQ(ids[4], "r1.5");
  EXPECT_EQ(ids[7], "r1.5.1");
  EXPECT_EQ(made.back().steps, 9);
  EXPECT_EQ(search.candidates()[5].rounds, 2);
  EXPECT_EQ(search.candidates()[5].measurements, 3);
  const TuneAnswer a = search.answer();
  EXPECT_EQ(a.best, 5);
  EXPECT_EQ(a.runner_up, 1);
  EXPECT_FALSE(a.default_is_best);
  EXPECT_NEAR(a.best_s, 0.70, 1e-9);
  EXPECT_NEAR(a.default_s, 1.00, 1e-9);
  EXPECT_NEAR(a.gap, 0.95 / 0.70 - 1, 1e-9);
  EXPECT_TRUE(a.sure());  // a 36% gap against a 1% spread
  EXPECT_EQ(search.remaining(), 0);
  // The refused one was never measured.
  EXPECT_TRUE(search.candidates()[2].samples_s.empty());
}

// What a quarter of the grid may cut the first round to: every family's best (the close
// seconds go), and at least kLeastFirstRound where there are.
TEST(TuneSearchTest, TheQuartersFloorIsEveryFamilysBest) {
  Synthetic s;
  s.add("bucketed", "25", 1.00, 1.00, true);
  for (int f = 0; f < 10; ++f) {
    s.add("f" + std::to_string(f), "a", 1.0 + 0.01 * f, 1.0);
    s.add("f" + std::to_string(f), "b", 1.02 + 0.01 * f, 1.0);  // a close second
  }
  EXPECT_EQ(default_first_round(s.candidates), 21);  // 11 families, 10 close seconds
  EXPECT_EQ(least_first_round(s.candidates), 11);
  Synthetic few;
  few.add("bucketed", "25", 1.00, 1.00, true);
  for (int i = 0; i < 4; ++i) few.add("zero2", std::to_string(i), 1.0 + 0.2 * i, 1.0);
  EXPECT_EQ(least_first_round(few.candidates), 5);  // at least 8, but 5 is all there is
  few.add("zero1", "a", 1.0, 1.0);
  few.candidates.back().refused = "does not fit";  // never counted
  EXPECT_EQ(least_first_round(few.candidates), 5);
}

// A family's second best, predicted within 10% of its best, is measured in the first
// round before the next best predicted of any family: the simulator tells a family's
// members apart least well (here it prefers one micro-batch; two measure faster).
TEST(TuneSearchTest, AFamilysCloseSecondIsMeasuredInTheFirstRound) {
  Synthetic s;
  s.add("bucketed", "25", 1.00, 1.00, true);
  s.add("bucketed", "5", 0.70, 0.99);
  s.add("pipeline", "m1", 0.80, 0.90);
  s.add("pipeline", "m2", 0.85, 0.60);  // within 10% of m1: measured
  s.add("zero2", "a", 0.75, 1.10);
  s.add("zero2", "b", 0.90, 0.50);                  // 20% above zero2 a: not in the first round
  EXPECT_EQ(default_first_round(s.candidates), 6);  // at least 8, but 6 is all there is
  TuneSearch search(s.candidates, HalvingPlan{.candidates = {4, 2}, .steps = {3, 9}});
  const std::vector<TuneMeasurement> made = s.run(search);
  std::vector<int> first;
  for (const TuneMeasurement& m : made) {
    if (m.round == 0) first.push_back(m.candidate);
  }
  // Family bests (bucketed 5, zero2 a, pipeline m1), the close second (pipeline m2), then
  // the default.
  EXPECT_EQ(first, (std::vector<int>{1, 4, 2, 3, 0}));
  EXPECT_EQ(search.answer().best, 3);
}

// A plan is priced by what its rounds measure (plan_halving's cost_s): the first round
// takes every family's best, however slow the family is predicted, before the faster
// members of the best families. Priced by the fastest predicted instead, a first round of
// 3 here would be priced 0.70 + 0.71 + 0.72 a step where it measures 0.70 + 1.50 + 2.00:
// a quarter of the grid held in the plan, not in the search.
TEST(TuneSearchTest, ThePlanIsPricedInTheOrderTheSearchMeasures) {
  Synthetic s;
  s.add("bucketed", "25", 1.00, 1.00, true);
  s.add("bucketed", "5", 0.70, 0.70);
  s.add("bucketed", "2", 0.71, 0.71);  // within 10% of bucketed 5: a close second
  s.add("bucketed", "1", 0.72, 0.72);
  s.add("pipeline", "a", 1.50, 1.50);
  s.add("zero2", "a", 2.00, 2.00);
  s.add("zero1", "a", 0.60, 0.60);
  s.candidates.back().refused = "does not fit";
  const std::vector<int> order = measuring_order(s.candidates);
  // Family bests (bucketed 5, pipeline a, zero2 a), bucketed 5's close second, then the
  // rest by prediction; the refused one nowhere.
  EXPECT_EQ(order, (std::vector<int>{1, 4, 5, 2, 3, 0}));
  TuneSearch search(s.candidates, HalvingPlan{.candidates = {3, 2}, .steps = {3, 9}});
  std::vector<int> first;
  for (const TuneMeasurement& m : s.run(search)) {
    if (m.round == 0) first.push_back(m.candidate);
  }
  EXPECT_EQ(first, (std::vector<int>{1, 4, 5, 0}));  // the first 3, then the default
}

TEST(TuneSearchTest, NothingBeatsTheDefaultSoItIsTheAnswer) {
  Synthetic s;
  s.add("layerwise", "", 0.5, 2.0);
  s.add("bucketed", "25", 1.0, 1.0, true);
  s.add("zero1", "", 0.6, 1.5);
  TuneSearch search(s.candidates, HalvingPlan{.candidates = {2}, .steps = {5}});
  s.run(search);
  const TuneAnswer a = search.answer();
  EXPECT_EQ(a.best, 1);
  EXPECT_TRUE(a.default_is_best);
  EXPECT_LE(a.best_s, a.default_s);
}

TEST(TuneSearchTest, TheEnergyObjectivePicksTheLeastEnergyNotTheFastest) {
  Synthetic s;
  s.add("bucketed", "25", 1.0, 1.0, true);
  s.add("layerwise", "", 0.9, 0.8);  // fastest, and costliest
  s.add("zero1", "", 0.95, 1.2);     // slowest, and cheapest
  const std::map<int, double> joules = {{0, 100}, {1, 120}, {2, 70}};
  TuneSearch search(s.candidates, HalvingPlan{.candidates = {2}, .steps = {3}},
                    TuneObjective::kEnergy);
  search.set_sequential(1.1, 110);
  while (const auto m = search.next()) {
    search.record(*m, {s.truth.at(m->candidate)}, 1.0, joules.at(m->candidate));
  }
  const TuneAnswer a = search.answer();
  EXPECT_EQ(a.best, 2);
  EXPECT_EQ(a.runner_up, 0);
  EXPECT_DOUBLE_EQ(a.best_j, 70);
  EXPECT_DOUBLE_EQ(a.default_j, 100);
  EXPECT_DOUBLE_EQ(a.sequential_j, 110);
  EXPECT_NEAR(a.gap, 100.0 / 70 - 1, 1e-12);
  EXPECT_DOUBLE_EQ(a.best_s, 1.2);  // its time, still reported
}

TEST(TuneSearchTest, ARefusedDefaultIsAUsageError) {
  Synthetic s;
  s.add("bucketed", "25", 1.0, 1.0, true);
  s.add("zero1", "", 0.6, 1.5);
  s.candidates[0].refused = "needs 3 GiB";
  EXPECT_THROW(TuneSearch(s.candidates, HalvingPlan{.candidates = {2}, .steps = {5}}), UsageError);
}

TEST(TuneSearchTest, ParetoFrontKeepsWhatNothingBeatsOnBoth) {
  std::vector<TuneCandidate> c(5);
  const double time[] = {1.0, 2.0, 3.0, 1.5, 4.0};
  const double memory[] = {100, 50, 60, 100, 10};
  for (int i = 0; i < 5; ++i) {
    c[static_cast<std::size_t>(i)].samples_s = {time[i]};
    c[static_cast<std::size_t>(i)].memory_bytes = memory[i];
  }
  EXPECT_EQ(pareto_front(c), (std::vector<int>{0, 1, 4}));
}

// Tensor parallelism is an axis where the engine takes it (validate()'s rules, not
// restated): a gpt of 4 heads on 4 ranks splits 2 and 4 ways, an mlp not at all. A
// candidate of T ranks a replica runs T times the rows, and with one replica its
// strategies are one; each is predicted with its split.
TEST(TuneCandidatesTest, TensorParallelismIsAnAxisWhereTheModelSplits) {
  const TrainConfig gpt = base_config("gpt:layers=2,dim=32,heads=4,seq=16,vocab=64", 4, 2);
  const TuneSpace space = TuneSpace::defaults(gpt, 4);
  EXPECT_EQ(space.tensor, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(TuneSpace::defaults(base_config("mlp:4x256", 4, 8), 4).tensor, (std::vector<int>{1}));
  // 3 heads: no split of 2 ranks.
  EXPECT_EQ(TuneSpace::defaults(base_config("gpt:layers=2,dim=48,heads=3,seq=16,vocab=64", 2, 2), 2)
                .tensor,
            (std::vector<int>{1}));
  TuneSpace s = space;
  s.set("micro-batches=1");
  s.set("pipeline=1");
  s.set("threads=1");
  s.set("strategy=bucketed,zero2");
  s.set("bucket-mb=25");
  std::vector<TuneCandidate> all = tune_candidates(gpt, s, false);
  std::set<std::string> ids;
  int split = 0;
  for (const TuneCandidate& c : all) {
    EXPECT_TRUE(ids.insert(c.id()).second) << c.id();
    ASSERT_EQ(c.refused, "") << c.label();
    EXPECT_EQ(global_batch(c.config), global_batch(gpt)) << c.label();
    const int t = c.config.model.tensor;
    if (t == 1) continue;
    ++split;
    EXPECT_EQ(c.config.batch, gpt.batch * t) << c.label();
    EXPECT_FALSE(c.config.model.tp_overlap && !c.config.model.sequence_parallel) << c.label();
    EXPECT_NE(std::find(c.flags.begin(), c.flags.end(),
                        std::pair<std::string, std::string>{"--tensor", std::to_string(t)}),
              c.flags.end())
        << c.label();
    EXPECT_NE(c.family().find("tensor=" + std::to_string(t)), std::string::npos) << c.family();
  }
  // T = 2: 2 replicas, both strategies; T = 4: one replica, one; each in 3 modes.
  EXPECT_EQ(split, 3 * 2 + 3 * 1);
  Cluster cluster =
      calibrated_cluster(Calibration{.gemm_flops_per_s = {1e11, 1e11, 1e11, 1e11},
                                     .memory_bytes_per_s = 1e10,
                                     .link = {.bandwidth_bytes_per_s = 1e9, .latency_s = 1e-5}},
                         4, 1e12, "test");
  predict_candidates(all, cluster);
  std::map<int, double> memory;
  for (const TuneCandidate& c : all) {
    ASSERT_EQ(c.refused, "") << c.label();
    EXPECT_GT(c.predicted_s, 0) << c.label();
    if (c.config.reducer.plan.strategy.kind == StrategyKind::kBucketed) {
      memory[c.config.model.tensor] = std::max(memory[c.config.model.tensor], c.memory_bytes);
    }
  }
  // Half the state a rank, for twice the rows: less here. (At T = 4 a replica's four times
  // the rows hold more activations than the state saves, on so small a model.)
  EXPECT_LT(memory.at(2), memory.at(1));
}

// A pipeline of P stages of tensor groups of T needs ranks that T x P divides: on 2 ranks
// the pipeline of 2 runs unsplit only, and no candidate is a layout the run cannot have.
TEST(TuneCandidatesTest, TensorTimesPipelineLayoutsDivideTheRanks) {
  const TrainConfig gpt = base_config("gpt:layers=2,dim=32,heads=4,seq=16,vocab=64", 2, 2);
  TuneSpace s = TuneSpace::defaults(gpt, 2);
  s.set("micro-batches=1");
  s.set("pipeline=1,2");
  int pipelines = 0;
  for (const TuneCandidate& c : tune_candidates(gpt, s, false)) {
    EXPECT_EQ(c.refused, "") << c.label();
    EXPECT_EQ(2 % (c.config.model.tensor * c.config.pipeline.stages), 0) << c.label();
    if (c.config.pipeline.stages == 2) ++pipelines;
  }
  EXPECT_GT(pipelines, 0);
}

// Note [step period]: the time from a step's first compute to the next step's, the
// slowest rank's; a gather after the optimizer lies outside E2E but inside the period.
TEST(StepPeriodTest, ReachesTheNextStepsStartAndTheLastStepsEnd) {
  Timeline t;
  t.ranks = 2;
  const auto add = [&](int rank, Lane lane, int step, std::int64_t start, std::int64_t end) {
    t.spans.push_back({.rank = rank, .lane = lane, .step = step, .start_ns = start, .end_ns = end});
  };
  for (int rank = 0; rank < 2; ++rank) {
    const std::int64_t late = rank * 1000;  // rank 1's gathers end later
    add(rank, Lane::kCompute, 0, 0, 10000);
    add(rank, Lane::kComm, 0, 10000, 14000 + late);
    add(rank, Lane::kCompute, 1, 15000 + late, 25000 + late);
    add(rank, Lane::kComm, 1, 25000 + late, 29000 + 2 * late);
  }
  EXPECT_EQ(e2e_seconds(t, 0), (std::vector<double>{10e-6, 10e-6}));
  // Step 0: rank 1 starts step 1 at 16 us; step 1 (the last): rank 1 ends at 31 us.
  EXPECT_EQ(step_periods(t, 0), (std::vector<double>{16e-6, 15e-6}));
  EXPECT_EQ(step_periods(t, 1), (std::vector<double>{15e-6}));
  EXPECT_DOUBLE_EQ(median_step_period_s(t, 1), 15e-6);
}

// The calibration fitted from a real characterization of the default, and the space
// predicted with it: every prediction positive, and the memory each strategy keeps in the
// order sharding promises.
TEST(TuneCalibrationTest, FitsFromTheDefaultsScenariosAndPredictsTheSpace) {
  TrainConfig base = base_config("mlp:3x128", 2, 8);
  std::unique_ptr<Workload> w = make_train_workload(base);
  const Characterization c = characterize(*w, {.warmup = 1, .iterations = 3});
  const Calibration cal = calibrate_from(c, base);
  EXPECT_GT(cal.gemm_flops_per_s[0], 0);
  EXPECT_GT(cal.link.bandwidth_bytes_per_s, 0);
  EXPECT_GT(cal.compute.samples, 0);
  EXPECT_GT(cal.comm.samples, 0);

  TuneSpace space = TuneSpace::defaults(base, 2);
  space.set("strategy=bucketed,zero2");
  space.set("bucket-mb=25");
  space.set("micro-batches=1");
  space.set("schedule=1f1b");
  std::vector<TuneCandidate> all = tune_candidates(base, space, false);
  // Progress before every candidate but the first, counting up to the last.
  std::vector<std::size_t> heard;
  predict_candidates(all, calibrated_cluster(cal, 2, 1e12, "test"),
                     [&](std::size_t done, std::size_t total) {
                       EXPECT_EQ(total, all.size());
                       heard.push_back(done);
                     });
  ASSERT_EQ(heard.size(), all.size() - 1);
  for (std::size_t i = 0; i < heard.size(); ++i) EXPECT_EQ(heard[i], i + 1);
  for (const TuneCandidate& t : all) {
    ASSERT_EQ(t.refused, "") << t.label();
    EXPECT_GT(t.predicted_s, 0) << t.label();
  }
  // zero2's full gradients live until their reduce-scatters end: how many at once depends
  // on the fitted link against the fitted compute, and on how far apart the fitted ranks
  // run (the faster one keeps its gradients until the slower one's reduce-scatter), which
  // 3 iterations on a busy machine can make anything (all of them, as many as bucketed
  // keeps: 2 failures in 16 runs beside a build). On the fitted machine with a link that moves
  // them at once and ranks alike, its shards are what it keeps.
  Cluster fast = calibrated_cluster(cal, 2, 1e12, "test");
  fast.intra = fast.inter = {.bandwidth_bytes_per_s = 1e15, .latency_s = 0};
  fast.device.compute_jitter = 0;
  predict_candidates(all, fast);
  std::map<std::string, double> memory;
  for (const TuneCandidate& t : all) memory[t.family()] = t.memory_bytes;
  EXPECT_LT(memory.at("strategy=zero2"), memory.at("strategy=bucketed"));
  EXPECT_LT(memory.at("pipeline=2 schedule=1f1b"), memory.at("strategy=bucketed"));
  // A cluster too small for any of them refuses all, with the simulator's reason.
  predict_candidates(all, calibrated_cluster(cal, 2, 1000, "tiny"));
  for (const TuneCandidate& t : all) {
    EXPECT_NE(t.refused.find("per device"), std::string::npos) << t.refused;
  }
}

}  // namespace
}  // namespace tandem
