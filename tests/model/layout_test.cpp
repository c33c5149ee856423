// The flat reverse layout, the per-layer ready callback and the recorded spans: the
// contract a gradient reducer builds on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/mlp.h"
#include "test_util.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

TEST(LayoutTest, ParamsAreInForwardOrderAndStoredInReverse) {
  const ModelSpec spec = ModelSpec::parse("mlp:3x8", 4);
  Mlp model(spec, 2, 1);
  ASSERT_EQ(model.layer_count(), 3);
  const auto& params = model.params();
  const std::vector<std::string> names = {"fc0.weight", "fc0.bias",   "fc1.weight",
                                          "fc1.bias",   "fc2.weight", "fc2.bias"};
  ASSERT_EQ(params.size(), names.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].name, names[i]);
    EXPECT_EQ(params[i].unit, static_cast<int>(i / 2));
  }
  // Last layer first; within a layer, weight then bias.
  EXPECT_EQ(params[4].offset, 0u);
  EXPECT_EQ(params[4].numel, 8u * 4);
  EXPECT_EQ(params[5].offset, 32u);
  EXPECT_EQ(params[5].numel, 4u);
  EXPECT_EQ(params[2].offset, 36u);
  EXPECT_EQ(params[0].offset, 36u + 72);
  EXPECT_EQ(params[1].offset, 36u + 72 + 64);
  EXPECT_EQ(model.flat_params().size(), static_cast<std::size_t>(spec.parameter_count()));
  EXPECT_EQ(model.flat_grads().size(), model.flat_params().size());
}

TEST(LayoutTest, LayerRangesAreContiguousReversedAndCoverEverything) {
  for (const char* text : {"mlp:5x7", "mlp:1x3", "linear:6x2", "mlp:2x4,gelu"}) {
    SCOPED_TRACE(text);
    Mlp model(ModelSpec::parse(text, 3), 1, 1);
    const int n = model.layer_count();
    EXPECT_EQ(model.layer_grad_begin(n - 1), 0u);
    for (int l = n - 1; l > 0; --l) {
      EXPECT_EQ(model.layer_grad_end(l), model.layer_grad_begin(l - 1));
    }
    EXPECT_EQ(model.layer_grad_end(0), model.flat_grads().size());
    for (const ParamInfo& p : model.params()) {
      EXPECT_GE(p.offset, model.layer_grad_begin(p.unit));
      EXPECT_LE(p.offset + p.numel, model.layer_grad_end(p.unit));
    }
    std::size_t total = 0;
    for (const ParamInfo& p : model.params()) total += p.numel;
    EXPECT_EQ(total, model.flat_grads().size());
  }
}

TEST(LayoutTest, LayerReadyComesLastToFirstOnceWithFinalGradients) {
  const ModelSpec spec = ModelSpec::parse("mlp:4x10,gelu", 6);
  Mlp model(spec, 5, 2);
  testing::randomize_params(model, 3);
  const auto batch = testing::random_batch(5, spec.input, spec.classes, 4);
  RankRecorder recorder(0, 256);
  model.zero_grad();
  model.forward(batch.view(), recorder, 7);

  std::vector<int> order;
  std::vector<std::vector<float>> at_callback(model.layer_count());
  model.backward(recorder, 7, [&](int layer) {
    order.push_back(layer);
    const auto grads = model.flat_grads();
    at_callback[layer].assign(grads.begin() + model.layer_grad_begin(layer),
                              grads.begin() + model.layer_grad_end(layer));
    // Layers before this one have not run: their ranges are still zero.
    for (int earlier = 0; earlier < layer; ++earlier) {
      for (std::size_t i = model.layer_grad_begin(earlier); i < model.layer_grad_end(earlier);
           ++i) {
        ASSERT_EQ(grads[i], 0.0f) << "layer " << earlier << " written before layer " << layer;
      }
    }
    // The layer's span has ended before the callback runs.
    const SpanBuffer& lane = recorder.lane(Lane::kCompute);
    ASSERT_GT(lane.size(), 0u);
    const Span& latest = *(lane.end() - 1);
    EXPECT_EQ(latest.kind, SpanKind::kBackward);
    EXPECT_EQ(latest.tag, layer);
  });
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
  const auto grads = model.flat_grads();
  for (int l = 0; l < model.layer_count(); ++l) {
    const std::vector<float> final_range(grads.begin() + model.layer_grad_begin(l),
                                         grads.begin() + model.layer_grad_end(l));
    EXPECT_EQ(at_callback[l], final_range) << "layer " << l << " changed after its callback";
    EXPECT_TRUE(
        std::any_of(final_range.begin(), final_range.end(), [](float g) { return g != 0.0f; }));
  }
}

