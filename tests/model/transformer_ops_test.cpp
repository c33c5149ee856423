// Every transformer kernel's backward (model/layers.h) against central finite differences
// of its forward, in double on tiny shapes. Each check reduces the kernel's output to a
// scalar L = sum(out * w) with random weights w, so the backward runs with dout = w and
// dL/dx must equal (L(x + h) - L(x - h)) / 2h for every input x.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/layers.h"
#include "model/rng.h"

namespace tandem {
namespace {

using Ops = layers::Ops<double>;
using Vec = std::vector<double>;

Vec random_vec(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  detail::SplitMix64 rng(seed);
  Vec v(n);
  for (double& x : v) x = rng.uniform(-scale, scale);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic[i] == dL/dx[i] for every element of x, where `loss` recomputes L from the
// current contents of x. x is restored afterwards.
void expect_gradient(const std::string& what, Vec& x, const Vec& analytic,
                     const std::function<double()>& loss) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const double h = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 1e-7 + 1e-6 * std::abs(numeric))
        << what << "[" << i << "]";
  }
}

TEST(TransformerOps, LinearWithAndWithoutBias) {
  const int B = 3, I = 4, O = 5;
  Vec inp = random_vec(B * I, 1), weight = random_vec(I * O, 2), bias = random_vec(O, 3);
  const Vec w = random_vec(B * O, 4);
  for (const bool with_bias : {true, false}) {
    auto loss = [&] {
      Vec out(B * O);
      Ops::linear_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr,
                          B, I, O);
      return dot(out, w);
    };
    // Gradients accumulate: start from a known non-zero value and subtract it.
    Vec dinp(B * I, 7.0), dweight(I * O, 0.5), dbias(O, -1.0);
    Ops::linear_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, w.data(),
                         inp.data(), weight.data(), B, I, O);
    for (double& g : dweight) g -= 0.5;
    for (double& g : dbias) g += 1.0;
    expect_gradient("dinp", inp, dinp, loss);
    expect_gradient("dweight", weight, dweight, loss);
    if (with_bias) expect_gradient("dbias", bias, dbias, loss);
  }
}

TEST(TransformerOps, LinearResidualAddsTheStreamAndMayAliasIt) {
  const int B = 2, I = 3, O = 4;
  const Vec inp = random_vec(B * I, 5), weight = random_vec(I * O, 6), bias = random_vec(O, 7);
  Vec residual = random_vec(B * O, 8);
  Vec plain(B * O);
  Ops::linear_forward(plain.data(), inp.data(), weight.data(), bias.data(), B, I, O);
  Vec out(B * O);
  Ops::linear_residual_forward(out.data(), residual.data(), inp.data(), weight.data(), bias.data(),
                               B, I, O);
  for (int i = 0; i < B * O; ++i) EXPECT_DOUBLE_EQ(out[i], residual[i] + plain[i]) << i;
  Ops::linear_residual_forward(residual.data(), residual.data(), inp.data(), weight.data(),
                               bias.data(), B, I, O);
  EXPECT_EQ(residual, out) << "in place on the stream";
}

TEST(TransformerOps, GeluTanhApproximation) {
  const int n = 9;
  Vec inp = random_vec(n, 9, 3.0);
  const Vec w = random_vec(n, 10);
  auto loss = [&] {
    Vec out(n);
    Ops::gelu_forward(out.data(), inp.data(), n);
    return dot(out, w);
  };
  Vec out(n);
  Ops::gelu_forward(out.data(), inp.data(), n);
  for (int i = 0; i < n; ++i) {
    const double x = inp[i];
    const double want =
        0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(out[i], want, 1e-14) << i;
  }
  Vec dinp(n);
  Ops::gelu_backward(dinp.data(), inp.data(), w.data(), n);
  expect_gradient("dinp", inp, dinp, loss);
}

// The fused bias + GELU pair is the bias add, gelu_forward and gelu_backward with the
// bias gradient summed over rows, in one pass each.
TEST(TransformerOps, BiasGeluIsTheBiasThenGeluAndItsGradient) {
  const int N = 3, F = 5;
  const Vec up0 = random_vec(N * F, 21, 2.0);
  const Vec bias = random_vec(F, 22);
  const Vec dout = random_vec(N * F, 23);
  Vec up = up0, act(N * F);
  Ops::bias_gelu_forward(act.data(), up.data(), bias.data(), N, F);
  Vec want_up = up0, want_act(N * F);
  for (int n = 0; n < N; ++n) {
    for (int f = 0; f < F; ++f) want_up[n * F + f] += bias[f];
  }
  Ops::gelu_forward(want_act.data(), want_up.data(), N * F);
  EXPECT_EQ(up, want_up) << "up holds the pre-activation, bias included";
  EXPECT_EQ(act, want_act);

  Vec dup(N * F), dbias(F, 1.0);
  Ops::gelu_bias_backward(dup.data(), dbias.data(), up.data(), dout.data(), N, F);
  Vec want_dup(N * F), want_dbias(F, 1.0);
  Ops::gelu_backward(want_dup.data(), up.data(), dout.data(), N * F);
  for (int n = 0; n < N; ++n) {
    for (int f = 0; f < F; ++f) want_dbias[f] += want_dup[n * F + f];
  }
  EXPECT_EQ(dup, want_dup);
  for (int f = 0; f < F; ++f) EXPECT_NEAR(dbias[f], want_dbias[f], 1e-15) << "accumulates";
}

