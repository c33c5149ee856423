// The reducer's plans (which ranges go together) and its launch rule (a unit goes as
// soon as all its parameters are ready, in plan order).
#include <gtest/gtest.h>

#include <numeric>

#include "comm/local/local_comm.h"
#include "core/error.h"
#include "ddp/reducer.h"

namespace tandem {
namespace {

// Parameters of an L-layer model with weight [w] and bias [b] per layer, laid out in
// reverse registration order like Mlp does: layer L-1 first.
std::vector<GradParam> layered_params(const std::vector<std::pair<std::size_t, std::size_t>>& layers,
                                      std::size_t* total) {
  std::vector<GradParam> params;
  std::size_t offset = 0;
  std::vector<std::size_t> begin(layers.size());
  for (int l = static_cast<int>(layers.size()) - 1; l >= 0; --l) {
    begin[l] = offset;
    offset += layers[l].first + layers[l].second;
  }
  for (std::size_t l = 0; l < layers.size(); ++l) {
    params.push_back({static_cast<int>(l), begin[l], layers[l].first});
    if (layers[l].second) {
      params.push_back({static_cast<int>(l), begin[l] + layers[l].first, layers[l].second});
    }
  }
  *total = offset;
  return params;
}

void expect_contiguous_cover(const std::vector<Bucket>& buckets, std::size_t total) {
  ASSERT_FALSE(buckets.empty());
  EXPECT_EQ(buckets.front().begin, 0u);
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    EXPECT_EQ(buckets[i].index, static_cast<int>(i));
    EXPECT_LT(buckets[i].begin, buckets[i].end);
    if (i > 0) {
      EXPECT_EQ(buckets[i].begin, buckets[i - 1].end);
    }
  }
  EXPECT_EQ(buckets.back().end, total);
}

TEST(StrategyTest, ParsesAndRejects) {
  EXPECT_EQ(Strategy::parse("bucketed").kind, StrategyKind::kBucketed);
  EXPECT_EQ(Strategy::parse("sequential").kind, StrategyKind::kSequential);
  EXPECT_EQ(Strategy::parse("layerwise").kind, StrategyKind::kLayerwise);
  const Strategy chunked = Strategy::parse("chunked:10");
  EXPECT_EQ(chunked.kind, StrategyKind::kChunked);
  EXPECT_EQ(chunked.chunks, 10);
  EXPECT_EQ(chunked.to_string(), "chunked:10");
  EXPECT_THROW(Strategy::parse("chunked:0"), UsageError);
  EXPECT_THROW(Strategy::parse("chunked:"), UsageError);
  EXPECT_THROW(Strategy::parse("chunked:x"), UsageError);
  EXPECT_THROW(Strategy::parse("ring"), UsageError);
  EXPECT_THROW(Strategy::parse(""), UsageError);
}

TEST(BucketPlanTest, BucketedRespectsCapsAndNeverSplitsParameters) {
  std::size_t total = 0;
  // 4 layers of 100k-float weights + 1k biases: 400 KB per weight.
  const auto params = layered_params({{100'000, 1000}, {100'000, 1000}, {100'000, 1000}, {100'000, 1000}}, &total);
  BucketPlanOptions options{.strategy = Strategy::parse("bucketed"),
                            .bucket_cap_bytes = 900'000,
                            .first_bucket_cap_bytes = 500'000};
  const auto buckets = plan_buckets(params, total, options);
  expect_contiguous_cover(buckets, total);
  for (const auto& b : buckets) {
    const std::int64_t cap = b.index == 0 ? options.first_bucket_cap_bytes : options.bucket_cap_bytes;
    EXPECT_LE(b.bytes(), cap) << "bucket " << b.index;
    // Whole parameters only: the bucket is exactly the sum of its parameters.
    std::size_t numel = 0;
    for (int p : b.params) numel += params[p].numel;
    EXPECT_EQ(numel, b.end - b.begin);
  }
  // First bucket: layer 3's bias + weight (404 KB) fits 500 KB; next two layers in 900 KB.
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].end, 101'000u);
  EXPECT_EQ(buckets[1].end, 303'000u);
}

TEST(BucketPlanTest, AParameterLargerThanTheCapGetsABucketOfItsOwn) {
  std::size_t total = 0;
  const auto params = layered_params({{1000, 10}, {1'000'000, 10}}, &total);
  const auto buckets = plan_buckets(params, total,
                                    {.strategy = Strategy::parse("bucketed"),
                                     .bucket_cap_bytes = 1000,
                                     .first_bucket_cap_bytes = 1000});
  expect_contiguous_cover(buckets, total);
  for (const auto& b : buckets) {
    if (b.bytes() > 1000) {
      EXPECT_EQ(b.params.size(), 1u);
    }
  }
}

TEST(BucketPlanTest, LayerwiseIsOneUnitPerLayerInBackwardOrder) {
  std::size_t total = 0;
  const auto params = layered_params({{10, 2}, {20, 3}, {30, 0}}, &total);
  const auto buckets = plan_buckets(params, total, {.strategy = Strategy::parse("layerwise")});
  expect_contiguous_cover(buckets, total);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].end - buckets[0].begin, 30u);  // layer 2 first
  EXPECT_EQ(buckets[1].end - buckets[1].begin, 23u);
  EXPECT_EQ(buckets[2].end - buckets[2].begin, 12u);
}

