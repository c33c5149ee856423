// End-to-end properties of data-parallel training on the local backend: replicas stay
// identical, every overlap strategy computes exactly what the sequential one does, and
// the model learns.
#include "engine/trainer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace tandem {
namespace {

TrainConfig small_config(std::string_view strategy, int ranks, int steps) {
  TrainConfig c;
  c.model = ModelSpec::parse("mlp:4x96");
  c.ranks = ranks;
  c.batch = 8;
  c.steps = steps;
  c.reducer.plan.strategy = Strategy::parse(strategy);
  // Small caps so that bucketed has several buckets on this small model.
  c.reducer.plan.bucket_cap_bytes = 40'000;
  c.reducer.plan.first_bucket_cap_bytes = 10'000;
  c.verify = true;
  return c;
}

const char* const kStrategies[] = {"sequential", "layerwise", "bucketed", "chunked:5",
                                   "chunked:13"};

TEST(TrainerTest, AllRanksHoldIdenticalParametersAfterEveryStep) {
  for (const char* strategy : kStrategies) {
    const TrainResult result = train_local(small_config(strategy, 3, 6));
    std::map<int, std::uint64_t> hash_of_step;
    ASSERT_EQ(result.steps.size(), 18u);
    for (const StepRecord& r : result.steps) {
      auto [it, inserted] = hash_of_step.emplace(r.step, r.param_hash);
      if (!inserted) {
        EXPECT_EQ(it->second, r.param_hash)
            << strategy << ": rank " << r.rank << " differs at step " << r.step;
      }
    }
  }
}

TEST(TrainerTest, EveryOverlapStrategyEndsBitwiseEqualToSequential) {
  const TrainResult reference = train_local(small_config("sequential", 3, 20));
  ASSERT_FALSE(reference.final_params.empty());
  for (const char* strategy : kStrategies) {
    const TrainResult result = train_local(small_config(strategy, 3, 20));
    EXPECT_GT(result.buckets.size(), 1u) << strategy;
    ASSERT_EQ(result.final_params.size(), reference.final_params.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < reference.final_params.size(); ++i) {
      differing += std::memcmp(&result.final_params[i], &reference.final_params[i], 4) != 0;
    }
    EXPECT_EQ(differing, 0u) << strategy << " differs from sequential in " << differing
                             << " parameters";
  }
}

// The transformers' gradients arrive unit by unit (embedding last, the tied head's share
// of it from the far end): every strategy still computes exactly what sequential does,
// with gradient accumulation, on synthetic tokens and on a text file.
TEST(TrainerTest, TransformersEndBitwiseEqualToSequentialUnderEveryStrategy) {
  for (const std::string model : {"gpt:layers=3,dim=32,heads=2,seq=12",
                                  "llama:layers=3,dim=32,heads=4,seq=12"}) {
    for (const bool text : {false, true}) {
      auto config = [&](const char* strategy) {
        TrainConfig c = small_config(strategy, 3, 6);
        // Text is byte-level (vocabulary 256); synthetic tokens take a small vocabulary.
        c.model = text ? ModelSpec::parse(model).with_vocab(256, "--data")
                       : ModelSpec::parse(model + ",vocab=40");
        if (text) c.data_path = TANDEM_SOURCE_DIR "/README.md";
        c.batch = 2;
        c.accumulate = 2;
        c.reducer.plan.bucket_cap_bytes = 20'000;
        c.reducer.plan.first_bucket_cap_bytes = 5'000;
        return c;
      };
      const TrainResult reference = train_local(config("sequential"));
      ASSERT_FALSE(reference.final_params.empty());
      for (const char* strategy : kStrategies) {
        const TrainResult result = train_local(config(strategy));
        EXPECT_GT(result.buckets.size(), 1u) << model << " " << strategy;
        ASSERT_EQ(result.final_params.size(), reference.final_params.size());
        EXPECT_EQ(std::memcmp(result.final_params.data(), reference.final_params.data(),
                              4 * reference.final_params.size()),
                  0)
            << model << (text ? " on text" : "") << ": " << strategy << " differs from sequential";
      }
    }
  }
}

TEST(TrainerTest, DataParallelTrainingDiffersFromOneRankSoRanksReallyExchange) {
  // Guard against a reducer that never communicates: 2 ranks see different shards, so
  // their average gradient differs from rank 0's alone.
  TrainConfig two = small_config("bucketed", 2, 3);
  TrainConfig one = two;
  one.ranks = 1;
  EXPECT_NE(hash_floats(train_local(two).final_params), hash_floats(train_local(one).final_params));
}

TEST(TrainerTest, AccumulationSynchronizesOnlyOnTheLastMicroBatch) {
  TrainConfig c = small_config("layerwise", 2, 3);
  c.accumulate = 4;
  const TrainResult result = train_local(c);
  std::map<std::pair<int, int>, int> comm_spans, forward_spans;  // (rank, step)
  for (const Span& s : result.timeline.spans) {
    if (s.lane == Lane::kComm && s.kind == SpanKind::kAllreduce) ++comm_spans[{s.rank, s.step}];
    if (s.kind == SpanKind::kForward) ++forward_spans[{s.rank, s.step}];
  }
  const int layers = 4;
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 0; step < 3; ++step) {
      EXPECT_EQ((comm_spans[{rank, step}]), static_cast<int>(result.buckets.size()));
      EXPECT_GE((forward_spans[{rank, step}]), 4 * layers);
    }
  }
}