TEST(TransformerOps, SwiGluOnTheFusedGateAndUp) {
  const int N = 3, F = 4;
  Vec gate_up = random_vec(N * 2 * F, 11, 2.0);
  const Vec w = random_vec(N * F, 12);
  auto loss = [&] {
    Vec out(N * F);
    Ops::swiglu_forward(out.data(), gate_up.data(), N, F);
    return dot(out, w);
  };
  Vec out(N * F);
  Ops::swiglu_forward(out.data(), gate_up.data(), N, F);
  const double g = gate_up[1 * 2 * F + 2], u = gate_up[1 * 2 * F + F + 2];
  EXPECT_NEAR(out[1 * F + 2], g / (1 + std::exp(-g)) * u, 1e-14) << "gate then up, per row";
  Vec dgate_up(N * 2 * F, 99.0);  // overwritten
  Ops::swiglu_backward(dgate_up.data(), w.data(), gate_up.data(), N, F);
  expect_gradient("dgate_up", gate_up, dgate_up, loss);
}

TEST(TransformerOps, CrossEntropyMeanOverRows) {
  const int B = 3, C = 5;
  Vec logits = random_vec(B * C, 13, 2.0);
  const std::vector<std::int32_t> targets = {4, 0, 2};
  auto loss = [&] {
    Vec probs(B * C);
    return Ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), B, C);
  };
  Vec probs(B * C);
  const double l = Ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), B, C);
  double want = 0;
  for (int b = 0; b < B; ++b) {
    double z = 0;
    for (int c = 0; c < C; ++c) z += std::exp(logits[b * C + c]);
    want += std::log(z) - logits[b * C + targets[b]];
  }
  EXPECT_NEAR(l, want / B, 1e-13);
  Vec dlogits(B * C);
  Ops::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), B, C);
  expect_gradient("dlogits", logits, dlogits, loss);
  // In place: probabilities over the logits, then the gradient over the probabilities.
  Vec inplace = logits;
  EXPECT_EQ(Ops::cross_entropy_forward(inplace.data(), inplace.data(), targets.data(), B, C), l);
  Ops::cross_entropy_backward(inplace.data(), inplace.data(), targets.data(), B, C);
  EXPECT_EQ(inplace, dlogits);
}

TEST(TransformerOps, EmbeddingWithAndWithoutPositions) {
  const int B = 2, Tn = 3, D = 4, V = 5;
  // Token 1 appears twice: its row's gradient is the sum of both.
  const std::vector<std::int32_t> tokens = {1, 3, 1, 0, 4, 2};
  Vec wte = random_vec(V * D, 14), wpe = random_vec(Tn * D, 15);
  const Vec w = random_vec(B * Tn * D, 16);
  for (const bool positions : {true, false}) {
    auto loss = [&] {
      Vec out(B * Tn * D);
      Ops::embedding_forward(out.data(), tokens.data(), wte.data(), positions ? wpe.data() : nullptr,
                             B, Tn, D);
      return dot(out, w);
    };
    Vec dwte(V * D, 0.0), dwpe(Tn * D, 0.0);
    Ops::embedding_backward(dwte.data(), positions ? dwpe.data() : nullptr, w.data(), tokens.data(),
                            B, Tn, D);
    expect_gradient("dwte", wte, dwte, loss);
    if (positions) expect_gradient("dwpe", wpe, dwpe, loss);
  }
}

TEST(TransformerOps, LayerNormWithTheResidualGradient) {
  const int N = 3, D = 6;
  Vec inp = random_vec(N * D, 17, 2.0), weight = random_vec(D, 18), bias = random_vec(D, 19);
  const Vec w = random_vec(N * D, 20), dresidual = random_vec(N * D, 21);
  auto loss = [&] {
    Vec out(N * D), mean(N), rstd(N);
    Ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), N, D);
    return dot(out, w) + dot(inp, dresidual);  // the stream also flows past the norm
  };
  Vec out(N * D), mean(N), rstd(N);
  Ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, D);
  double m = 0;
  for (int d = 0; d < D; ++d) m += inp[D + d];
  EXPECT_NEAR(mean[1], m / D, 1e-14);
  Vec dinp(N * D), dweight(D, 0.0), dbias(D, 0.0);
  Ops::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dresidual.data(), w.data(),
                          inp.data(), weight.data(), mean.data(), rstd.data(), N, D);
  expect_gradient("dinp", inp, dinp, loss);
  expect_gradient("dweight", weight, dweight, loss);
  expect_gradient("dbias", bias, dbias, loss);
}

