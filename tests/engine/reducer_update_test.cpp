// The reducer's own updates (docs/REDUCER.md). --overlap-optimizer (Note [optimizer
// overlap] in ddp/reducer.cpp): each bucket is updated as soon as its all-reduce is done,
// and the result is bit for bit the update of the whole replica after the last wait.
// --double-buffer (Note [double buffering]): a step's gradients are all-reduced during the
// next step and update it, bit for bit the one-step-delayed SGD of a plain loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "comm/communicator.h"
#include "core/error.h"
#include "ddp/reducer.h"
#include "engine/same_training.h"
#include "engine/trainer.h"

namespace tandem {
namespace {

// One rank whose all-reduces complete only when the test says so: what the reducer does
// while a bucket is still on the wire, without any timing.
class GatedComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend_name() const override { return "gated"; }
  std::string describe() const override { return "gated"; }
  WorkPtr allreduce(std::span<float>, ReduceOp, OpInfo info) override {
    works.push_back(std::make_shared<Work>(info));  // one rank: the average is the data
    works.back()->mark_started(0);
    return works.back();
  }
  WorkPtr reduce_scatter(std::span<const float>, std::span<float>, ReduceOp, OpInfo) override {
    throw std::logic_error("not used");
  }
  WorkPtr allreduce(std::span<std::uint16_t>, DataType, ReduceOp, OpInfo) override {
    throw std::logic_error("not used");
  }
  WorkPtr reduce_scatter(std::span<const std::uint16_t>, std::span<std::uint16_t>, DataType,
                         ReduceOp, OpInfo) override {
    throw std::logic_error("not used");
  }
  WorkPtr allgather(std::span<const float>, std::span<float>, OpInfo) override {
    throw std::logic_error("not used");
  }
  WorkPtr broadcast(std::span<float>, int, OpInfo) override { throw std::logic_error("not used"); }
  WorkPtr barrier(OpInfo) override { throw std::logic_error("not used"); }
  WorkPtr send(std::span<const float>, int, int, OpInfo) override {
    throw std::logic_error("not used");
  }
  WorkPtr recv(std::span<float>, int, int, OpInfo) override { throw std::logic_error("not used"); }
  std::unique_ptr<Communicator> split(int, int) override { throw std::logic_error("not used"); }
  void abort(const std::string&) override {}
  void drain() override {}

  std::vector<WorkPtr> works;  // in issue order
};

// A 3-unit mlp, layerwise: bucket b holds unit 2 - b (ddp/reducer.h's layout).
class OptimizerOverlapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelConfig config{.spec = ModelSpec::parse("mlp:3x8", 8), .batch = 2};
    config.sgd = {.lr = 0.5f, .momentum = 0.0f, .weight_decay = 0.0f};
    model_ = make_rank_model(config, recorder_);
    std::fill(model_->params().begin(), model_->params().end(), 1.0f);
    std::fill(model_->grads().begin(), model_->grads().end(), 1.0f);
    ReducerOptions options;
    options.plan.strategy = Strategy::parse("layerwise");
    options.overlap_optimizer = true;
    // Two micro-batches: the gradients are scaled by 1/2 in every update.
    reducer_ = std::make_unique<Reducer>(comm_, *model_, options, std::vector<bool>{}, 2);
  }
  // True when every parameter of bucket b took the step (1 - 0.5 * 1 / 2) and its gradient
  // was zeroed; false when none did; fails the test for anything in between.
  bool updated(int b) {
    const Bucket& bucket = reducer_->buckets().at(static_cast<std::size_t>(b));
    int stepped = 0;
    for (std::size_t i = bucket.begin; i < bucket.end; ++i) {
      const float p = model_->params()[i], g = model_->grads()[i];
      if (p == 0.75f && g == 0.0f) {
        ++stepped;
      } else {
        EXPECT_EQ(p, 1.0f) << "bucket " << b << " element " << i;
        EXPECT_EQ(g, 1.0f) << "bucket " << b << " element " << i;
      }
    }
    const auto n = static_cast<int>(bucket.end - bucket.begin);
    EXPECT_TRUE(stepped == 0 || stepped == n) << "bucket " << b << ": " << stepped << " of " << n;
    return stepped == n;
  }

  GatedComm comm_;
  RankRecorder recorder_{0, 64};
  std::unique_ptr<RankModel> model_;
  std::unique_ptr<Reducer> reducer_;
};

