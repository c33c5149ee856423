// ModelLayout: units, the reverse flat layout and initialization (layout.h).
#include "model/layout.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/rng.h"

namespace tandem {
namespace {

// Collects units and their tensors in forward order, then lays them out in reverse
// unit order (layout.h).
class LayoutBuilder {
 public:
  void unit(std::string name) {
    units_.push_back({.name = std::move(name)});
    owned_.emplace_back();
  }
  // A tensor of the current unit.
  void param(std::string name, std::vector<int> shape, ParamInit init) {
    TANDEM_CHECK(!units_.empty());
    std::size_t numel = 1;
    for (int d : shape) numel *= static_cast<std::size_t>(d);
    owned_.back().push_back(params_.size());
    params_.push_back({.name = std::move(name),
                       .unit = static_cast<int>(units_.size()) - 1,
                       .numel = numel,
                       .offset = 0,
                       .shape = std::move(shape),
                       .init = init});
  }
  // Assigns offsets: last unit first, tensors of a unit in registration order, each unit
  // padded and aligned as `options` asks.
  std::size_t finish(const LayoutOptions& options, std::vector<UnitInfo>& units,
                     std::vector<ParamInfo>& params) {
    const auto round_up = [](std::size_t n, std::size_t m) { return (n + m - 1) / m * m; };
    std::size_t offset = 0;
    for (std::size_t u = units_.size(); u-- > 0;) {
      offset = round_up(offset, options.unit_align);
      units_[u].begin = offset;
      for (std::size_t p : owned_[u]) {
        params_[p].offset = offset;
        offset += params_[p].numel;
      }
      units_[u].end = offset;
      offset = units_[u].padded_end =
          units_[u].begin + round_up(offset - units_[u].begin, options.unit_multiple);
    }
    units = std::move(units_);
    params = std::move(params_);
    return offset;
  }

