// A model's units and flat parameter layout, shared by the CPU models (mlp.h,
// transformer.h) and the CUDA model (model/cuda/cuda_models.h), so that gradient bucket
// plans, parameter hashes and initial parameters are the same on every device.
//
// Units: what the engine's rank loop drives one at a time (forward in order, backward in
// reverse); a unit's parameters are one contiguous range of the flat arrays, so every
// strategy can cut its buckets, shards and stages at unit boundaries.
//   mlp (and linear, course): every Linear layer is a unit.
//   gpt, llama: unit 0 is the embedding, units 1..L the blocks, unit L+1 the final norm
//   and the output head (docs/MODELS.md lists every tensor).
//
// Storage: all parameters live in one flat array and all gradients in another, laid out
// in *reverse* unit order (last unit first). That is the order in which backward
// produces gradients, so every gradient-reduction strategy (a bucket, a unit, a chunk)
// is a contiguous range of the flat gradient and is reduced in place. Within a unit the
// tensors follow in registration (forward) order; for an mlp that is weight, then bias:
//   [fc{D-1}.weight, fc{D-1}.bias, ..., fc0.weight, fc0.bias]
//
// Tied parameters appear once, in the unit whose backward finishes their gradient last:
// gpt's output head is the token embedding (wte, unit 0), so the head's backward (unit
// L+1) accumulates into unit 0's range before unit 0's own backward completes it, and
// a strategy that waits for unit 0 sees the whole gradient. Unit L+1's forward reads
// unit 0's parameters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/page_array.h"
#include "model/model_spec.h"

namespace tandem {

// How initialize() fills a parameter.
struct ParamInit {
  enum class Kind : std::uint8_t { kZero, kOne, kUniform, kNormal };
  Kind kind = Kind::kZero;
  double scale = 0;  // kUniform: the bound b of U(-b, b); kNormal: the standard deviation
};

// How a tensor is split over the ranks of tensor parallelism (ModelSpec::tensor; Note
// [tensor-parallel layout] in layout.cpp): whole on every rank, or cut along its last
// dimension (a column-parallel weight and its bias; `groups` blocks side by side, each cut
// alike: qkv's q|k|v is 3, llama's gate|up 2), or along its first (a row-parallel
// weight, the vocabulary-parallel embedding).
struct TensorSplit {
  enum class Kind : std::uint8_t { kReplicated, kColumns, kRows };
  Kind kind = Kind::kReplicated;
  int groups = 1;
};

// One parameter tensor of the flat layout.
struct ParamInfo {
  std::string name;  // "fc3.weight", "h2.attn.qkv.weight"
  int unit = 0;      // the unit that owns it (forward order)
  std::size_t numel = 0;
  std::size_t offset = 0;  // into the flat parameter / gradient arrays
  std::vector<int> shape;  // row-major; a Linear weight is [in, out]; a rank's shard's
  ParamInit init{};
  TensorSplit split{};
};

// One unit of the rank loop.
struct UnitInfo {
  std::string name;       // "fc0"; "embedding", "h0".."h{L-1}", "head"
  std::size_t begin = 0;  // [begin, end): this unit's tensors in the flat arrays
  std::size_t end = 0;
  std::size_t padded_end = 0;  // [end, padded_end): zeros no tensor uses (LayoutOptions)
};

// How the flat arrays hold the units. The default packs them, as described above. A
// sharded strategy (ddp/sharded.h) pads each unit to a multiple of the rank count, so that
// every rank's shard of it has one size, and starts each unit on a page of its own, so
// that the memory of one unit can be given back without touching its neighbours
// (core/page_array.h). Tensors keep their order; only the gaps between units differ.
struct LayoutOptions {
  std::size_t unit_multiple = 1;  // every unit's padded range is a multiple of this
  std::size_t unit_align = 1;     // every unit begins at a multiple of this (elements)
  // Which tensor-parallel rank's shards initialize() fills (ModelSpec::tensor > 1).
  int tensor_rank = 0;
};

// One Linear layer of an mlp: out = inp . weight (+ bias), weight [in, out] row-major.
struct LinearLayout {
  int in = 0;
  int out = 0;
  bool has_bias = false;
  std::size_t weight = 0;  // offsets into the flat arrays
  std::size_t bias = 0;    // valid when has_bias
  std::size_t begin = 0;   // [begin, end): this layer's range of the flat arrays
  std::size_t end = 0;
};

class ModelLayout {
 public:
  explicit ModelLayout(const ModelSpec& spec, LayoutOptions options = {});