TEST_F(OptimizerOverlapTest, ABucketIsUpdatedOnceItsAllreduceIsDoneAndNotBefore) {
  ASSERT_EQ(reducer_->buckets().size(), 3u);
  reducer_->begin_step(0);
  reducer_->after_backward(2, true);  // bucket 0 launched, still on the wire
  ASSERT_EQ(comm_.works.size(), 1u);
  EXPECT_FALSE(updated(0));
  comm_.works[0]->finish(1);
  reducer_->after_backward(1, true);  // bucket 0 done: updated while bucket 1 starts
  EXPECT_TRUE(updated(0));
  EXPECT_FALSE(updated(1));
  ASSERT_EQ(comm_.works.size(), 2u);
  reducer_->after_backward(0, true);  // bucket 2 launched; bucket 1 still running
  EXPECT_FALSE(updated(1));
  EXPECT_FALSE(updated(2));
  comm_.works[2]->finish(2);  // the last bucket finishes first: still updated in its turn
  comm_.works[1]->finish(3);
  reducer_->before_optimizer();
  reducer_->optimizer_step(*model_, 0.5f);
  reducer_->after_optimizer();
  reducer_->end_step();
  EXPECT_TRUE(updated(1));
  EXPECT_TRUE(updated(2));
  // One optimizer span per bucket, tagged with it: the loop times none of its own.
  EXPECT_TRUE(reducer_->times_optimizer());
  model_->end_step();
  std::vector<int> tags;
  for (const Span& s : recorder_.lane(Lane::kCompute)) {
    if (s.kind == SpanKind::kOptimizer) tags.push_back(s.tag);
  }
  EXPECT_EQ(tags, (std::vector<int>{0, 1, 2}));
}

TEST_F(OptimizerOverlapTest, NothingIsUpdatedDuringAccumulatingMicroBatches) {
  reducer_->begin_step(0);
  for (int u = 2; u >= 0; --u) reducer_->after_backward(u, false);
  EXPECT_TRUE(comm_.works.empty());
  for (int b = 0; b < 3; ++b) EXPECT_FALSE(updated(b));
}

TrainConfig config(std::string_view model, std::string_view strategy, bool overlap) {
  TrainConfig c;
  c.model = ModelSpec::parse(model);
  c.ranks = 3;
  c.batch = 6;
  c.steps = 6;
  c.accumulate = 2;
  c.sgd = {.lr = 0.02f, .momentum = 0.9f, .weight_decay = 0.01f};
  c.reducer.plan.strategy = Strategy::parse(strategy);
  c.reducer.plan.bucket_cap_bytes = 40'000;  // several buckets on these small models
  c.reducer.plan.first_bucket_cap_bytes = 10'000;
  c.reducer.overlap_optimizer = overlap;
  c.verify = true;  // every rank holds the same parameters after every step
  return c;
}

