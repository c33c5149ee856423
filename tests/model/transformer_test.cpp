// The transformers (model/transformer.h) as a whole: every parameter's gradient against
// central finite differences of the loss in double, causality, the float model against
// the double one, unit-by-unit against whole passes, and learning.
#include "model/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/rng.h"
#include "model/token_data.h"
#include "timeline/recorder.h"

namespace tandem {
namespace {

std::vector<std::int32_t> random_tokens(int rows, int seq, int vocab, std::uint64_t seed) {
  detail::SplitMix64 rng(seed);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows) * (seq + 1));
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.next() % vocab);
  return tokens;
}

// Parameters drawn wider than the initialization (whose biases and norm weights are 0 and
// 1): every path, biases and norm weights included, carries a gradient worth checking.
template <typename T>
void randomize(BasicTransformer<T>& model, std::uint64_t seed) {
  detail::SplitMix64 rng(seed);
  for (T& p : model.flat_params()) p = static_cast<T>(rng.uniform(-0.5, 0.5));
}

struct Tiny {
  std::string spec;
};

void PrintTo(const Tiny& t, std::ostream* os) { *os << t.spec; }

class TransformerGradientTest : public ::testing::TestWithParam<Tiny> {};

// A tied head (gpt) gets its embedding's gradient from both ends; rope, SwiGLU and the
// untied head (llama) are on the other path. Every parameter is checked.
TEST_P(TransformerGradientTest, EveryParameterMatchesFiniteDifferences) {
  const ModelSpec spec = ModelSpec::parse(GetParam().spec);
  const int rows = 2;
  // max_batch above rows: strides must follow the batch, not the capacity.
  BasicTransformer<double> model(spec, rows + 2, 7);
  randomize(model, 11);
  const std::vector<std::int32_t> tokens =
      random_tokens(rows, spec.transformer.seq, spec.transformer.vocab, 13);
  const TokenBatch batch{.tokens = tokens, .rows = rows};
  RankRecorder recorder(0, 4096);
  model.zero_grad();
  const double loss = model.forward(batch, recorder, 0);
  model.backward(recorder, 0);
  const std::vector<double> grads(model.flat_grads().begin(), model.flat_grads().end());
  EXPECT_GT(loss, 0.0);

  std::span<double> params = model.flat_params();
  ASSERT_EQ(params.size(), static_cast<std::size_t>(spec.parameter_count()));
  const double h = 1e-5;
  int nonzero = 0;
  for (const ParamInfo& p : model.layout().params()) {
    for (std::size_t i = 0; i < p.numel; ++i) {
      double& x = params[p.offset + i];
      const double saved = x;
      x = saved + h;
      const double plus = model.forward(batch, recorder, 0);
      x = saved - h;
      const double minus = model.forward(batch, recorder, 0);
      x = saved;
      const double numeric = (plus - minus) / (2 * h);
      const double analytic = grads[p.offset + i];
      ASSERT_NEAR(analytic, numeric, 1e-8 + 1e-5 * std::abs(numeric))
          << p.name << "[" << i << "] of " << spec.describe();
      nonzero += analytic != 0;
    }
  }
  // Tokens absent from the batch leave their embedding rows at zero; the rest is not.
  EXPECT_GT(nonzero, static_cast<int>(params.size()) / 2);
}

INSTANTIATE_TEST_SUITE_P(Tiny, TransformerGradientTest,
                         ::testing::Values(Tiny{"gpt:layers=2,dim=8,heads=2,seq=5,vocab=11"},
                                           Tiny{"llama:layers=2,dim=8,heads=2,seq=5,hidden=12,"
                                                "vocab=11"}));

class TransformerTest : public ::testing::TestWithParam<Tiny> {};

// Changing token t changes no logit before position t, in every head and layer.
TEST_P(TransformerTest, ALaterTokenNeverChangesAnEarlierOutput) {
  const ModelSpec spec = ModelSpec::parse(GetParam().spec);
  const int Tn = spec.transformer.seq, V = spec.transformer.vocab;
  BasicTransformer<double> model(spec, 1, 3);
  randomize(model, 5);
  RankRecorder recorder(0, 4096);
  std::vector<std::int32_t> tokens = random_tokens(1, Tn, V, 17);
  model.forward({.tokens = tokens, .rows = 1}, recorder, 0);
  // forward_loss turned the logits into probabilities: compare those (a function of the
  // logits, row by row).
  const std::vector<double> before(model.logits().begin(), model.logits().end());
  for (int t = 1; t < Tn; ++t) {
    std::vector<std::int32_t> changed = tokens;
    changed[t] = (changed[t] + 1) % V;
    model.forward({.tokens = changed, .rows = 1}, recorder, 0);
    const std::span<const double> after = model.logits();
    for (int p = 0; p < Tn; ++p) {
      bool same = true;
      for (int v = 0; v < V; ++v) same &= after[p * V + v] == before[p * V + v];
      if (p < t) {
        EXPECT_TRUE(same) << "token " << t << " changed position " << p;
      } else if (p == t) {
        EXPECT_FALSE(same) << "token " << t << " must change its own position";
      }
    }
  }
}

