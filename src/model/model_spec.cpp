// ModelSpec::parse: the spec grammar, the presets, the shape rules and their limits.
#include "model/model_spec.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "model/rng.h"

namespace tandem {
namespace {

// Limits that keep a typo ("mlp:4x2560000") from allocating for minutes: every dimension
// fits in a BLAS int with room to spare, and the flat arrays stay under 2^31 floats
// (8 GiB each), so offsets and counts never overflow.
constexpr int kMaxDim = 65536;
constexpr int kMaxDepth = 1024;
constexpr std::int64_t kMaxParameters = std::int64_t{1} << 31;
// Transformers: a context and a vocabulary far above any model of the study, and an MLP
// wide enough for 4 x the widest dim.
constexpr int kMaxSeq = 65536;
constexpr int kMaxVocab = 1 << 21;
constexpr int kMaxHidden = 4 * kMaxDim;

// GPT-2/GPT-3's 50257 BPE tokens padded to a multiple of 64 (as the study's models are);
// LLaMA's sentencepiece vocabulary.
constexpr int kGptVocab = 50304;
constexpr int kLlamaVocab = 32000;

struct Preset {
  std::string_view name;
  ModelKind kind;
  TransformerShape shape;  // layers, dim, heads, seq, vocab, hidden
};

// The shapes the ISPASS 2025 study lists (GPT-3 paper, Table 2.1; LLaMA-2 13B).
constexpr std::array<Preset, 5> kPresets = {{
    {"gpt3-xl", ModelKind::kGpt, {24, 2048, 32, 2048, kGptVocab, 4 * 2048}},
    {"gpt3-2.7b", ModelKind::kGpt, {32, 2560, 32, 2048, kGptVocab, 4 * 2560}},
    {"gpt3-6.7b", ModelKind::kGpt, {32, 4096, 32, 2048, kGptVocab, 4 * 4096}},
    {"gpt3-13b", ModelKind::kGpt, {40, 5120, 40, 2048, kGptVocab, 4 * 5120}},
    {"llama2-13b", ModelKind::kLlama, {40, 5120, 40, 4096, kLlamaVocab, 13824}},
}};

const Preset* find_preset(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

[[noreturn]] void fail(std::string_view text, const std::string& why) {
  throw UsageError("model '" + std::string(text) + "': " + why);
}

// A positive decimal integer in [1, max]; `what` names it in the error.
int parse_dim(std::string_view spec, std::string_view digits, std::string_view what, int max) {
  std::uint64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec == std::errc::invalid_argument || ptr != end) {
    fail(spec, std::string(what) + " '" + std::string(digits) + "' is not a number");
  }
  if (ec == std::errc::result_out_of_range || value > static_cast<std::uint64_t>(max)) {
    fail(spec, std::string(what) + " must be <= " + std::to_string(max));
  }
  if (value < 1) fail(spec, std::string(what) + " must be >= 1");
  return static_cast<int>(value);
}

// "AxB" -> (A, B).
std::pair<int, int> parse_pair(std::string_view spec, std::string_view dims, std::string_view form,
                               std::string_view first, int first_max, std::string_view second) {
  const auto x = dims.find('x');
  if (x == std::string_view::npos) {
    fail(spec, "expected " + std::string(form));
  }
  return {parse_dim(spec, dims.substr(0, x), first, first_max),
          parse_dim(spec, dims.substr(x + 1), second, kMaxDim)};
}

std::string known_models() {
  std::string text = "expected mlp:DxW, linear:IxO, course, gpt:layers=L,dim=D,heads=H,seq=S, "
                     "llama:layers=L,dim=D,heads=H,seq=S, or a preset:";
  for (const Preset& p : kPresets) text += " " + std::string(p.name);
  return text;
}

// ---- transformers ----

// Names a shape value in errors: "--dim 100" for a flag, "dim=100" inside a spec.
struct Namer {
  std::string spec;  // the spec text, for spec keys; empty for flags
  bool flags = false;