TEST(OptimizerOverlapTrainTest, EveryStrategyEndsBitwiseEqualToTheWholeReplicasUpdate) {
  for (const char* model : {"mlp:4x96", "gpt:layers=2,dim=32,heads=2,seq=8"}) {
    for (const char* strategy :
         {"sequential", "layerwise", "bucketed", "chunked:7", "zero1", "zero2", "fsdp"}) {
      const TrainResult plain = train_local(config(model, strategy, false));
      const TrainResult overlapped = train_local(config(model, strategy, true));
      EXPECT_NE(overlapped.sync.find("optimizer overlapped"), std::string::npos) << overlapped.sync;
      expect_same_training(plain, overlapped, std::string(model) + " " + strategy);
      // The updates are the buckets' (a sharded strategy's: the units'): one optimizer span
      // per bucket per step and rank.
      std::size_t updates = 0;
      for (const Span& s : overlapped.timeline.spans) updates += s.kind == SpanKind::kOptimizer;
      const std::size_t per_step =
          Strategy::parse(strategy).sharded()
              ? static_cast<std::size_t>(ModelLayout(ModelSpec::parse(model)).units())
              : overlapped.buckets.size();
      EXPECT_EQ(updates, per_step * 6 * 3) << model << " " << strategy;
    }
  }
}

TEST(OptimizerOverlapTrainTest, EveryScenarioUpdatesAlikeAndCommOnlyUpdatesNothing) {
  for (const char* strategy : {"bucketed", "zero2"}) {
    for (CommMode mode : {CommMode::kSequential, CommMode::kOff}) {
      TrainConfig c = config("mlp:4x96", strategy, true);
      c.reducer.mode = mode;
      TrainConfig reference = config("mlp:4x96", strategy, false);
      reference.reducer.mode = mode;
      // Compute-only: without communication the replicas drift apart.
      c.verify = reference.verify = mode != CommMode::kOff;
      expect_same_training(train_local(reference), train_local(c),
                           std::string(strategy) + " " + std::string(to_string(mode)));
    }
  }
  TrainConfig comm_only = config("mlp:4x96", "bucketed", true);
  comm_only.compute = false;
  const TrainResult r = train_local(comm_only);
  std::size_t updates = 0, allreduces = 0;
  for (const Span& s : r.timeline.spans) {
    updates += s.kind == SpanKind::kOptimizer;
    allreduces += s.kind == SpanKind::kAllreduce;
  }
  EXPECT_EQ(updates, 0u);
  EXPECT_EQ(allreduces, r.buckets.size() * 6 * 3);
}

TEST(OptimizerOverlapTrainTest, PipelinesAreRefusedNamingTheFlag) {
  TrainConfig pipeline = config("mlp:4x96", "bucketed", true);
  pipeline.ranks = 2;
  pipeline.accumulate = 1;
  pipeline.pipeline.stages = 2;
  pipeline.pipeline.micro_batches = 2;
  pipeline.verify = false;
  try {
    validate(pipeline);
    ADD_FAILURE() << "a pipeline accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--overlap-optimizer: updates DDP's buckets or ZeRO's "
                                         "shards, not a --pipeline run"),
              std::string::npos)
        << e.what();
  }
}

// Double buffering, observed on the gated communicator: nothing goes out in the first
// step; the next step's all-reduce of the first step's gradients is launched before any of
// its backward, and its update uses them, not its own.
TEST_F(OptimizerOverlapTest, DoubleBufferingAveragesAStepsGradientsDuringTheNextOne) {
  ReducerOptions options;
  options.plan.strategy = Strategy::parse("layerwise");
  options.double_buffer = true;
  Reducer reducer(comm_, *model_, options);
  EXPECT_FALSE(reducer.times_optimizer());
  auto step = [&](int k, float grad) {
    reducer.begin_step(k);
    const std::size_t launched_at_begin = comm_.works.size();
    std::fill(model_->grads().begin(), model_->grads().end(), grad);  // this step's backward
    for (int u = 2; u >= 0; --u) reducer.after_backward(u, true);
    EXPECT_EQ(comm_.works.size(), launched_at_begin) << "nothing launches during backward";
    for (const WorkPtr& w : comm_.works) {
      if (!w->test()) w->finish(k);
    }
    reducer.before_optimizer();
    reducer.optimizer_step(*model_, 1.0f);
    reducer.after_optimizer();
    reducer.end_step();
    EXPECT_EQ(std::count(model_->grads().begin(), model_->grads().end(), 0.0f),
              static_cast<std::ptrdiff_t>(model_->grads().size()))
        << "the model's gradients are zeroed for the next step";
    return launched_at_begin;
  };
  EXPECT_EQ(step(0, 1.0f), 0u);  // nothing to average yet, and no update
  for (float p : model_->params()) ASSERT_EQ(p, 1.0f);
  EXPECT_EQ(step(1, 3.0f), 3u);  // step 0's three buckets, before step 1's backward
  for (const WorkPtr& w : comm_.works) EXPECT_EQ(w->info().step, 1);
  for (float p : model_->params()) ASSERT_EQ(p, 0.5f);  // 1 - 0.5 x step 0's gradient 1
  EXPECT_EQ(step(2, 5.0f), 6u);
  for (float p : model_->params()) ASSERT_EQ(p, -1.0f);  // 0.5 - 0.5 x step 1's gradient 3
}

