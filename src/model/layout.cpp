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
  explicit LayoutBuilder(int tensor = 1) : tensor_(tensor) {}
  // A tensor of the current unit, `shape` as in the unsplit model; with tensor
  // parallelism the shard `split` says is registered.
  void param(std::string name, std::vector<int> shape, ParamInit init, TensorSplit split = {}) {
    TANDEM_CHECK(!units_.empty());
    if (split.kind == TensorSplit::Kind::kRows) {
      TANDEM_CHECK(shape.front() % tensor_ == 0);
      shape.front() /= tensor_;
    } else if (split.kind == TensorSplit::Kind::kColumns) {
      TANDEM_CHECK(shape.back() % (tensor_ * split.groups) == 0);
      shape.back() /= tensor_;
    }
    std::size_t numel = 1;
    for (int d : shape) numel *= static_cast<std::size_t>(d);
    owned_.back().push_back(params_.size());
    params_.push_back({.name = std::move(name),
                       .unit = static_cast<int>(units_.size()) - 1,
                       .numel = numel,
                       .offset = 0,
                       .shape = std::move(shape),
                       .init = init,
                       .split = split});
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
  int tensor_ = 1;
};

constexpr ParamInit zeros() { return {ParamInit::Kind::kZero, 0}; }
constexpr ParamInit ones() { return {ParamInit::Kind::kOne, 0}; }
constexpr ParamInit normal(double std) { return {ParamInit::Kind::kNormal, std}; }

// GPT-2's initialization: weights N(0, 0.02), the two projections that write into the
// residual stream N(0, 0.02 / sqrt(2 L)) so that the stream's variance does not grow
// with depth, biases zero, norm gains one. LLaMA's models use the same scheme.
constexpr double kInitStd = 0.02;

// Note [tensor-parallel layout]: Megatron-LM's split (Shoeybi et al. 2019). qkv and the
// MLP's up projection are column-parallel (each rank its heads, its share of the inner
// width: no communication between them), the attention and MLP output projections
// row-parallel (each rank's product is a partial sum of the whole, all-reduced), so a
// block's forward needs two all-reduces and its backward two more (of the input
// gradients of the column-parallel products). The embedding is vocabulary-parallel (rows)
// and so is the head (gpt: tied to it; llama: lm_head's columns), with a parallel
// cross-entropy. Norms, wpe and the biases of the row-parallel products are replicated:
// every rank computes them from the same all-reduced values, so their gradients agree
// without communication.
constexpr TensorSplit kRowsSplit{TensorSplit::Kind::kRows, 1};
constexpr TensorSplit columns(int groups) { return {TensorSplit::Kind::kColumns, groups}; }

void build_gpt(LayoutBuilder& b, const TransformerShape& s) {
  const int D = s.dim, F = s.hidden;
  const double residual_std = kInitStd / std::sqrt(2.0 * s.layers);
  b.unit("embedding");
  b.param("wte", {s.vocab, D}, normal(kInitStd), kRowsSplit);
  b.param("wpe", {s.seq, D}, normal(kInitStd));
  for (int l = 0; l < s.layers; ++l) {
    const std::string h = "h" + std::to_string(l) + ".";
    b.unit("h" + std::to_string(l));
    b.param(h + "ln1.weight", {D}, ones());
    b.param(h + "ln1.bias", {D}, zeros());
    b.param(h + "attn.qkv.weight", {D, 3 * D}, normal(kInitStd), columns(3));
    b.param(h + "attn.qkv.bias", {3 * D}, zeros(), columns(3));
    b.param(h + "attn.proj.weight", {D, D}, normal(residual_std), kRowsSplit);
    b.param(h + "attn.proj.bias", {D}, zeros());
    b.param(h + "ln2.weight", {D}, ones());
    b.param(h + "ln2.bias", {D}, zeros());
    b.param(h + "mlp.fc.weight", {D, F}, normal(kInitStd), columns(1));
    b.param(h + "mlp.fc.bias", {F}, zeros(), columns(1));
    b.param(h + "mlp.proj.weight", {F, D}, normal(residual_std), kRowsSplit);
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
  b.param("wte", {s.vocab, D}, normal(kInitStd), kRowsSplit);
  for (int l = 0; l < s.layers; ++l) {
    const std::string h = "h" + std::to_string(l) + ".";
    b.unit("h" + std::to_string(l));
    b.param(h + "attn_norm.weight", {D}, ones());
    // q, k and v fused into one [D, 3D] product, and gate and up into one [D, 2F], as
    // Megatron-LM does: the same math as LLaMA's separate wq/wk/wv and w1/w3, in fewer
    // and larger matrix products.
    b.param(h + "attn.qkv.weight", {D, 3 * D}, normal(kInitStd), columns(3));
    b.param(h + "attn.proj.weight", {D, D}, normal(residual_std), kRowsSplit);
    b.param(h + "mlp_norm.weight", {D}, ones());
    b.param(h + "mlp.gate_up.weight", {D, 2 * F}, normal(kInitStd), columns(2));
    b.param(h + "mlp.down.weight", {F, D}, normal(residual_std), kRowsSplit);
  }
  b.unit("head");
  b.param("norm.weight", {D}, ones());
  b.param("lm_head.weight", {D, s.vocab}, normal(kInitStd), columns(1));
}

// Calls piece(at_whole, at_shard, n) for each contiguous run of tensor `p`'s shard of
// `rank` (of `ranks`): n elements at offset at_shard of the shard are those at at_whole of
// the unsplit tensor.
template <typename Piece>
void for_each_piece(const ParamInfo& p, int ranks, int rank, const Piece& piece) {
  const auto r = static_cast<std::size_t>(rank), t = static_cast<std::size_t>(ranks);
  switch (p.split.kind) {
    case TensorSplit::Kind::kReplicated:
      piece(0, 0, p.numel);
      return;
    case TensorSplit::Kind::kRows:  // rows [r R/t, (r + 1) R/t): one block
      piece(r * p.numel, 0, p.numel);
      return;
    case TensorSplit::Kind::kColumns: {  // per row, each group's r-th piece
      const auto cols = static_cast<std::size_t>(p.shape.back());  // the shard's
      const auto groups = static_cast<std::size_t>(p.split.groups);
      const std::size_t width = cols / groups, rows = p.numel / cols;
      for (std::size_t row = 0; row < rows; ++row) {
        for (std::size_t g = 0; g < groups; ++g) {
          piece(row * cols * t + g * width * t + r * width, row * cols + g * width, width);
        }
      }
      return;
    }
  }
}

}  // namespace