  std::string operator()(std::string_view key, int value) const {
    return flags ? "--" + std::string(key) + " " + std::to_string(value)
                 : std::string(key) + "=" + std::to_string(value);
  }
  std::string also(std::string_view key) const {
    return flags ? "--" + std::string(key) : std::string(key) + "=";
  }
  [[noreturn]] void fail(const std::string& what, const std::string& why) const {
    if (flags) throw UsageError(what + ": " + why);
    tandem::fail(spec, what + ": " + why);
  }
};

void check_limit(const Namer& name, std::string_view key, int value, int max) {
  if (value < 1) name.fail(name(key, value), "must be >= 1");
  if (value > max) name.fail(name(key, value), "must be <= " + std::to_string(max));
}

// Applies overrides to a transformer spec keeping its proportions (model_spec.h).
void reshape(ModelSpec& spec, const ShapeOverrides& o, const Namer& name) {
  TransformerShape& s = spec.transformer;
  if (o.layers > 0) check_limit(name, "layers", o.layers, kMaxDepth);
  if (o.dim > 0) check_limit(name, "dim", o.dim, kMaxDim);
  if (o.seq > 0) check_limit(name, "seq", o.seq, kMaxSeq);
  if (o.heads > 0) check_limit(name, "heads", o.heads, kMaxDim);
  const int head_dim = s.head_dim();
  const int dim = o.dim > 0 ? o.dim : s.dim;
  int heads = s.heads;
  if (o.heads > 0) {
    heads = o.heads;
  } else if (o.dim > 0) {
    if (dim % head_dim != 0) {
      name.fail(name("dim", dim), "not a multiple of " + spec.base + "'s head size " +
                                      std::to_string(head_dim) + " (give " + name.also("heads") +
                                      " too)");
    }
    heads = dim / head_dim;
  }
  if (dim % heads != 0) {
    name.fail(name("heads", heads), "dim " + std::to_string(dim) + " is not divisible into " +
                                        std::to_string(heads) + " heads");
  }
  if (spec.kind == ModelKind::kLlama && (dim / heads) % 2 != 0) {
    name.fail(name("heads", heads), "llama's rotary embedding needs an even head size (dim " +
                                        std::to_string(dim) + " / " + std::to_string(heads) +
                                        " heads is odd)");
  }
  if (o.layers > 0) s.layers = o.layers;
  if (o.seq > 0) s.seq = o.seq;
  s.dim = dim;
  s.heads = heads;
  if (spec.kind == ModelKind::kGpt) {
    s.hidden = 4 * dim;
  } else if (!spec.hidden_given) {
    s.hidden = llama_hidden(dim);
  }
}

std::string canonical_text(const ModelSpec& spec) {
  const TransformerShape& s = spec.transformer;
  std::string keys;
  auto add = [&](std::string_view key, int value) {
    keys += (keys.empty() ? "" : ",") + std::string(key) + "=" + std::to_string(value);
  };
  if (const Preset* p = find_preset(spec.base)) {
    const TransformerShape& base = p->shape;
    if (s.layers != base.layers) add("layers", s.layers);
    if (s.dim != base.dim) add("dim", s.dim);
    if (s.heads != s.dim / base.head_dim()) add("heads", s.heads);
    if (s.seq != base.seq) add("seq", s.seq);
    if (spec.hidden_given) add("hidden", s.hidden);
    if (s.vocab != base.vocab) add("vocab", s.vocab);
  } else {
    add("layers", s.layers);
    add("dim", s.dim);
    add("heads", s.heads);
    add("seq", s.seq);
    if (spec.hidden_given) add("hidden", s.hidden);
    if (s.vocab != (spec.kind == ModelKind::kGpt ? kGptVocab : kLlamaVocab)) add("vocab", s.vocab);
  }
  return keys.empty() ? spec.base : spec.base + ":" + keys;
}

// "gpt:...", "llama:..." or a preset with optional keys.
ModelSpec parse_transformer(std::string_view text, std::string_view name, std::string_view keys,
                            const Preset* preset) {
  ModelSpec spec;
  spec.base = std::string(name);
  spec.default_batch = 0;
  spec.bias = false;
  spec.activation = Activation::kNone;
  const bool generic = preset == nullptr;
  spec.kind = generic ? (name == "gpt" ? ModelKind::kGpt : ModelKind::kLlama) : preset->kind;
  const bool llama = spec.kind == ModelKind::kLlama;

  std::optional<int> layers, dim, heads, seq, vocab, hidden;
  const std::string allowed =
      std::string("layers, dim, heads, seq") + (llama ? ", hidden" : "") + ", vocab";
  while (!keys.empty()) {
    const auto comma = keys.find(',');
    const std::string_view item = keys.substr(0, comma);
    keys = comma == std::string_view::npos ? std::string_view{} : keys.substr(comma + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      fail(text, "expected key=value, got '" + std::string(item) + "' (keys: " + allowed + ")");
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    std::optional<int>* slot = nullptr;
    int max = kMaxDim;
    if (key == "layers") {
      slot = &layers;
      max = kMaxDepth;
    } else if (key == "dim") {
      slot = &dim;
    } else if (key == "heads") {
      slot = &heads;
    } else if (key == "seq") {
      slot = &seq;
      max = kMaxSeq;
    } else if (key == "vocab") {
      slot = &vocab;
      max = kMaxVocab;
    } else if (key == "hidden" && llama) {
      slot = &hidden;
      max = kMaxHidden;
    } else {
      fail(text, "unknown key '" + std::string(key) + "' (keys: " + allowed + ")");
    }
    if (slot->has_value()) fail(text, "key '" + std::string(key) + "' given twice");
    *slot = parse_dim(text, value, key, max);
  }

  const Namer namer{.spec = std::string(text), .flags = false};
  if (generic) {
    for (const auto& [key, value] : {std::pair{"layers", &layers}, std::pair{"dim", &dim},
                                     std::pair{"heads", &heads}, std::pair{"seq", &seq}}) {
      if (!value->has_value()) {
        fail(text, std::string("missing ") + key + "= (expected " + std::string(name) +
                       ":layers=L,dim=D,heads=H,seq=S)");
      }
    }
    // Start from a one-head shape of the right width; reshape() checks and sets the rest.
    spec.transformer = {.layers = *layers,
                        .dim = *dim,
                        .heads = 1,
                        .seq = *seq,
                        .vocab = llama ? kLlamaVocab : kGptVocab,
                        .hidden = 0};
    spec.hidden_given = hidden.has_value();
    if (hidden) spec.transformer.hidden = *hidden;
    reshape(spec, {.heads = *heads}, namer);
  } else {
    spec.transformer = preset->shape;
    spec.hidden_given = hidden.has_value();
    if (hidden) spec.transformer.hidden = *hidden;
    reshape(spec,
            {.layers = layers.value_or(0),
             .dim = dim.value_or(0),
             .heads = heads.value_or(0),
             .seq = seq.value_or(0)},
            namer);
  }
  if (vocab) {
    spec.transformer.vocab = *vocab;
    spec.vocab_given = true;
  }
  spec.text = canonical_text(spec);
  return spec;
}

}  // namespace

std::string_view to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kFull:
      return "full";
    case Recompute::kSelective:
      return "selective";
  }
  return "?";
}