  const ModelSpec& spec() const { return spec_; }
  int units() const { return static_cast<int>(units_.size()); }
  const UnitInfo& unit(int u) const { return units_.at(static_cast<std::size_t>(u)); }
  // The units whose parameters unit u's forward and backward read: u itself, and for
  // gpt's head the embedding too (the tied wte).
  std::vector<int> units_read(int u) const;
  std::size_t unit_begin(int u) const { return unit(u).begin; }
  // The end of the memory unit u owns in the flat arrays: the next unit's begin (units lie
  // in reverse order), or the arrays' end. Its padding and, on a sharded layout, the gap
  // up to the next aligned unit are in it.
  std::size_t owned_end(int u) const { return u > 0 ? unit_begin(u - 1) : numel_; }
  std::size_t unit_end(int u) const { return unit(u).end; }
  // Forward registration order; offsets follow the reverse layout described above.
  const std::vector<ParamInfo>& params() const { return params_; }
  // The tensor called `name`; a missing name is a broken invariant (checked).
  const ParamInfo& param(std::string_view name) const;
  // Elements of the flat arrays: the parameter count where packed, more with padding.
  std::size_t numel() const { return numel_; }
  const LayoutOptions& options() const { return options_; }
  // The tensors of `flat` (this layout) in the packed layout's order and offsets,
  // compacted in place.
  std::vector<float> packed(std::vector<float> flat) const;

  // mlp only (checked): Linear layer `unit`, and the widest layer input or output.
  const LinearLayout& layer(int unit) const;
  int widest() const;

  // Deterministic initialization from seed, one random stream in forward registration
  // order: the same seed gives the same parameters on every rank and every device.
  // mlp: Kaiming-uniform weights, zero biases. gpt, llama: docs/MODELS.md.
  // With tensor parallelism, options().tensor_rank's shards of the unsplit model's
  // parameters for that seed.
  void initialize(std::span<float> flat, std::uint64_t seed) const;
  // Tensor parallelism: the unsplit model's packed parameters from every tensor-parallel
  // rank's packed ones (`shards[r]`: rank r's packed() array), the inverse of
  // initialize()'s slicing.
  std::vector<float> unshard(const std::vector<std::vector<float>>& shards) const;
  // FLOPs of one forward (matrix products only; backward is twice that) for `rows`
  // samples: mlp rows, or sequences of spec().transformer.seq tokens.
  double forward_flops(int rows) const;
  // Spans one micro-batch records (forward, loss, backward) on its fullest lane, for sizing
  // buffers.
  int compute_spans_per_micro_batch() const;

 private:
  ModelSpec spec_;
  LayoutOptions options_;
  std::vector<UnitInfo> units_;
  std::vector<ParamInfo> params_;
  std::vector<LinearLayout> layers_;  // mlp only
  std::size_t numel_ = 0;
  int widest_ = 0;
};

// Where a transformer's tensors lie in the flat arrays (docs/MODELS.md lists them), for
// every device's transformer. A tensor the architecture lacks (gpt's head is wte; llama
// has no biases and no wpe) stays 0 and is never read.
struct TransformerOffsets {
  struct BlockParams {
    std::size_t ln1_w = 0, ln1_b = 0, qkv_w = 0, qkv_b = 0, proj_w = 0, proj_b = 0;
    std::size_t ln2_w = 0, ln2_b = 0, up_w = 0, up_b = 0, down_w = 0, down_b = 0;
  };
  std::size_t wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0, head_w = 0;
  std::vector<BlockParams> block_params;  // per block
};
// gpt and llama only (checked).
TransformerOffsets transformer_offsets(const ModelLayout& layout);

// A zero flat array (parameters or gradients) for `layout`: each unit's memory (up to
// owned_end) is advised to use huge pages on its own (core/page_array.h), so that a unit
// given back and touched again costs a fault per 2 MiB, not per 4 KiB. On a sharded
// layout a unit's last huge page runs into the gap before the next unit, which nothing
// else touches: up to one huge page per unit is committed beyond its end (measured:
// without it, re-faulting the 4 KiB pages of each unit's tail was most of zero2's and
// fsdp's extra compute time on a small gpt).
template <typename T>
PageArray<T> flat_array(const ModelLayout& layout) {
  PageArray<T> flat(layout.numel());
  for (int u = 0; u < layout.units(); ++u)
    flat.advise_huge_pages(layout.unit_begin(u), layout.owned_end(u));
  return flat;
}

}  // namespace tandem