TEST(BucketPlanTest, ChunkedCutsEqualChunksAndListsOverlappingParameters) {
  std::size_t total = 0;
  const auto params = layered_params({{40, 0}, {40, 0}, {23, 0}}, &total);  // 103 floats
  const auto buckets = plan_buckets(params, total, {.strategy = Strategy::parse("chunked:5")});
  expect_contiguous_cover(buckets, total);
  ASSERT_EQ(buckets.size(), 5u);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(buckets[c].end - buckets[c].begin, 20u);
  EXPECT_EQ(buckets[4].end - buckets[4].begin, 23u);  // remainder in the last
  // Layer 2 occupies [0,23), layer 1 [23,63), layer 0 [63,103).
  EXPECT_EQ(buckets[1].params.size(), 2u);  // [20,40) touches layers 2 and 1
  // More chunks than elements: one element each.
  EXPECT_EQ(plan_buckets(params, total, {.strategy = Strategy::parse("chunked:1000")}).size(), total);
}

// The launch rule, observed on a real one-rank communicator.
// A 3-unit mlp (8 -> 8 -> 8 -> 8 classes): 72 floats per unit, unit 2 first in the flat
// gradient, as layered_params({{64, 8}, {64, 8}, {64, 8}}) lays it out.
class ReducerLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    comms_ = make_local_communicators({.ranks = 1});
    comms_[0]->set_recorder(&recorder_);
    ModelConfig config{.spec = ModelSpec::parse("mlp:3x8", 8), .batch = 2};
    model_ = make_rank_model(config, recorder_);
    std::fill(model_->grads().begin(), model_->grads().end(), 1.0f);
  }
  Reducer make(std::string_view strategy, CommMode mode = CommMode::kOverlapped) {
    ReducerOptions options;
    options.plan.strategy = Strategy::parse(strategy);
    options.mode = mode;
    return Reducer(*comms_[0], *model_, options);
  }
  std::vector<std::unique_ptr<Communicator>> comms_;
  RankRecorder recorder_{0, 64};
  std::unique_ptr<RankModel> model_;
};

TEST_F(ReducerLaunchTest, TheModelsLayoutIsTheOneTheseTestsAssume) {
  std::size_t total = 0;
  const auto params = layered_params({{64, 8}, {64, 8}, {64, 8}}, &total);
  const auto actual = grad_params(model_->layout());
  ASSERT_EQ(actual.size(), params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(actual[i].unit, params[i].unit);
    EXPECT_EQ(actual[i].offset, params[i].offset);
    EXPECT_EQ(actual[i].numel, params[i].numel);
  }
}