// The float model and the double model are the same code: from the same parameters they
// agree to float precision.
TEST_P(TransformerTest, FloatAgreesWithDouble) {
  const ModelSpec spec = ModelSpec::parse(GetParam().spec);
  BasicTransformer<float> f(spec, 3, 1);
  BasicTransformer<double> d(spec, 3, 1);
  ASSERT_EQ(f.flat_params().size(), d.flat_params().size());
  for (std::size_t i = 0; i < f.flat_params().size(); ++i) {
    EXPECT_EQ(static_cast<double>(f.flat_params()[i]), d.flat_params()[i])
        << "one initialization for both";
  }
  const std::vector<std::int32_t> tokens =
      random_tokens(3, spec.transformer.seq, spec.transformer.vocab, 19);
  RankRecorder recorder(0, 4096);
  f.zero_grad();
  d.zero_grad();
  const double lf = f.forward({.tokens = tokens, .rows = 3}, recorder, 0);
  const double ld = d.forward({.tokens = tokens, .rows = 3}, recorder, 0);
  EXPECT_NEAR(lf, ld, 1e-5 * ld);
  f.backward(recorder, 0);
  d.backward(recorder, 0);
  double scale = 0;
  for (const double g : d.flat_grads()) scale = std::max(scale, std::abs(g));
  for (std::size_t i = 0; i < d.flat_grads().size(); ++i) {
    EXPECT_NEAR(f.flat_grads()[i], d.flat_grads()[i], 1e-4 * scale) << i;
  }
}

// Unit by unit is the whole pass: the engine drives units one at a time.
TEST_P(TransformerTest, UnitByUnitIsTheWholePassBitwise) {
  const ModelSpec spec = ModelSpec::parse(GetParam().spec);
  Transformer a(spec, 2, 9), b(spec, 2, 9);
  const std::vector<std::int32_t> tokens =
      random_tokens(2, spec.transformer.seq, spec.transformer.vocab, 23);
  RankRecorder recorder(0, 4096);
  a.zero_grad();
  b.zero_grad();
  const double la = a.forward({.tokens = tokens, .rows = 2}, recorder, 0);
  a.backward(recorder, 0);
  b.set_input({.tokens = tokens, .rows = 2});
  for (int u = 0; u < b.units(); ++u) b.forward_unit(u, recorder, 0);
  const double lb = b.forward_loss(recorder, 0);
  b.backward_loss(recorder, 0);
  for (int u = b.units() - 1; u >= 0; --u) b.backward_unit(u, recorder, 0);
  EXPECT_EQ(la, lb);
  EXPECT_TRUE(std::equal(a.flat_grads().begin(), a.flat_grads().end(), b.flat_grads().begin()));
}

// Spans: one per sub-operation, forward and backward, each unit tagged; the matrix
// products carry FLOPs.
TEST_P(TransformerTest, RecordsASpanPerSubOperationWithFlops) {
  const ModelSpec spec = ModelSpec::parse(GetParam().spec);
  Transformer model(spec, 2, 9);
  const std::vector<std::int32_t> tokens =
      random_tokens(2, spec.transformer.seq, spec.transformer.vocab, 29);
  RankRecorder recorder(0, 4096);
  model.forward({.tokens = tokens, .rows = 2}, recorder, 4);
  model.backward(recorder, 4);
  const std::vector<Span> spans = recorder.collect();
  ASSERT_FALSE(spans.empty());
  double forward_flops = 0, backward_flops = 0;
  std::vector<int> units_seen(model.units() + 1, 0);
  for (const Span& s : spans) {
    EXPECT_EQ(s.step, 4);
    EXPECT_LE(s.start_ns, s.end_ns);
    ASSERT_GE(s.tag, 0);
    ASSERT_LE(s.tag, model.units());
    ++units_seen[s.tag];
    (s.kind == SpanKind::kForward ? forward_flops : backward_flops) += s.flops;
  }
  for (int u = 0; u <= model.units(); ++u) EXPECT_GT(units_seen[u], 0) << "unit " << u;
  EXPECT_GT(forward_flops, 0);
  EXPECT_NEAR(backward_flops, 2 * forward_flops, 1e-9 * forward_flops);
}

INSTANTIATE_TEST_SUITE_P(Tiny, TransformerTest,
                         ::testing::Values(Tiny{"gpt:layers=2,dim=16,heads=4,seq=6,vocab=13"},
                                           Tiny{"llama:layers=2,dim=16,heads=2,seq=6,vocab=13"}));

// On the synthetic chain (each token has 4 equally likely successors) plain SGD must take
// the loss from about ln(vocab) towards ln(4).
TEST(TransformerLearnTest, LearnsTheSyntheticChain) {
  const ModelSpec spec = ModelSpec::parse("gpt:layers=1,dim=32,heads=2,seq=16,vocab=32");
  const int rows = 8;
  Transformer model(spec, rows, 1);
  const TokenData data = TokenData::synthetic(32, 16, rows, 1, 0);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows) * 17);
  RankRecorder recorder(0, 1 << 16);
  std::vector<float> velocity(model.flat_params().size(), 0.0f);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    model.zero_grad();
    data.batch(step, tokens);
    const double loss = model.forward({.tokens = tokens, .rows = rows}, recorder, step);
    model.backward(recorder, step);
    if (step == 0) first = loss;
    last = loss;
    std::span<float> p = model.flat_params();
    std::span<const float> g = model.flat_grads();
    for (std::size_t i = 0; i < p.size(); ++i) {
      velocity[i] = 0.9f * velocity[i] + g[i];
      p[i] -= 0.05f * velocity[i];
    }
    recorder.clear();
  }
  EXPECT_NEAR(first, std::log(32.0), 0.5);
  EXPECT_LT(last, 0.5 * (std::log(32.0) + std::log(4.0))) << "from " << first;
}

}  // namespace
}  // namespace tandem
