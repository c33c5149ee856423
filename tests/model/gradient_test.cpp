// Analytic fp32 gradients and forward values against an independent double-precision
// reference (tests/model/reference.h) with central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "model/mlp.h"
#include "reference.h"
#include "test_util.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

using testing::OwnedBatch;
using testing::RefModel;

struct GradCase {
  std::string spec;
  int classes;
  int rows;
  std::uint64_t seed;
};

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.spec << " (classes " << c.classes << ", rows " << c.rows << ")";
}

class GradientTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientTest, EveryParameterMatchesFiniteDifferences) {
  const GradCase& c = GetParam();
  const ModelSpec spec = ModelSpec::parse(c.spec, c.classes);
  // max_batch above rows: strides must follow the batch, not the capacity.
  Mlp model(spec, c.rows + 3, 42);
  testing::randomize_params(model, c.seed);
  const OwnedBatch batch = testing::random_batch(c.rows, spec.input, spec.classes, c.seed + 1);
  RankRecorder recorder(0, 256);

  model.zero_grad();
  const float loss = model.forward(batch.view(), recorder, 0);
  model.backward(recorder, 0, {});
  const std::vector<float> grads(model.flat_grads().begin(), model.flat_grads().end());

  RefModel ref = testing::reference_of(model);
  const std::vector<double> x(batch.x.begin(), batch.x.end());
  const auto base = testing::ref_forward(ref, x, batch.y, c.rows);
  if (spec.activation == Activation::kReLU && spec.depth > 1) {
    // Finite differences across a ReLU kink are meaningless; the step below moves a
    // pre-activation by ~1e-6, so stay well clear of 0.
    ASSERT_GT(base.min_abs_hidden_pre, 1e-4) << "pick another seed";
  }
  EXPECT_NEAR(loss, base.loss, 1e-5 * (1 + std::abs(base.loss)));

  const double h = 1e-6;
  double max_abs = 0;
  std::string worst;
  int checked = 0;
  for (const ParamInfo& p : model.params()) {
    auto& values = p.name.ends_with(".weight") ? ref.layers[p.unit].w : ref.layers[p.unit].b;
    ASSERT_EQ(values.size(), p.numel);
    for (std::size_t i = 0; i < p.numel; ++i) {
      const double saved = values[i];
      values[i] = saved + h;
      const double plus = testing::ref_forward(ref, x, batch.y, c.rows).loss;
      values[i] = saved - h;
      const double minus = testing::ref_forward(ref, x, batch.y, c.rows).loss;
      values[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      const double analytic = grads[p.offset + i];
      const double diff = std::abs(analytic - numeric);
      EXPECT_LE(diff, 1e-5 + 1e-3 * std::abs(numeric))
          << p.name << "[" << i << "]: analytic " << analytic << " numeric " << numeric;
      if (diff > max_abs) {
        max_abs = diff;
        worst = p.name + "[" + std::to_string(i) + "]";
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, spec.parameter_count());
  std::printf("[ %s ] %d gradients, largest |analytic - numeric| = %.3g at %s\n", c.spec.c_str(),
              checked, max_abs, worst.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Models, GradientTest,
    ::testing::Values(GradCase{"mlp:3x6", 5, 4, 11}, GradCase{"mlp:3x6,gelu", 5, 4, 12},
                      GradCase{"mlp:1x6", 4, 3, 13}, GradCase{"mlp:2x9,gelu", 3, 5, 14},
                      GradCase{"linear:7x5", 0, 4, 15}),
    [](const auto& param_info) { return "case" + std::to_string(param_info.index); });

TEST(ForwardTest, LogitsAndLossMatchReferenceForVaryingRows) {
  const ModelSpec spec = ModelSpec::parse("mlp:3x16,gelu", 6);
  Mlp model(spec, 8, 7);
  testing::randomize_params(model, 99);
  RankRecorder recorder(0, 256);
  // Shrinking rows after a larger batch catches stale or capacity-strided buffers.
  for (int rows : {8, 3, 8}) {
    const OwnedBatch batch = testing::random_batch(rows, spec.input, spec.classes, 100 + rows);
    const float loss = model.forward(batch.view(), recorder, 0);
    const auto ref = testing::ref_forward(testing::reference_of(model),
                                          {batch.x.begin(), batch.x.end()}, batch.y, rows);
    const auto logits = model.logits();
    ASSERT_EQ(logits.size(), ref.logits.size());
    double max_diff = 0;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(logits[i] - ref.logits[i]));
      EXPECT_NEAR(logits[i], ref.logits[i], 1e-5 + 1e-5 * std::abs(ref.logits[i])) << i;
    }
    EXPECT_NEAR(loss, ref.loss, 1e-5 * (1 + ref.loss));
    std::printf("[ rows %d ] largest |logit - reference| = %.3g\n", rows, max_diff);
  }
}

TEST(ForwardTest, LossIsStableForHugeLogits) {
  // Logits of +-1e4 overflow a naive exp(); the loss must stay finite and exact.
  const ModelSpec spec = ModelSpec::parse("linear:2x3");
  Mlp model(spec, 2, 1);
  auto w = model.flat_params();  // [2, 3]
  const float values[] = {1e4f, 0, -1e4f, 0, 0, 0};
  std::copy(std::begin(values), std::end(values), w.begin());
  const std::vector<float> x = {1, 0, 1, 0};
  const std::vector<std::int32_t> y = {0, 2};  // right and maximally wrong
  RankRecorder recorder(0, 64);
  const float loss = model.forward(Batch{.x = x, .y = y, .rows = 2}, recorder, 0);
  EXPECT_NEAR(loss, (0.0 + 2e4) / 2, 1.0);
  model.zero_grad();
  model.backward(recorder, 0, {});
  for (float g : model.flat_grads()) EXPECT_TRUE(std::isfinite(g));
}

TEST(AccumulationTest, TwoBackwardsWithoutZeroGradDoubleTheGradients) {
  const ModelSpec spec = ModelSpec::parse("mlp:4x12,gelu", 5);
  Mlp model(spec, 6, 3);
  testing::randomize_params(model, 5);
  const OwnedBatch batch = testing::random_batch(6, spec.input, spec.classes, 6);
  RankRecorder recorder(0, 256);
  model.zero_grad();
  model.forward(batch.view(), recorder, 0);
  model.backward(recorder, 0, {});
  const std::vector<float> once(model.flat_grads().begin(), model.flat_grads().end());
  // Parameter gradients must add up; if activation gradients accumulated too, the
  // earlier layers would come out at more than twice.
  model.backward(recorder, 0, {});
  const auto twice = model.flat_grads();
  double nonzero = 0;
  for (std::size_t i = 0; i < once.size(); ++i) {
    EXPECT_NEAR(twice[i], 2.0 * once[i], 1e-6 * std::abs(once[i]) + 1e-9) << i;
    nonzero += once[i] != 0.0f;
  }
  EXPECT_GT(nonzero, 0.9 * once.size());

  model.zero_grad();
  for (float g : model.flat_grads()) ASSERT_EQ(g, 0.0f);
  model.forward(batch.view(), recorder, 1);
  model.backward(recorder, 1, {});
  for (std::size_t i = 0; i < once.size(); ++i) ASSERT_EQ(model.flat_grads()[i], once[i]) << i;
}

}  // namespace
}  // namespace tandem