TEST(TransformerOps, RmsNormWithTheResidualGradient) {
  const int N = 3, D = 6;
  Vec inp = random_vec(N * D, 22, 2.0), weight = random_vec(D, 23);
  const Vec w = random_vec(N * D, 24), dresidual = random_vec(N * D, 25);
  auto loss = [&] {
    Vec out(N * D), rstd(N);
    Ops::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, D);
    return dot(out, w) + dot(inp, dresidual);
  };
  Vec out(N * D), rstd(N);
  Ops::rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, D);
  Vec dinp(N * D), dweight(D, 0.0);
  Ops::rmsnorm_backward(dinp.data(), dweight.data(), dresidual.data(), w.data(), inp.data(),
                        weight.data(), rstd.data(), N, D);
  expect_gradient("dinp", inp, dinp, loss);
  expect_gradient("dweight", weight, dweight, loss);
  // Without a residual gradient, only the norm's own contribution.
  Vec alone(N * D);
  Ops::rmsnorm_backward(alone.data(), dweight.data(), nullptr, w.data(), inp.data(), weight.data(),
                        rstd.data(), N, D);
  for (int i = 0; i < N * D; ++i) EXPECT_NEAR(alone[i], dinp[i] - dresidual[i], 1e-14) << i;
}

TEST(TransformerOps, CausalAttention) {
  const int B = 2, Tn = 4, D = 6, H = 2;
  Vec qkv = random_vec(B * Tn * 3 * D, 26, 1.5);
  const Vec w = random_vec(B * Tn * D, 27);
  auto loss = [&] {
    Vec out(B * Tn * D), att(B * H * Tn * Tn);
    Ops::attention_forward(out.data(), att.data(), qkv.data(), B, Tn, D, H);
    return dot(out, w);
  };
  Vec out(B * Tn * D), att(B * H * Tn * Tn);
  Ops::attention_forward(out.data(), att.data(), qkv.data(), B, Tn, D, H);
  for (int bh = 0; bh < B * H; ++bh) {
    for (int t = 0; t < Tn; ++t) {
      double row = 0;
      for (int s = 0; s < Tn; ++s) {
        const double a = att[(bh * Tn + t) * Tn + s];
        if (s > t) {
          EXPECT_EQ(a, 0.0) << "a query attends to no later key";
        }
        row += a;
      }
      EXPECT_NEAR(row, 1.0, 1e-14) << "softmax rows sum to one";
    }
  }
  // The first token attends to itself alone: its output is its own value.
  for (int d = 0; d < D; ++d) EXPECT_NEAR(out[d], qkv[2 * D + d], 1e-14) << d;
  Vec dqkv(B * Tn * 3 * D, 99.0), scratch(Tn * Tn);
  Ops::attention_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, Tn, D,
                          H);
  expect_gradient("dqkv", qkv, dqkv, loss);
}

TEST(TransformerOps, RotaryEmbeddingTurnsQueriesAndKeysAndKeepsValues) {
  const int B = 2, Tn = 3, D = 8, H = 2, hd = D / H;
  Vec table(Tn * hd);
  Ops::rope_table(table.data(), Tn, hd);
  EXPECT_DOUBLE_EQ(table[0], 1.0) << "position 0 does not turn";
  EXPECT_DOUBLE_EQ(table[1], 0.0);
  EXPECT_NEAR(table[(2 * (hd / 2) + 1) * 2], std::cos(2 * std::pow(10000.0, -2.0 / hd)), 1e-15);
  Vec qkv = random_vec(B * Tn * 3 * D, 28);
  const Vec w = random_vec(qkv.size(), 29);
  auto loss = [&] {
    Vec turned = qkv;
    Ops::rope_forward(turned.data(), table.data(), B, Tn, D, H);
    return dot(turned, w);
  };
  Vec turned = qkv;
  Ops::rope_forward(turned.data(), table.data(), B, Tn, D, H);
  for (int t = 0; t < Tn; ++t) {
    for (int d = 0; d < D; ++d) {
      const std::size_t v = (static_cast<std::size_t>(t) * 3 + 2) * D + d;
      EXPECT_EQ(turned[v], qkv[v]) << "values are not turned";
    }
  }
  for (int t = 0; t < Tn; ++t) {  // a turn keeps each pair's length
    const std::size_t q = static_cast<std::size_t>(t) * 3 * D + 2;
    EXPECT_NEAR(std::hypot(turned[q], turned[q + 1]), std::hypot(qkv[q], qkv[q + 1]), 1e-14);
  }
  Vec dqkv = w;
  Ops::rope_backward(dqkv.data(), table.data(), B, Tn, D, H);
  expect_gradient("dqkv", qkv, dqkv, loss);
}

}  // namespace
}  // namespace tandem