TEST(TrainerTest, ComputeOnlyScenarioSendsNothing) {
  TrainConfig c = small_config("bucketed", 2, 2);
  c.reducer.mode = CommMode::kOff;
  c.verify = true;  // replicas differ by design: verify must neither send nor fail
  const TrainResult result = train_local(c);
  EXPECT_NE(result.steps.front().param_hash, 0u);
  for (const Span& s : result.timeline.spans) {
    if (s.step < 0) continue;  // setup (the initial broadcast) belongs to no iteration
    EXPECT_NE(s.lane, Lane::kComm);
    EXPECT_NE(s.lane, Lane::kWait);
  }
}

TEST(TrainerTest, TimelineHasEveryLayerOnEveryRank) {
  const TrainResult result = train_local(small_config("bucketed", 2, 2));
  std::map<std::tuple<int, int, SpanKind>, int> count;  // (rank, step, kind)
  for (const Span& s : result.timeline.spans) ++count[{s.rank, s.step, s.kind}];
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 0; step < 2; ++step) {
      EXPECT_GE((count[{rank, step, SpanKind::kForward}]), 4);
      EXPECT_EQ((count[{rank, step, SpanKind::kBackward}]), 4 + 1);  // layers + loss
      EXPECT_EQ((count[{rank, step, SpanKind::kOptimizer}]), 1);
      EXPECT_EQ((count[{rank, step, SpanKind::kAllreduce}]),
                static_cast<int>(result.buckets.size()));
    }
  }
  EXPECT_EQ(result.spans_dropped, 0u);
}

// The README's demo task (model, batch, strategy), shortened to 2 ranks: the loss at
// step 100 must be below half of step 0's.
TEST(TrainerTest, DemoTaskLossHalvesWithin100Steps) {
  TrainConfig c;
  c.model = ModelSpec::parse("mlp:8x1024");
  c.ranks = 2;
  c.batch = 64;
  c.steps = 101;
  c.reducer.plan.strategy = Strategy::parse("bucketed");
  c.record = false;
  const TrainResult result = train_local(c);
  double first = 0, last = 0;
  for (const StepRecord& r : result.steps) {
    if (r.step == 0) first += r.loss;
    if (r.step == 100) last += r.loss;
  }
  EXPECT_LT(last, first / 2) << "loss at step 0 " << first / 2 << ", at step 100 " << last / 2;
}

// Issue: a collective timing out on the local backend once corrupted the heap (about 1 run
// in 7): a rank unwound and freed its gradients while its communication thread still moved
// data into them. Now the rank ends its collectives before its buffers die (Note [one owner
// of shutdown]). Run many times; under AddressSanitizer a use after free fails the test.
TEST(TrainerTest, ATimeoutEndsTheRunWithItsErrorAndNothingTouchesFreedMemory) {
  // Sharded strategies hold shards and gathered units besides the model's buffers.
  const char* const strategies[] = {"bucketed", "fsdp", "zero2", "bucketed", "zero1"};
  for (int run = 0; run < 40; ++run) {
    TrainConfig c = small_config(strategies[run % 5], 1 + run % 4, 5);
    c.verify = false;
    c.timeout_ns = 1'000;  // 1 us: nearly every collective is late
    try {
      train_local(c);
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("not complete after"), std::string::npos) << e.what();
    } catch (const RuntimeError& e) {
      ADD_FAILURE() << "the first failure must be the timeout, not its consequence: " << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// The host memory estimate counts the recorder's span buffers (sized by --steps up front)
// unless the timeline is off, and its parts add up to the total.
TEST(HostMemoryNeedTest, TheTimelineIsCountedAndThePartsAddUp) {
  TrainConfig c;
  c.model = ModelSpec::parse("mlp:2x8");
  c.batch = 1;
  c.steps = 100000;
  const HostMemoryNeed with = host_memory_need(c, 4);
  EXPECT_EQ(with.timeline_per_rank,
            static_cast<double>(kLaneCount) * static_cast<double>(train_span_capacity(c)) *
                sizeof(Span));
  EXPECT_EQ(with.timeline_per_rank, RankRecorder::bytes(train_span_capacity(c)));
  EXPECT_GT(with.timeline_per_rank, 100000.0 * sizeof(Span));  // at least a span per step
  EXPECT_DOUBLE_EQ(with.total, 4 * (with.state_per_rank + with.activations_per_rank +
                                    with.timeline_per_rank) +
                                   with.handoff);
  c.record = false;
  const HostMemoryNeed without = host_memory_need(c, 4);
  EXPECT_EQ(without.timeline_per_rank, 0.0);
  EXPECT_DOUBLE_EQ(with.total - without.total, 4 * with.timeline_per_rank);
}

}  // namespace
}  // namespace tandem
