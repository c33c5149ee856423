// Pipeline parallelism (engine/pipeline.h) on the local backend: every schedule ends with
// the parameters and losses of a single-stage run with gradient accumulation over the same
// micro-batches, bit for bit where the accumulation order is the same; the stages keep
// only their units and the micro-batches their schedule holds; bad shapes are usage
// errors naming the flag.
#include "engine/pipeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "engine/trainer.h"

namespace tandem {
namespace {

TrainConfig config(const std::string& model, int micro_batches, int batch) {
  TrainConfig c;
  c.model = ModelSpec::parse(model);
  c.ranks = 1;
  c.batch = batch;
  c.steps = 3;
  c.seed = 5;
  c.sgd.weight_decay = 0.01f;
  c.pipeline.micro_batches = micro_batches;
  return c;
}

TrainConfig pipelined(TrainConfig c, int stages, const std::string& schedule) {
  c.ranks = stages;
  c.pipeline.stages = stages;
  c.pipeline.schedule = parse_schedule(schedule);
  return c;
}

std::size_t differing_floats(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return n;
}

// Rank 0's losses: the pipeline's first stage reports the last stage's.
std::vector<float> losses(const TrainResult& r) {
  std::vector<float> out;
  for (const StepRecord& s : r.steps) {
    if (s.rank == 0) {
      EXPECT_TRUE(s.has_loss) << "step " << s.step;
      out.push_back(s.loss);
    }
  }
  return out;
}

struct Case {
  const char* model;
  int stages;
  const char* schedule;
  int micro_batches;
};

std::string name(const Case& c) {
  return std::string(c.model) + " P=" + std::to_string(c.stages) + " " + c.schedule +
         " M=" + std::to_string(c.micro_batches);
}

// mlp:6x32 has 6 units; the transformers 2 + layers.
const Case kBitwise[] = {
    {"mlp:6x32", 2, "1f1b", 4},        {"mlp:6x32", 3, "1f1b", 4},
    {"mlp:6x32", 4, "gpipe", 4},       {"mlp:6x32", 3, "gpipe", 2},
    {"mlp:6x32", 2, "interleaved:2", 4}, {"mlp:6x32", 3, "interleaved:2", 3},
    {"mlp:6x32", 6, "1f1b", 8},        {"mlp:6x32", 2, "1f1b", 1},
    {"llama:layers=4,dim=32,heads=2,seq=8", 3, "1f1b", 4},
    {"llama:layers=4,dim=32,heads=2,seq=8", 2, "interleaved:3", 2},
    {"llama:layers=4,dim=32,heads=2,seq=8", 4, "gpipe", 4},
};

TEST(PipelineTest, EverySchedulesEqualsAccumulationBitForBit) {
  for (const Case& k : kBitwise) {
    const int batch = 2 * k.micro_batches;
    const TrainResult reference = train_local(config(k.model, k.micro_batches, batch));
    const TrainResult result =
        train_local(pipelined(config(k.model, k.micro_batches, batch), k.stages, k.schedule));
    EXPECT_EQ(losses(result), losses(reference)) << name(k);
    EXPECT_EQ(differing_floats(result.final_params, reference.final_params), 0u) << name(k);
    EXPECT_FALSE(result.pipeline.empty()) << name(k);
  }
}

// Stages x replicas: each stage's replicas average its gradients (DDP's Reducer over a
// communicator split from the run's), which equals DDP over the replicas bit for bit.
TEST(PipelineTest, ReplicasOfAPipelineEqualDataParallelAccumulationBitForBit) {
  for (const char* strategy : {"bucketed", "layerwise", "sequential"}) {
    for (const Case& k : {Case{"mlp:6x32", 2, "1f1b", 4}, Case{"mlp:6x32", 3, "gpipe", 2},
                          Case{"mlp:6x32", 2, "interleaved:2", 2},
                          Case{"llama:layers=4,dim=32,heads=2,seq=8", 2, "1f1b", 2}}) {
      TrainConfig ddp = config(k.model, k.micro_batches, 2 * k.micro_batches);
      ddp.ranks = 2;
      ddp.reducer.plan.strategy = Strategy::parse(strategy);
      ddp.reducer.plan.first_bucket_cap_bytes = 4096;  // several buckets
      ddp.reducer.plan.bucket_cap_bytes = 8192;
      const TrainResult reference = train_local(ddp);
      TrainConfig pipe = pipelined(ddp, k.stages, k.schedule);
      pipe.ranks = 2 * k.stages;
      const TrainResult result = train_local(pipe);
      EXPECT_EQ(losses(result), losses(reference)) << name(k) << " " << strategy;
      EXPECT_EQ(differing_floats(result.final_params, reference.final_params), 0u)
          << name(k) << " " << strategy;
      EXPECT_GT(result.bytes_per_step, 0);
    }
  }
}

// gpt with the embedding and head on two stages and 2 replicas: the tied gradient is
// summed over the embedding group and then averaged over the replicas, never averaged
// early by the first stage's backward (which raced the sum and averaged half of it).
TEST(PipelineTest, GptWithReplicasAgreesWithDataParallelToRounding) {
  const std::string gpt = "gpt:layers=2,dim=32,heads=2,seq=8,vocab=64";
  for (CommMode mode : {CommMode::kOverlapped, CommMode::kSequential}) {
    TrainConfig ddp = config(gpt, 2, 4);
    ddp.ranks = 2;
    ddp.reducer.mode = mode;
    const TrainResult reference = train_local(ddp);
    TrainConfig pipe = pipelined(ddp, 2, "1f1b");
    pipe.ranks = 4;
    const TrainResult result = train_local(pipe);
    ASSERT_EQ(result.final_params.size(), reference.final_params.size());
    double worst = 0;
    for (std::size_t i = 0; i < result.final_params.size(); ++i) {
      const double a = result.final_params[i], b = reference.final_params[i];
      worst = std::max(worst, std::abs(a - b) / (1e-3 + std::abs(b)));
    }
    EXPECT_LT(worst, 1e-5) << to_string(mode);
  }
}

TEST(PipelineTest, BlockingTransfersAndSequentialModeGiveTheSameParameters) {
  TrainConfig c = pipelined(config("mlp:6x32", 4, 8), 3, "1f1b");
  c.timeout_ns = 60'000'000'000;  // a deadlock fails in a minute, not five
  const TrainResult overlapped = train_local(c);
  c.reducer.mode = CommMode::kSequential;
  const TrainResult sequential = train_local(c);
  EXPECT_EQ(differing_floats(sequential.final_params, overlapped.final_params), 0u);
}

// gpt ties its head to the embedding: with the two on different stages each stage sums
// its half of that gradient, then the halves are added (Megatron's embedding group), in
// another order than one stage accumulates them: the runs agree to rounding.
TEST(PipelineTest, GptWithTheTiedEmbeddingOnTwoStagesAgreesToRounding) {
  const std::string gpt = "gpt:layers=2,dim=32,heads=2,seq=8,vocab=64";
  const TrainResult reference = train_local(config(gpt, 4, 8));
  const TrainResult result = train_local(pipelined(config(gpt, 4, 8), 2, "1f1b"));
  ASSERT_EQ(result.final_params.size(), reference.final_params.size());
  double worst = 0;
  for (std::size_t i = 0; i < result.final_params.size(); ++i) {
    const double a = result.final_params[i], b = reference.final_params[i];
    worst = std::max(worst, std::abs(a - b) / (1e-3 + std::abs(b)));
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(differing_floats(result.final_params, reference.final_params), 0u)
      << "the tied sum came out bit for bit: this test no longer checks the tolerance";
  const std::vector<float> pipe = losses(result), ref = losses(reference);
  ASSERT_EQ(pipe.size(), ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(pipe[i], ref[i], 1e-5 * ref[i]);
}

TEST(PipelineTest, OnlyTheFirstAndLastStagesReportTheLoss) {
  const TrainResult r = train_local(pipelined(config("mlp:6x32", 4, 8), 3, "1f1b"));
  for (const StepRecord& s : r.steps) {
    EXPECT_EQ(s.has_loss, s.rank != 1) << "rank " << s.rank;
    if (s.rank == 0) {
      const auto last = std::find_if(r.steps.begin(), r.steps.end(), [&](const StepRecord& o) {
        return o.step == s.step && o.rank == 2;
      });
      ASSERT_NE(last, r.steps.end());
      EXPECT_EQ(s.loss, last->loss);
    }
  }
}

// A stage keeps its units' parameters, gradients and velocity, and activations for the
// micro-batches its schedule holds at once: gpipe all M on the first stage, 1f1b at most
// P there (the others one more: the next forward's input is received ahead).
TEST(PipelineTest, StagesKeepTheirUnitsAndTheirScheduleMicroBatches) {
  const TrainConfig single = config("mlp:6x32", 8, 16);
  const TrainResult whole = train_local(single);
  ASSERT_EQ(whole.memory.size(), 1u);
  const std::int64_t whole_params = whole.memory[0].state.params;
  for (const char* schedule : {"gpipe", "1f1b"}) {
    const TrainResult r = train_local(pipelined(single, 3, schedule));
    ASSERT_EQ(r.memory.size(), 3u);
    std::int64_t params = 0;
    for (const RankMemory& m : r.memory) {
      params += m.state.params;
      EXPECT_LT(m.state.params, whole_params) << schedule;
      EXPECT_EQ(m.state.optimizer, m.state.params) << schedule;
      EXPECT_GT(m.state.activations, 0) << schedule;
    }
    EXPECT_EQ(params, whole_params) << schedule;  // mlp ties nothing
    const bool gpipe = std::string(schedule) == "gpipe";
    EXPECT_EQ(r.memory[0].micro_batches_in_flight, gpipe ? 8 : 3) << schedule;
    EXPECT_EQ(r.memory[2].micro_batches_in_flight, gpipe ? 8 : 2) << schedule << " (last)";
  }
}

// Every scenario of characterize runs every schedule to its end: a deadlock would fail
// with the timeout's error instead.
TEST(PipelineTest, EveryScenarioRunsEverySchedule) {
  for (const Case& k : {Case{"mlp:6x32", 2, "interleaved:2", 8}, Case{"mlp:6x32", 3, "1f1b", 6},
                        Case{"mlp:6x32", 3, "gpipe", 3}, Case{"mlp:6x32", 2, "interleaved:3", 4}}) {
    TrainConfig c = pipelined(config(k.model, k.micro_batches, 2 * k.micro_batches), k.stages,
                              k.schedule);
    c.timeout_ns = 30'000'000'000;
    c.ranks = 2 * k.stages;  // with replicas
    c.reducer.mode = CommMode::kSequential;
    EXPECT_GT(train_local(c).bytes_per_step, 0) << name(k);
    c.reducer.mode = CommMode::kOff;  // compute-only
    EXPECT_EQ(train_local(c).bytes_per_step, 0) << name(k);
    c.reducer.mode = CommMode::kOverlapped;
    c.compute = false;  // comm-only: the transfers alone
    const TrainResult comm_only = train_local(c);
    EXPECT_GT(comm_only.bytes_per_step, 0) << name(k);
    for (const StepRecord& s : comm_only.steps) EXPECT_FALSE(s.has_loss) << name(k);
  }
}

void expect_usage_error(const TrainConfig& c, const std::string& needle) {
  try {
    validate(c);
    ADD_FAILURE() << "accepted; expected an error naming " << needle;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PipelineTest, ShapesThatCannotRunAreUsageErrorsNamingTheFlag) {
  const TrainConfig base = config("mlp:4x32", 4, 8);
  expect_usage_error(pipelined(base, 5, "1f1b"), "--pipeline 5");  // 5 chunks, 4 units
  expect_usage_error(pipelined(base, 2, "interleaved:3"), "has only 4 units");
  expect_usage_error(pipelined(config("mlp:4x32", 3, 9), 2, "interleaved:2"), "--schedule");
  expect_usage_error(config("mlp:4x32", 3, 8), "--micro-batches 3 does not divide --batch 8");
  TrainConfig accumulate = config("mlp:4x32", 2, 8);
  accumulate.accumulate = 2;
  expect_usage_error(accumulate, "--accumulate");
  TrainConfig ranks = pipelined(base, 2, "1f1b");
  ranks.ranks = 3;
  expect_usage_error(ranks, "not a multiple of the stages");
  TrainConfig chunked = pipelined(base, 2, "1f1b");
  chunked.reducer.plan.strategy = Strategy::parse("chunked:4");
  expect_usage_error(chunked, "--strategy chunked:4");
  TrainConfig split = pipelined(base, 2, "1f1b");
  split.pipeline.split = {1, 2};
  expect_usage_error(split, "--split");
  split.pipeline.split = {1, 2, 1};
  expect_usage_error(split, "--split");
  TrainConfig sharded = pipelined(base, 2, "1f1b");
  sharded.reducer.plan.strategy = Strategy::parse("fsdp");
  expect_usage_error(sharded, "--strategy fsdp");
  EXPECT_THROW(parse_schedule("zigzag"), UsageError);
  TrainConfig one_stage = config("mlp:4x32", 2, 8);
  one_stage.pipeline.schedule = parse_schedule("gpipe");
  expect_usage_error(one_stage, "--schedule gpipe: needs --pipeline 2 or more");
  TrainConfig auto_one_stage = config("mlp:4x32", 2, 8);
  auto_one_stage.pipeline.split_auto = true;
  expect_usage_error(auto_one_stage, "--split auto: balances pipeline stages; needs --pipeline 2");
  TrainConfig device = pipelined(config("mlp:4x32", 4, 8), 2, "interleaved:2");
  device.device = Device::kCuda;
  expect_usage_error(device, "--schedule interleaved:2 with --device cuda");
}

// --split auto (Note [--split auto]): a time per unit, and whatever split the times give,
// the run is the accumulation's bit for bit and says the split it used.
TEST(PipelineTest, SplitAutoMeasuresEveryUnitAndTrainsAsAccumulation) {
  const std::string model = "llama:layers=3,dim=16,heads=2,seq=6,vocab=29";  // no tie
  const TrainConfig base = config(model, 4, 8);
  const std::vector<double> seconds = measure_unit_seconds(base, 2);
  ASSERT_EQ(seconds.size(), static_cast<std::size_t>(ModelLayout(base.model).units()));
  for (double s : seconds) EXPECT_GT(s, 0.0);
  for (const char* schedule : {"1f1b", "interleaved:2"}) {
    TrainConfig c = pipelined(base, 2, schedule);
    c.pipeline.split_auto = true;
    const TrainResult result = train_local(c);
    const TrainResult reference = train_local(base);
    EXPECT_EQ(losses(result), losses(reference)) << schedule;
    EXPECT_EQ(differing_floats(result.final_params, reference.final_params), 0u) << schedule;
    EXPECT_NE(result.pipeline.find("; units 0"), std::string::npos) << result.pipeline;
  }
}

TEST(PipelineTest, BalancedSplitEvensTheCostAndAnExplicitSplitIsKept) {
  EXPECT_EQ(balance_units({1, 1, 1, 1, 1, 1}, 3), (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(balance_units({1, 1, 1, 1, 4}, 2), (std::vector<int>{4, 1}));
  EXPECT_EQ(balance_units({5, 1, 1, 1, 1, 1}, 2), (std::vector<int>{1, 5}));
  PipelineOptions options{.stages = 2, .split = {1, 3}};
  const StagePlan plan = plan_stages(options, 2, 2, ModelLayout(ModelSpec::parse("mlp:4x32")));
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0], (std::pair<int, int>{0, 0}));
  EXPECT_EQ(plan.chunks[1], (std::pair<int, int>{1, 3}));
}

}  // namespace
}  // namespace tandem
