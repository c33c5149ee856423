// ModelLayout: shapes, the reverse flat layout and initialization (layout.h).
#include "model/layout.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/rng.h"

namespace tandem {

ModelLayout::ModelLayout(const ModelSpec& spec) : spec_(spec) {
  TANDEM_CHECK(spec.depth >= 1 && spec.input >= 1 && spec.classes >= 1);
  TANDEM_CHECK(spec.depth == 1 || spec.width >= 1);
  const int depth = spec.depth;
  layers_.resize(static_cast<std::size_t>(depth));
  for (int l = 0; l < depth; ++l) {
    LinearLayout& layer = layers_[static_cast<std::size_t>(l)];
    layer.in = l == 0 ? spec.input : spec.width;
    layer.out = l == depth - 1 ? spec.classes : spec.width;
    layer.has_bias = spec.bias;
    widest_ = std::max({widest_, layer.in, layer.out});
  }
  // Reverse order, weight then bias within a layer (see layout.h).
  std::size_t offset = 0;
  for (int l = depth - 1; l >= 0; --l) {
    LinearLayout& layer = layers_[static_cast<std::size_t>(l)];
    layer.begin = offset;
    layer.weight = offset;
    offset += static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out);
    if (layer.has_bias) {
      layer.bias = offset;
      offset += static_cast<std::size_t>(layer.out);
    }
    layer.end = offset;
  }
  numel_ = offset;
  TANDEM_CHECK_EQ(static_cast<std::int64_t>(numel_), spec.parameter_count());
  // ParamInfo in forward registration order.
  for (int l = 0; l < depth; ++l) {
    const LinearLayout& layer = layers_[static_cast<std::size_t>(l)];
    const std::string prefix = "fc" + std::to_string(l);
    params_.push_back({prefix + ".weight", l,
                       static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out),
                       layer.weight});
    if (layer.has_bias) {
      params_.push_back({prefix + ".bias", l, static_cast<std::size_t>(layer.out), layer.bias});
    }
  }
}

// Kaiming-uniform: U(-b, b) with b = gain * sqrt(3 / fan_in) gives Var = gain^2 / fan_in.
// gain = sqrt(2) for layers followed by ReLU/GELU (they halve the variance), 1 for the
// last layer so the initial logits are O(1) and the initial loss is near log(classes).
// One stream in forward order: the same seed gives the same parameters everywhere.
void ModelLayout::initialize(std::span<float> flat, std::uint64_t seed) const {
  TANDEM_CHECK_EQ(flat.size(), numel_);
  std::fill(flat.begin(), flat.end(), 0.0f);
  detail::SplitMix64 rng(detail::mix64(seed ^ 0x6d6f64656c696e69ULL));  // "modelini"
  const int depth = units();
  for (int l = 0; l < depth; ++l) {
    const LinearLayout& layer = layers_[static_cast<std::size_t>(l)];
    const double gain = l < depth - 1 ? std::sqrt(2.0) : 1.0;
    const double bound = gain * std::sqrt(3.0 / layer.in);
    float* w = flat.data() + layer.weight;
    const std::size_t n = static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out);
    for (std::size_t i = 0; i < n; ++i) w[i] = static_cast<float>(rng.uniform(-bound, bound));
  }
}

double ModelLayout::forward_flops(int rows) const {
  double flops = 0;
  for (const LinearLayout& layer : layers_) flops += 2.0 * rows * layer.in * layer.out;
  return flops;
}

}  // namespace tandem