Recompute parse_recompute(std::string_view text) {
  for (Recompute r : {Recompute::kNone, Recompute::kFull, Recompute::kSelective}) {
    if (text == to_string(r)) return r;
  }
  throw UsageError("unknown recomputation '" + std::string(text) +
                   "' (expected none, full or selective)");
}

bool layer_dropped(double p, std::uint64_t seed, int rank, int index, int block) {
  if (p <= 0) return false;
  using detail::mix64;
  std::uint64_t h = mix64(seed ^ 0x4c41594552445250ull);  // "LAYERDRP"
  for (const int v : {rank, index, block}) h = mix64(h ^ static_cast<std::uint32_t>(v));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < p;
}

std::string_view to_string(ModelKind kind) {
  switch (kind) {
    case ModelKind::kMlp:
      return "mlp";
    case ModelKind::kGpt:
      return "gpt";
    case ModelKind::kLlama:
      return "llama";
  }
  return "?";
}

int llama_hidden(int dim) {
  const std::int64_t raw = 2 * (4 * static_cast<std::int64_t>(dim)) / 3;
  return static_cast<int>((raw + 255) / 256 * 256);
}

ModelSpec ModelSpec::parse(std::string_view text, int classes) {
  {
    const auto colon = text.find(':');
    const std::string_view name = text.substr(0, colon);
    const std::string_view keys =
        colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
    if (name == "gpt" || name == "llama") {
      if (colon == std::string_view::npos) {
        fail(text, "expected " + std::string(name) + ":layers=L,dim=D,heads=H,seq=S");
      }
      return parse_transformer(text, name, keys, nullptr);
    }
    if (const Preset* preset = find_preset(name)) {
      return parse_transformer(text, name, keys, preset);
    }
  }

  ModelSpec spec;
  spec.text = std::string(text);

  std::string_view body = text;
  std::string_view option;
  if (const auto comma = body.find(','); comma != std::string_view::npos) {
    option = body.substr(comma + 1);
    body = body.substr(0, comma);
  }

  if (body == "course") {
    if (!option.empty()) fail(text, "course takes no options");
    spec.depth = 1;
    spec.input = spec.width = spec.classes = 512;
    spec.bias = false;
    spec.activation = Activation::kNone;
    spec.default_batch = 1024;
  } else if (body.starts_with("mlp:")) {
    if (classes < 1 || classes > kMaxDim) {
      fail(text, "classes must be between 1 and " + std::to_string(kMaxDim) + " (got " +
                     std::to_string(classes) + ")");
    }
    const auto [depth, width] =
        parse_pair(text, body.substr(4), "mlp:DxW (e.g. mlp:4x256)", "depth", kMaxDepth, "width");
    spec.depth = depth;
    spec.input = spec.width = width;
    spec.classes = classes;
    spec.bias = true;
    if (option.empty() || option == "relu") {
      spec.activation = Activation::kReLU;
    } else if (option == "gelu") {
      spec.activation = Activation::kGELU;
    } else {
      fail(text, "unknown activation '" + std::string(option) + "' (expected relu or gelu)");
    }
  } else if (body.starts_with("linear:")) {
    if (!option.empty()) fail(text, "linear takes no options");
    const auto [in, out] = parse_pair(text, body.substr(7), "linear:IxO (e.g. linear:512x512)",
                                      "input", kMaxDim, "output");
    spec.depth = 1;
    spec.input = spec.width = in;
    spec.classes = out;
    spec.bias = false;
    spec.activation = Activation::kNone;
  } else {
    throw UsageError("unknown model '" + std::string(text) + "' (" + known_models() + ")");
  }

  spec.check_size();
  return spec;
}