 private:
  std::vector<UnitInfo> units_;
  std::vector<ParamInfo> params_;
  std::vector<std::vector<std::size_t>> owned_;  // per unit, indices into params_
};

constexpr ParamInit zeros() { return {ParamInit::Kind::kZero, 0}; }
constexpr ParamInit ones() { return {ParamInit::Kind::kOne, 0}; }
constexpr ParamInit normal(double std) { return {ParamInit::Kind::kNormal, std}; }

// GPT-2's initialization: weights N(0, 0.02), the two projections that write into the
// residual stream N(0, 0.02 / sqrt(2 L)) so that the stream's variance does not grow
// with depth, biases zero, norm gains one. LLaMA's models use the same scheme.
constexpr double kInitStd = 0.02;

void build_gpt(LayoutBuilder& b, const TransformerShape& s) {
  const int D = s.dim, F = s.hidden;
  const double residual_std = kInitStd / std::sqrt(2.0 * s.layers);
  b.unit("embedding");
  b.param("wte", {s.vocab, D}, normal(kInitStd));
  b.param("wpe", {s.seq, D}, normal(kInitStd));
  for (int l = 0; l < s.layers; ++l) {
    const std::string h = "h" + std::to_string(l) + ".";
    b.unit("h" + std::to_string(l));
    b.param(h + "ln1.weight", {D}, ones());
    b.param(h + "ln1.bias", {D}, zeros());
    b.param(h + "attn.qkv.weight", {D, 3 * D}, normal(kInitStd));
    b.param(h + "attn.qkv.bias", {3 * D}, zeros());
    b.param(h + "attn.proj.weight", {D, D}, normal(residual_std));
    b.param(h + "attn.proj.bias", {D}, zeros());
    b.param(h + "ln2.weight", {D}, ones());
    b.param(h + "ln2.bias", {D}, zeros());
    b.param(h + "mlp.fc.weight", {D, F}, normal(kInitStd));
    b.param(h + "mlp.fc.bias", {F}, zeros());
    b.param(h + "mlp.proj.weight", {F, D}, normal(residual_std));
    b.param(h + "mlp.proj.bias", {D}, zeros());
  }
  b.unit("head");  // the output head is wte (tied): only the final norm is its own
  b.param("lnf.weight", {D}, ones());
  b.param("lnf.bias", {D}, zeros());
}

void build_llama(LayoutBuilder& b, const TransformerShape& s) {
  const int D = s.dim, F = s.hidden;
  const double residual_std = kInitStd / std::sqrt(2.0 * s.layers);
  b.unit("embedding");
  b.param("wte", {s.vocab, D}, normal(kInitStd));
  for (int l = 0; l < s.layers; ++l) {
    const std::string h = "h" + std::to_string(l) + ".";
    b.unit("h" + std::to_string(l));
    b.param(h + "attn_norm.weight", {D}, ones());
    // q, k and v fused into one [D, 3D] product, and gate and up into one [D, 2F], as
    // Megatron-LM does: the same math as LLaMA's separate wq/wk/wv and w1/w3, in fewer
    // and larger matrix products.
    b.param(h + "attn.qkv.weight", {D, 3 * D}, normal(kInitStd));
    b.param(h + "attn.proj.weight", {D, D}, normal(residual_std));
    b.param(h + "mlp_norm.weight", {D}, ones());
    b.param(h + "mlp.gate_up.weight", {D, 2 * F}, normal(kInitStd));
    b.param(h + "mlp.down.weight", {F, D}, normal(residual_std));
  }
  b.unit("head");
  b.param("norm.weight", {D}, ones());
  b.param("lm_head.weight", {D, s.vocab}, normal(kInitStd));
}

}  // namespace

ModelLayout::ModelLayout(const ModelSpec& spec, LayoutOptions options)
    : spec_(spec), options_(options) {
  TANDEM_CHECK(options.unit_multiple >= 1 && options.unit_align >= 1);
  const bool packed = options.unit_multiple == 1 && options.unit_align == 1;
  LayoutBuilder builder;
  if (spec.is_transformer()) {
    const TransformerShape& s = spec.transformer;
    TANDEM_CHECK(s.layers >= 1 && s.dim >= 1 && s.heads >= 1 && s.seq >= 1 && s.vocab >= 1 &&
                 s.hidden >= 1 && s.dim % s.heads == 0);
    if (spec.kind == ModelKind::kGpt) {
      build_gpt(builder, s);
    } else {
      build_llama(builder, s);
    }
    numel_ = builder.finish(options_, units_, params_);
    if (packed) TANDEM_CHECK_EQ(static_cast<std::int64_t>(numel_), spec.parameter_count());
    return;
  }

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
    // Kaiming-uniform: U(-b, b) with b = gain * sqrt(3 / fan_in) gives Var = gain^2 /
    // fan_in. gain = sqrt(2) for layers followed by ReLU/GELU (they halve the variance),
    // 1 for the last layer so the initial logits are O(1) and the initial loss is near
    // log(classes).
    const double gain = l < depth - 1 ? std::sqrt(2.0) : 1.0;
    const std::string prefix = "fc" + std::to_string(l);
    builder.unit(prefix);
    builder.param(prefix + ".weight", {layer.in, layer.out},
                  {ParamInit::Kind::kUniform, gain * std::sqrt(3.0 / layer.in)});
    if (layer.has_bias) builder.param(prefix + ".bias", {layer.out}, zeros());
  }
  numel_ = builder.finish(options_, units_, params_);
  if (packed) TANDEM_CHECK_EQ(static_cast<std::int64_t>(numel_), spec.parameter_count());
  for (const ParamInfo& p : params_) {
    LinearLayout& layer = layers_[static_cast<std::size_t>(p.unit)];
    (p.name.ends_with(".weight") ? layer.weight : layer.bias) = p.offset;
  }
  for (int l = 0; l < depth; ++l) {
    layers_[static_cast<std::size_t>(l)].begin = unit_begin(l);
    layers_[static_cast<std::size_t>(l)].end = unit_end(l);
  }
}

std::vector<int> ModelLayout::units_read(int u) const {
  TANDEM_CHECK(u >= 0 && u < units());
  if (spec_.kind == ModelKind::kGpt && u == units() - 1) return {u, 0};
  return {u};
}

std::vector<float> ModelLayout::packed(std::vector<float> flat) const {
  TANDEM_CHECK_EQ(flat.size(), numel_);
  // Units in ascending offsets; each moves down (or stays), so a forward copy is safe.
  std::size_t to = 0;
  for (std::size_t u = units_.size(); u-- > 0;) {
    const UnitInfo& unit = units_[u];
    std::copy(flat.begin() + static_cast<std::ptrdiff_t>(unit.begin),
              flat.begin() + static_cast<std::ptrdiff_t>(unit.end),
              flat.begin() + static_cast<std::ptrdiff_t>(to));
    to += unit.end - unit.begin;
  }
  flat.resize(to);
  flat.shrink_to_fit();
  return flat;
}