ModelLayout::ModelLayout(const ModelSpec& spec, LayoutOptions options)
    : spec_(spec), options_(options) {
  TANDEM_CHECK(options.unit_multiple >= 1 && options.unit_align >= 1);
  const bool packed = options.unit_multiple == 1 && options.unit_align == 1;
  TANDEM_CHECK(spec.tensor >= 1 && options.tensor_rank >= 0 && options.tensor_rank < spec.tensor);
  TANDEM_CHECK(spec.tensor == 1 || spec.is_transformer());
  LayoutBuilder builder(spec.tensor);
  if (spec.is_transformer()) {
    const TransformerShape& s = spec.transformer;
    TANDEM_CHECK(s.layers >= 1 && s.dim >= 1 && s.heads >= 1 && s.seq >= 1 && s.vocab >= 1 &&
                 s.hidden >= 1 && s.dim % s.heads == 0 && s.heads % spec.tensor == 0);
    if (spec.kind == ModelKind::kGpt) {
      build_gpt(builder, s);
    } else {
      build_llama(builder, s);
    }
    numel_ = builder.finish(options_, units_, params_);
    if (packed) TANDEM_CHECK_EQ(static_cast<std::int64_t>(numel_), spec.rank_parameter_count());
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
  if (spec_.tensor > 1) {
    // This rank's shards of the unsplit model's initial parameters (Note [tensor-parallel
    // layout]): the same model however it is split.
    ModelSpec unsplit = spec_;
    unsplit.tensor = 1;
    const ModelLayout full(unsplit);
    std::vector<float> init(full.numel());
    full.initialize(init, seed);
    for (const ParamInfo& p : params_) {
      const float* whole = init.data() + full.param(p.name).offset;
      float* mine = flat.data() + p.offset;
      for_each_piece(p, spec_.tensor, options_.tensor_rank,
                     [&](std::size_t at_whole, std::size_t at_shard, std::size_t n) {
                       std::copy_n(whole + at_whole, n, mine + at_shard);
                     });
    }
    return;
  }
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

std::vector<float> ModelLayout::unshard(const std::vector<std::vector<float>>& shards) const {
  TANDEM_CHECK_EQ(shards.size(), static_cast<std::size_t>(spec_.tensor));
  ModelSpec unsplit = spec_;
  unsplit.tensor = 1;
  const ModelLayout full(unsplit);
  const ModelLayout shard(spec_);  // packed: the offsets of each rank's packed() array
  std::vector<float> out(full.numel());
  for (int r = 0; r < spec_.tensor; ++r) {
    const std::vector<float>& mine = shards[static_cast<std::size_t>(r)];
    TANDEM_CHECK_EQ(mine.size(), shard.numel());
    for (const ParamInfo& p : shard.params()) {
      // A replicated tensor is the same on every rank: rank 0's.
      if (r > 0 && p.split.kind == TensorSplit::Kind::kReplicated) continue;
      float* whole = out.data() + full.param(p.name).offset;
      for_each_piece(p, spec_.tensor, r,
                     [&](std::size_t at_whole, std::size_t at_shard, std::size_t n) {
                       std::copy_n(mine.data() + p.offset + at_shard, n, whole + at_whole);
                     });
    }
  }
  return out;
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
  // --tensor adds forward spans: the positions after the embedding's sum, a residual add
  // after each row-parallel product's (two a block), and two more of the parallel loss.
  // --sequence-parallel splits each block's two backward parts in two (the norm's output
  // is gathered again between them). --tp-overlap's rings (ten a block, two the
  // embedding's, three the head's) are T blocks of work each on the compute lane, and a
  // send and a receive per step but the last on the comm lane: the fuller lane counts.
  const int L = spec_.transformer.layers, T = spec_.tensor;
  const int rings = spec_.tp_overlap ? 10 * L + 5 : 0;
  const int split = T > 1 ? 1 + 2 * L + 2 + (spec_.sequence_parallel ? 2 * L : 0) +
                                (spec_.recompute == Recompute::kFull ? L : 0) +
                                rings * std::max(T, 2 * (T - 1))
                          : 0;
  return 2 * (1 + 4 * spec_.transformer.layers + 2 + 1) + replayed * spec_.transformer.layers +
         split;
}

}  // namespace tandem