TEST(LayoutTest, RecordsOneSpanPerLayerAndForTheLoss) {
  const ModelSpec spec = ModelSpec::parse("mlp:3x8", 4);
  Mlp model(spec, 16, 1);
  const auto batch = testing::random_batch(16, spec.input, spec.classes, 2);
  RankRecorder recorder(3, 256);
  model.forward(batch.view(), recorder, 5);
  model.backward(recorder, 5, {});
  const SpanBuffer& lane = recorder.lane(Lane::kCompute);
  ASSERT_EQ(lane.size(), 8u);
  const Span* s = lane.begin();
  const double B = 16;
  // Forward: layers 0..2, then the loss (tag = layer_count).
  const double fwd_flops[] = {2 * B * 8 * 8, 2 * B * 8 * 8, 2 * B * 8 * 4, 0};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s[i].kind, SpanKind::kForward);
    EXPECT_EQ(s[i].tag, i);
    EXPECT_EQ(s[i].flops, fwd_flops[i]);
  }
  // Backward: the loss gradient, then layers 2..0; layer 0 computes no input gradient.
  const int bwd_tags[] = {3, 2, 1, 0};
  const double bwd_flops[] = {0, 4 * B * 8 * 4, 4 * B * 8 * 8, 2 * B * 8 * 8};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s[4 + i].kind, SpanKind::kBackward);
    EXPECT_EQ(s[4 + i].tag, bwd_tags[i]);
    EXPECT_EQ(s[4 + i].flops, bwd_flops[i]);
  }
  for (const Span& span : lane) {
    EXPECT_EQ(span.lane, Lane::kCompute);
    EXPECT_EQ(span.step, 5);
    EXPECT_EQ(span.rank, 3);
    EXPECT_LE(span.start_ns, span.end_ns);
  }
  for (int i = 1; i < 8; ++i) EXPECT_LE(s[i - 1].end_ns, s[i].start_ns);
  EXPECT_EQ(model.forward_flops(16), fwd_flops[0] + fwd_flops[1] + fwd_flops[2]);
}

TEST(InitTest, SameSeedSameParametersAndKaimingBounds) {
  const ModelSpec spec = ModelSpec::parse("mlp:3x64", 10);
  Mlp a(spec, 1, 123), b(spec, 1, 123), c(spec, 1, 124);
  EXPECT_TRUE(std::equal(a.flat_params().begin(), a.flat_params().end(), b.flat_params().begin()));
  EXPECT_FALSE(std::equal(a.flat_params().begin(), a.flat_params().end(), c.flat_params().begin()));
  for (const ParamInfo& p : a.params()) {
    const auto values = a.flat_params().subspan(p.offset, p.numel);
    if (p.name.ends_with(".bias")) {
      for (float v : values) EXPECT_EQ(v, 0.0f);
      continue;
    }
    const double gain = p.unit < 2 ? std::sqrt(2.0) : 1.0;
    const double bound = gain * std::sqrt(3.0 / 64);
    double sum_sq = 0;
    for (float v : values) {
      EXPECT_LE(std::abs(v), bound);
      sum_sq += double{v} * v;
    }
    // Uniform(-b, b) has variance b^2 / 3.
    EXPECT_NEAR(sum_sq / values.size(), bound * bound / 3, 0.15 * bound * bound / 3) << p.name;
  }
}

TEST(InitTest, MovedModelKeepsWorking) {
  const ModelSpec spec = ModelSpec::parse("mlp:2x4", 3);
  Mlp a(spec, 2, 9);
  const std::vector<float> before(a.flat_params().begin(), a.flat_params().end());
  Mlp b = std::move(a);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), b.flat_params().begin()));
  const auto batch = testing::random_batch(2, 4, 3, 1);
  RankRecorder recorder(0, 64);
  const float loss = b.forward(batch.view(), recorder, 0);
  b.backward(recorder, 0, {});
  EXPECT_TRUE(std::isfinite(loss));
}

TEST(InitTest, RejectsBadBatch) {
  const ModelSpec spec = ModelSpec::parse("mlp:2x4", 3);
  EXPECT_THROW(Mlp(spec, 0, 1), UsageError);
  EXPECT_THROW(Mlp(ModelSpec::parse("mlp:1x65536"), 1 << 16, 1), UsageError);
}

}  // namespace
}  // namespace tandem
