// An independent double-precision reference of tandem's model for the tests: plain loops,
// no BLAS, written from the formulas rather than from src/model. Parameters are read from
// an Mlp's flat array through its ParamInfo offsets, so the reference checks the layout
// as well as the math.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "model/mlp.h"

namespace tandem::testing {

struct RefLayer {
  int in = 0;
  int out = 0;
  std::vector<double> w;  // [in, out]
  std::vector<double> b;  // [out] or empty
};

struct RefModel {
  std::vector<RefLayer> layers;
  Activation activation = Activation::kReLU;
  int classes = 0;
};

inline RefModel reference_of(const Mlp& model) {
  const ModelSpec& spec = model.spec();
  RefModel ref;
  ref.activation = spec.activation;
  ref.classes = spec.classes;
  ref.layers.resize(model.layer_count());
  for (int l = 0; l < model.layer_count(); ++l) {
    ref.layers[l].in = l == 0 ? spec.input : spec.width;
    ref.layers[l].out = l == model.layer_count() - 1 ? spec.classes : spec.width;
  }
  const auto flat = model.flat_params();
  for (const ParamInfo& p : model.params()) {
    auto& dst = p.name.ends_with(".weight") ? ref.layers[p.unit].w : ref.layers[p.unit].b;
    dst.assign(flat.begin() + p.offset, flat.begin() + p.offset + p.numel);
  }
  return ref;
}

inline double ref_activation(Activation a, double x) {
  switch (a) {
    case Activation::kReLU:
      return x > 0 ? x : 0;
    case Activation::kGELU: {
      const double s = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1 + std::tanh(s * (x + 0.044715 * x * x * x)));
    }
    case Activation::kNone:
      return x;
  }
  return x;
}

struct RefResult {
  double loss = 0;
  std::vector<double> logits;            // [rows, classes]
  double min_abs_hidden_pre = INFINITY;  // distance of the nearest ReLU input to its kink
};

inline RefResult ref_forward(const RefModel& m, const std::vector<double>& x,
                             const std::vector<std::int32_t>& y, int rows) {
  RefResult r;
  std::vector<double> cur = x;
  for (std::size_t l = 0; l < m.layers.size(); ++l) {
    const RefLayer& L = m.layers[l];
    std::vector<double> next(static_cast<std::size_t>(rows) * L.out);
    for (int i = 0; i < rows; ++i) {
      for (int o = 0; o < L.out; ++o) {
        double acc = L.b.empty() ? 0.0 : L.b[o];
        for (int k = 0; k < L.in; ++k) acc += cur[i * L.in + k] * L.w[k * L.out + o];
        if (l + 1 < m.layers.size()) {
          r.min_abs_hidden_pre = std::min(r.min_abs_hidden_pre, std::abs(acc));
          acc = ref_activation(m.activation, acc);
        }
        next[i * L.out + o] = acc;
      }
    }
    cur = std::move(next);
  }
  r.logits = cur;
  const int C = m.classes;
  for (int i = 0; i < rows; ++i) {
    const double* z = &cur[static_cast<std::size_t>(i) * C];
    const double mx = *std::max_element(z, z + C);
    double sum = 0;
    for (int c = 0; c < C; ++c) sum += std::exp(z[c] - mx);
    r.loss += std::log(sum) + mx - z[y[i]];
  }
  r.loss /= rows;
  return r;
}

}  // namespace tandem::testing