ModelSpec ModelSpec::with_overrides(const ShapeOverrides& overrides) const {
  if (!overrides.any()) return *this;
  if (!is_transformer()) {
    const char* flag = overrides.layers > 0  ? "--layers"
                       : overrides.dim > 0   ? "--dim"
                       : overrides.heads > 0 ? "--heads"
                                             : "--seq";
    throw UsageError(std::string(flag) + ": reshapes transformer models (gpt, llama and the "
                                         "presets), not '" +
                     text + "'");
  }
  ModelSpec spec = *this;
  reshape(spec, overrides, Namer{.flags = true});
  spec.text = canonical_text(spec);
  return spec;
}

ModelSpec ModelSpec::with_vocab(int vocab, std::string_view flag) const {
  if (!is_transformer()) {
    throw UsageError(std::string(flag) + ": trains transformer models (gpt, llama and the "
                                         "presets) on tokens; '" +
                     text + "' learns its synthetic task");
  }
  if (vocab_given && transformer.vocab != vocab) {
    throw UsageError(std::string(flag) + ": needs vocab=" + std::to_string(vocab) + " but '" +
                     text + "' says vocab=" + std::to_string(transformer.vocab));
  }
  ModelSpec spec = *this;
  spec.transformer.vocab = vocab;
  spec.text = canonical_text(spec);
  return spec;
}

void ModelSpec::check_size() const {
  if (const std::int64_t n = parameter_count(); n > kMaxParameters) {
    fail(text, std::to_string(n) + " parameters exceed the limit of 2^31" +
                   (is_transformer() ? " (shrink it with --layers, --dim or --seq)" : ""));
  }
}

std::int64_t ModelSpec::parameter_count() const {
  if (is_transformer()) {
    const TransformerShape& s = transformer;
    const std::int64_t D = s.dim, F = s.hidden, V = s.vocab, T = s.seq, L = s.layers;
    if (kind == ModelKind::kGpt) {
      // wte + wpe; per block: ln1 (2D), qkv (3D^2 + 3D), proj (D^2 + D), ln2 (2D),
      // fc (D F + F), proj (F D + D); lnf (2D). The head is wte (tied).
      return V * D + T * D + L * (4 * D * D + 2 * D * F + F + 9 * D) + 2 * D;
    }
    // wte; per block: attn_norm (D), qkv (3D^2), proj (D^2), mlp_norm (D), gate and up
    // (2 D F), down (F D); norm (D); head (D V).
    return V * D + L * (4 * D * D + 3 * D * F + 2 * D) + D + D * V;
  }
  std::int64_t total = 0;
  for (int layer = 0; layer < depth; ++layer) {
    const std::int64_t in = layer == 0 ? input : width;
    const std::int64_t out = layer == depth - 1 ? classes : width;
    total += in * out + (bias ? out : 0);
  }
  return total;
}

std::int64_t ModelSpec::rank_parameter_count() const {
  if (!is_transformer() || tensor == 1) return parameter_count();
  const TransformerShape& s = transformer;
  const std::int64_t D = s.dim, F = s.hidden, V = s.vocab, T = s.seq, L = s.layers, t = tensor;
  if (kind == ModelKind::kGpt) {
    // Per block: ln1 and ln2 (4D), qkv (3D^2/t + 3D/t), proj (D^2/t + D), fc (D F/t + F/t),
    // proj (F D/t + D).
    return V / t * D + T * D + L * (4 * D * D / t + 2 * D * F / t + F / t + 3 * D / t + 6 * D) +
           2 * D;
  }
  return V / t * D + L * (4 * D * D / t + 3 * D * F / t + 2 * D) + D + D * V / t;
}

std::string ModelSpec::describe() const {
  if (!is_transformer()) return text;
  const TransformerShape& s = transformer;
  return std::string(to_string(kind)) + ", " + std::to_string(s.layers) + " layers, dim " +
         std::to_string(s.dim) + ", " + std::to_string(s.heads) + " heads of " +
         std::to_string(s.head_dim()) + ", seq " + std::to_string(s.seq) + ", vocab " +
         std::to_string(s.vocab) + ", mlp " + std::to_string(s.hidden);
}

}  // namespace tandem