TransformerOffsets transformer_offsets(const ModelLayout& layout) {
  const ModelSpec& spec = layout.spec();
  TANDEM_CHECK(spec.is_transformer());
  const bool gpt = spec.kind == ModelKind::kGpt;
  auto at = [&](const std::string& name) { return layout.param(name).offset; };
  TransformerOffsets out;
  out.wte = at("wte");
  if (gpt) {
    out.wpe = at("wpe");
    out.lnf_w = at("lnf.weight");
    out.lnf_b = at("lnf.bias");
  } else {
    out.lnf_w = at("norm.weight");
    out.head_w = at("lm_head.weight");
  }
  for (int l = 0; l < spec.transformer.layers; ++l) {
    const std::string h = "h" + std::to_string(l) + ".";
    if (gpt) {
      out.block_params.push_back({.ln1_w = at(h + "ln1.weight"),
                                  .ln1_b = at(h + "ln1.bias"),
                                  .qkv_w = at(h + "attn.qkv.weight"),
                                  .qkv_b = at(h + "attn.qkv.bias"),
                                  .proj_w = at(h + "attn.proj.weight"),
                                  .proj_b = at(h + "attn.proj.bias"),
                                  .ln2_w = at(h + "ln2.weight"),
                                  .ln2_b = at(h + "ln2.bias"),
                                  .up_w = at(h + "mlp.fc.weight"),
                                  .up_b = at(h + "mlp.fc.bias"),
                                  .down_w = at(h + "mlp.proj.weight"),
                                  .down_b = at(h + "mlp.proj.bias")});
    } else {
      out.block_params.push_back({.ln1_w = at(h + "attn_norm.weight"),
                                  .qkv_w = at(h + "attn.qkv.weight"),
                                  .proj_w = at(h + "attn.proj.weight"),
                                  .ln2_w = at(h + "mlp_norm.weight"),
                                  .up_w = at(h + "mlp.gate_up.weight"),
                                  .down_w = at(h + "mlp.down.weight")});
    }
  }
  return out;
}

const ParamInfo& ModelLayout::param(std::string_view name) const {
  for (const ParamInfo& p : params_) {
    if (p.name == name) return p;
  }
  check_failed("param(name)", __FILE__, __LINE__, "no tensor '" + std::string(name) + "'");
}

const LinearLayout& ModelLayout::layer(int unit) const {
  TANDEM_CHECK(spec_.kind == ModelKind::kMlp);
  return layers_.at(static_cast<std::size_t>(unit));
}

int ModelLayout::widest() const {
  TANDEM_CHECK(spec_.kind == ModelKind::kMlp);
  return widest_;
}

// One stream in forward registration order: the same seed gives the same parameters
// everywhere. Constant-filled tensors draw nothing, so an mlp's stream is exactly its
// weights' draws.
void ModelLayout::initialize(std::span<float> flat, std::uint64_t seed) const {
  TANDEM_CHECK_EQ(flat.size(), numel_);
  detail::SplitMix64 rng(detail::mix64(seed ^ 0x6d6f64656c696e69ULL));  // "modelini"
  for (const ParamInfo& p : params_) {
    float* w = flat.data() + p.offset;
    switch (p.init.kind) {
      case ParamInit::Kind::kZero:
        std::fill_n(w, p.numel, 0.0f);
        break;
      case ParamInit::Kind::kOne:
        std::fill_n(w, p.numel, 1.0f);
        break;
      case ParamInit::Kind::kUniform:
        for (std::size_t i = 0; i < p.numel; ++i) {
          w[i] = static_cast<float>(rng.uniform(-p.init.scale, p.init.scale));
        }
        break;
      case ParamInit::Kind::kNormal:
        for (std::size_t i = 0; i < p.numel; ++i) {
          w[i] = static_cast<float>(rng.normal() * p.init.scale);
        }
        break;
    }
  }
}

double ModelLayout::forward_flops(int rows) const {
  if (!spec_.is_transformer()) {
    double flops = 0;
    for (const LinearLayout& layer : layers_) flops += 2.0 * rows * layer.in * layer.out;
    return flops;
  }
  const TransformerShape& s = spec_.transformer;
  const double T = s.seq, D = s.dim, F = s.hidden, V = s.vocab;
  const double mlp = spec_.kind == ModelKind::kGpt ? 2 * (2 * T * D * F) : 3 * (2 * T * D * F);
  // qkv and proj; scores and the weighted sum over the full T x T (what BLAS computes:
  // the causal mask zeroes the upper triangle after the product).
  const double attention = 2 * T * D * 3 * D + 2 * T * D * D + 2 * (2 * T * T * D);
  const double head = 2 * T * D * V;
  return rows * (s.layers * (attention + mlp) + head);
}

int ModelLayout::compute_spans_per_micro_batch() const {
  // Forward and backward: mlp, a span per layer and the loss; a transformer, the
  // embedding, per block norm + attention + norm + mlp, the head's norm and head, the loss.
  // --recompute adds backward spans per block: full its four forward ones again,
  // selective one (attention's core).
  if (!spec_.is_transformer()) return 2 * units() + 2;
  const int replayed = spec_.recompute == Recompute::kFull        ? 4
                       : spec_.recompute == Recompute::kSelective ? 1
                                                                  : 0;
  return 2 * (1 + 4 * spec_.transformer.layers + 2 + 1) + replayed * spec_.transformer.layers;
}

}  // namespace tandem