TEST_F(ReducerLaunchTest, LayerwiseLaunchesEachLayerAsItsGradientsAreReady) {
  Reducer reducer = make("layerwise");
  reducer.begin_step(0);
  EXPECT_EQ(reducer.launched(), 0u);
  reducer.after_backward(2, true);
  EXPECT_EQ(reducer.launched(), 1u);
  reducer.after_backward(1, true);
  EXPECT_EQ(reducer.launched(), 2u);
  reducer.after_backward(0, true);
  EXPECT_EQ(reducer.launched(), 3u);
  reducer.before_optimizer();
  reducer.end_step();
  for (float g : model_->grads()) EXPECT_EQ(g, 1.0f);  // average over one rank
}

TEST_F(ReducerLaunchTest, OnlyTheLastMicroBatchSynchronizes) {
  Reducer reducer = make("layerwise");
  reducer.begin_step(0);
  for (int u = 2; u >= 0; --u) reducer.after_backward(u, false);
  EXPECT_EQ(reducer.launched(), 0u);
  for (int u = 2; u >= 0; --u) reducer.after_backward(u, true);
  EXPECT_EQ(reducer.launched(), 3u);
  reducer.before_optimizer();
  reducer.end_step();
}

TEST_F(ReducerLaunchTest, ChunkWaitsForEveryParameterItOverlaps) {
  Reducer reducer = make("chunked:2");  // 216 floats: [0,108) spans units 2 and 1
  reducer.begin_step(0);
  reducer.after_backward(2, true);
  EXPECT_EQ(reducer.launched(), 0u);
  reducer.after_backward(1, true);
  EXPECT_EQ(reducer.launched(), 1u);
  reducer.after_backward(0, true);
  EXPECT_EQ(reducer.launched(), 2u);
  reducer.before_optimizer();
  reducer.end_step();
}

TEST_F(ReducerLaunchTest, SequentialAndDeferredLaunchNothingDuringBackward) {
  for (auto [strategy, mode] : {std::pair{"sequential", CommMode::kOverlapped},
                                std::pair{"layerwise", CommMode::kSequential}}) {
    Reducer reducer = make(strategy, mode);
    EXPECT_FALSE(reducer.overlaps());
    reducer.begin_step(0);
    for (int u = 2; u >= 0; --u) reducer.after_backward(u, true);
    EXPECT_EQ(reducer.launched(), 0u) << strategy;
    reducer.before_optimizer();
    reducer.end_step();
    EXPECT_EQ(reducer.launched(), reducer.buckets().size());
  }
}

TEST_F(ReducerLaunchTest, CommOffSendsNothing) {
  Reducer reducer = make("layerwise", CommMode::kOff);
  EXPECT_EQ(reducer.bytes_per_step(), 0);
  reducer.begin_step(0);
  for (int u = 2; u >= 0; --u) reducer.after_backward(u, true);
  reducer.before_optimizer();
  reducer.end_step();
  comms_.clear();  // joins the communication thread
  EXPECT_EQ(recorder_.lane(Lane::kComm).size(), 0u);
}

TEST_F(ReducerLaunchTest, RecordsCommSpansForEveryUnit) {
  Reducer reducer = make("layerwise");
  reducer.begin_step(7);
  for (int u = 2; u >= 0; --u) reducer.after_backward(u, true);
  reducer.before_optimizer();
  reducer.end_step();
  comms_.clear();  // joins the communication thread
  const SpanBuffer& comm = recorder_.lane(Lane::kComm);
  ASSERT_EQ(comm.size(), 3u);
  int tag = 0;
  for (const Span& s : comm) {
    EXPECT_EQ(s.kind, SpanKind::kAllreduce);
    EXPECT_EQ(s.step, 7);
    EXPECT_EQ(s.tag, tag++);
    EXPECT_GT(s.bytes, 0);
  }
}

}  // namespace
}  // namespace tandem