// The one-step-delayed SGD written as a plain loop over one rank's model: step k computes
// g(k) at w(k) and applies g(k - 1). train() with --double-buffer must end on its bits.
TEST(DoubleBufferTrainTest, EqualsAPlainLoopOfTheOneStepDelayedUpdate) {
  TrainConfig c = config("mlp:4x96", "bucketed", false);
  c.ranks = 1;
  c.accumulate = 1;
  c.reducer.double_buffer = true;
  const TrainResult trained = train_local(c);

  RankRecorder recorder(0, 1 << 12);
  ModelConfig mc{.spec = c.model, .batch = c.batch, .seed = c.seed, .sgd = c.sgd};
  std::unique_ptr<RankModel> model = make_rank_model(mc, recorder);
  std::vector<float> previous(model->grads().size()), velocity(previous.size());
  for (int k = 0; k < c.steps; ++k) {
    model->begin_step(k);
    model->set_micro_batch(k);
    for (int u = 0; u < model->units(); ++u) model->forward_unit(u);
    model->forward_loss();
    model->backward_loss();
    for (int u = model->units() - 1; u >= 0; --u) model->backward_unit(u);
    if (k > 0) model->sgd_step(model->params(), previous, velocity, 1.0f);
    std::copy(model->grads().begin(), model->grads().end(), previous.begin());
    model->zero_grad();
    model->end_step();
  }
  const std::vector<float> expected = model->download_params();
  ASSERT_EQ(trained.final_params.size(), expected.size());
  EXPECT_EQ(std::memcmp(trained.final_params.data(), expected.data(), 4 * expected.size()), 0);
}

TEST(DoubleBufferTrainTest, ReplicasStayEqualTheUpdateIsLateAndEveryStepButTheFirstAverages) {
  TrainConfig c = config("mlp:4x96", "bucketed", false);
  c.accumulate = 1;
  const TrainResult synchronous = train_local(c);
  c.reducer.double_buffer = true;
  const TrainResult delayed = train_local(c);  // --verify: every rank equal after every step
  EXPECT_NE(delayed.sync.find("double-buffered"), std::string::npos) << delayed.sync;
  ASSERT_EQ(delayed.final_params.size(), synchronous.final_params.size());
  EXPECT_NE(std::memcmp(delayed.final_params.data(), synchronous.final_params.data(),
                        4 * delayed.final_params.size()),
            0)
      << "a delayed update must train differently";
  std::map<int, std::size_t> allreduces;  // per step
  for (const Span& s : delayed.timeline.spans) allreduces[s.step] += s.kind == SpanKind::kAllreduce;
  EXPECT_EQ(allreduces[0], 0u);
  for (int k = 1; k < c.steps; ++k) {
    EXPECT_EQ(allreduces[k], delayed.buckets.size() * 3) << "step " << k;
  }
  TrainConfig both = c;
  both.reducer.overlap_optimizer = true;
  EXPECT_THROW(validate(both), UsageError);
}

}  // namespace
}  // namespace tandem
