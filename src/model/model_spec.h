// What model to train, as the user spells it (--model and the shape flags), before any
// memory is touched: the grammar, the presets, the shape rules and the parameter count.
// docs/MODELS.md is the user's page for all of it.
//
// Spellings:
//   mlp:DxW[,relu|,gelu]  D Linear layers (+bias) of width W; the last W -> classes
//   linear:IxO            one Linear I -> O without bias (y = x.W)
//   course                linear:512x512 with a batch of 1024
//   gpt:layers=L,dim=D,heads=H,seq=S[,vocab=V]
//   llama:layers=L,dim=D,heads=H,seq=S[,hidden=F][,vocab=V]
//   gpt3-xl, gpt3-2.7b, gpt3-6.7b, gpt3-13b, llama2-13b [:key=value,...]
// A preset's keys (and the --layers/--dim/--heads/--seq flags, ShapeOverrides) shrink it
// keeping its proportions: heads follow dim so that the head size stays, the MLP's hidden
// width follows the kind's rule (gpt: 4 x dim; llama: LLaMA's 2/3 x 4 x dim rounded up
// to a multiple of 256).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

enum class Activation : std::uint8_t { kNone, kReLU, kGELU };

enum class ModelKind : std::uint8_t {
  kMlp,    // mlp, linear and course: Linear layers on synthetic features
  kGpt,    // GPT-2/GPT-3: learned positions, pre-LayerNorm, GELU MLP, tied head
  kLlama,  // LLaMA: RMSNorm, rotary positions, SwiGLU MLP, no biases, untied head
};
std::string_view to_string(ModelKind kind);

// A decoder-only transformer's shape.
struct TransformerShape {
  int layers = 0;  // blocks
  int dim = 0;     // model width
  int heads = 0;   // attention heads; dim % heads == 0
  int seq = 0;     // context length = the training sequence length
  int vocab = 0;   // tokens
  int hidden = 0;  // the MLP's inner width (gpt: 4 x dim; llama: the rule or hidden=)

  int head_dim() const { return heads > 0 ? dim / heads : 0; }
};

// LLaMA's MLP width for model width `dim`: 2/3 of 4 x dim, rounded up to a multiple of
// 256 (5120 -> 13824, 4096 -> 11008).
int llama_hidden(int dim);

// What a transformer's backward reads that its forward does not keep (--recompute;
// Note [activation recomputation] in transformer_passes.h): nothing (every block's
// tensors are kept), everything but each block's input (full: the block's forward runs
// again at the start of its backward), or the attention probabilities [B, H, T, T]
// (selective, as Megatron-LM: the softmax(QK^T) of each block runs again in backward).
enum class Recompute : std::uint8_t { kNone, kFull, kSelective };
std::string_view to_string(Recompute recompute);
// "none", "full", "selective"; throws UsageError.
Recompute parse_recompute(std::string_view text);

// --layer-drop: whether block `block` (1-based unit) is skipped in micro-batch `index` of
// `rank`, for probability `p` and the run's seed; the same on every device, independent
// across ranks (each rank skips its own, as DDP's ranks do with LayerDrop).
bool layer_dropped(double p, std::uint64_t seed, int rank, int index, int block);

// Shape changes from the command line (0: keep). Applied by ModelSpec::with_overrides.
struct ShapeOverrides {
  int layers = 0;
  int dim = 0;
  int heads = 0;
  int seq = 0;

  bool any() const { return layers > 0 || dim > 0 || heads > 0 || seq > 0; }
};

struct ModelSpec {
  // Canonical spelling: parse(text) gives this spec back. For mlp kinds, as given.
  std::string text;
  ModelKind kind = ModelKind::kMlp;

  // mlp, linear, course. For linear and course, width == input and activation is kNone.
  int depth = 1;
  int input = 0;    // input features
  int width = 0;    // hidden width
  int classes = 0;  // output features
  bool bias = true;
  Activation activation = Activation::kReLU;
  int default_batch = 0;  // a preset's batch (0: none)

  // gpt, llama.
  TransformerShape transformer;
  std::string base;           // "gpt", "llama" or the preset's name
  bool hidden_given = false;  // hidden= was spelled out (it then survives a new dim)
  bool vocab_given = false;   // vocab= was spelled out
  // How the passes keep activations (not part of `text`: the same model either way).
  Recompute recompute = Recompute::kNone;
  // --layer-drop (transformers; LayerDrop, Fan et al. 2019): the probability that a block
  // is skipped (its output = its input) in a micro-batch on a rank; 0: none. Not part of
  // `text` either.
  double layer_drop = 0;
  // --tensor (transformers; docs/TENSOR.md): Megatron-style tensor parallelism over this
  // many ranks. The layout (layout.h) is one tensor-parallel rank's shard: attention by
  // heads, the MLP's inner width, the vocabulary split this many ways. 1: none. Not part
  // of `text`: the same model, split.
  int tensor = 1;
  // --sequence-parallel (with tensor > 1): the norm and residual regions split along the
  // tokens too (docs/TENSOR.md): each all-reduce becomes an all-gather before a
  // column-parallel product and a reduce-scatter after a row-parallel one.
  bool sequence_parallel = false;
  // --tp-overlap (with sequence_parallel): each block's all-gathers and reduce-scatters
  // decomposed into ring steps of point-to-point transfers, each overlapping the product
  // on the token block already present (Note [tensor-parallel overlap]).
  bool tp_overlap = false;

  // Throws UsageError naming the spec on bad input. Transformer presets parse at full
  // size (parameter_count() is exact); check_size() bounds what may be allocated.
  static ModelSpec parse(std::string_view text, int classes = 16);
  bool is_transformer() const { return kind != ModelKind::kMlp; }
  std::int64_t parameter_count() const;
  // The parameters one tensor-parallel rank holds (parameter_count() when tensor == 1):
  // its shards of the split tensors and the whole of the replicated ones (norms, wpe, the
  // biases added after a row-parallel product).
  std::int64_t rank_parameter_count() const;

  // A transformer reshaped by --layers/--dim/--heads/--seq (docs/MODELS.md); throws
  // UsageError naming the flag (for an mlp spec: that the flag does not apply).
  ModelSpec with_overrides(const ShapeOverrides& overrides) const;
  // The same transformer with another vocabulary (--data: byte-level, 256); throws
  // UsageError naming `flag` when the spec spelled out a different vocab=.
  ModelSpec with_vocab(int vocab, std::string_view flag) const;
  // Throws UsageError naming the spec when its flat arrays would pass 2^31 floats (the
  // limit every strategy's offsets and counts are checked against).
  void check_size() const;
  // One line for reports: "gpt, 4 layers, dim 256, 4 heads of 64, seq 128, vocab 50304,
  // mlp 1024"; for an mlp spec its text.
  std::string describe() const;
};

}  // namespace tandem
