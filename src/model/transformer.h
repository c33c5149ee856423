// Decoder-only transformers (gpt, llama; model_spec.h) with explicit forward and backward
// passes, written once over a device backend (docs/ARCHITECTURE.md, "The model layer"):
// TransformerOn<CpuBackend<T>> on the CPU (cpu_backend.h), TransformerOn<cuda::CudaBackend>
// on a GPU (cuda/cuda_backend.h). The passes are transformer_passes.h; a backend supplies
// only kernels, memory and timing. Driven unit by unit:
//   set_input, forward_unit(0..L+1), forward_loss, backward_loss, backward_unit(L+1..0).
// Unit 0 is the embedding, units 1..L the blocks, unit L+1 the final norm and the head
// (layout.h); docs/MODELS.md draws the whole model. Every device has the same flat
// layout, so the same initial parameters for a seed.
//
// Transformer (float, training) and BasicTransformer<double> (the tests' gradient
// checks, where central finite differences are exact enough) are the CPU's.
//
// Spans (Lane::kCompute, the caller's step, tag = the unit; the loss tag = units()), one
// per sub-operation, named by ModelOp (model_ops.h) with the FLOPs of its matrix
// products (attention counts the full T x T products BLAS computes):
//   unit 0:   embedding
//   a block:  norm, attention (qkv, rope, scores, softmax, weighted sum, projection and
//             the residual add), norm, mlp (up, activation, down, residual add)
//   unit L+1: norm, head (logits)
//   loss:     loss (softmax cross-entropy over the vocabulary)
// Backward records the same, in reverse, with twice the FLOPs.
//
// Gradient rule: parameter gradients accumulate (+=), activation gradients are
// overwritten.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/cpu_backend.h"
#include "model/layout.h"
#include "model/model_on.h"
#include "model/tensor_group.h"

namespace tandem {

// Tokens of a batch of max_batch sequences (max_batch x seq); throws UsageError when
// max_batch < 1 or the largest matrix product (tokens x max(vocab, 3 dim, 2 hidden))
// would not fit the int dimensions BLAS and cuBLAS take.
std::int64_t transformer_batch_tokens(const ModelSpec& spec, int max_batch);

// One tensor-parallel rank's share of a transformer (ModelSpec::tensor; Note
// [tensor-parallel layout] in layout.cpp): its heads, their width (heads x head size),
// its MLP inner width and its vocabulary columns [vocab_begin, vocab_begin + vocab). The
// model width D is everyone's. Without tensor parallelism, the whole model.
struct TensorShard {
  int ranks = 1;
  int rank = 0;
  int heads = 0;
  int width = 0;  // attention's: heads x head_dim
  int hidden = 0;
  int vocab = 0;
  int vocab_begin = 0;
  // Sequence parallelism: the norm and residual regions hold tokens [rank n, (rank + 1) n)
  // of a micro-batch's N, n = N / ranks.
  bool sequence = false;
  bool overlap = false;  // --tp-overlap
  static TensorShard of(const ModelSpec& spec, int rank = 0);
  // Tokens of N that this rank's norm and residual tensors hold.
  std::size_t local(std::size_t tokens) const {
    return sequence ? tokens / static_cast<std::size_t>(ranks) : tokens;
  }
};

// The FLOPs of a forward pass's matrix products over `rows` sequences, per span: a
// block's attention (qkv, the full T x T scores and weighted sum, projection) and mlp,
// and the head. Backward spans carry twice these.
struct TransformerFlops {
  double attention = 0;
  double mlp = 0;
  double head = 0;
};
TransformerFlops transformer_flops(const ModelSpec& spec, int rows);

template <typename Backend>
class TransformerOn : public ModelOn<Backend> {
 public:
  using Base = ModelOn<Backend>;
  using typename Base::Config, typename Base::LossValue, typename Base::T, typename Base::Timer;
  using Tokens = typename Backend::Tokens;

  // Deterministic initialization from seed (layout.h); every buffer the passes need is
  // allocated here for up to max_batch sequences, so steps allocate nothing. The flat
  // arrays are laid out as `layout` asks (layout.h). Throws UsageError for bad batches
  // (transformer_batch_tokens), and what the backend throws when its memory runs out.
  TransformerOn(const ModelSpec& spec, int max_batch, std::uint64_t seed, LayoutOptions layout = {},
                Config config = {});
  // Bytes of the buffers that constructor allocates besides the parameters and gradients
  // (a floor on a device: its library's workspaces are not counted).
  static std::int64_t buffer_bytes(const ModelSpec& spec, int max_batch, Config config = {});
  ~TransformerOn();
  TransformerOn(TransformerOn&&) noexcept;
  TransformerOn& operator=(TransformerOn&&) noexcept;

  // ---- unit by unit ----
  // Copies the batch in: 1 <= rows <= max_batch, tokens in [0, vocab) (the CPU checks).
  void set_input(const Tokens& batch);
  void forward_unit(int unit, Timer timer, int step);
  // Softmax cross-entropy over the batch's rows x seq predictions: the mean loss (the
  // CPU returns it; a device adds it to its step's sum).
  LossValue forward_loss(Timer timer, int step);
  void backward_loss(Timer timer, int step);
  // Units last..0, in that order; parameter gradients accumulate (+=).
  void backward_unit(int unit, Timer timer, int step);
  // --layer-drop: the blocks the passes after the next set_input skip (flagged by unit;
  // empty: none). A skipped block's forward copies its input to its output and its
  // backward passes the gradient through: its parameters get none. set_input clears it.
  void set_skipped(std::vector<bool> units);
  // False for a block the current micro-batch skips.
  bool unit_ran(int unit) const;

  // ---- pipeline stages: RankModel's members of the same names (rank_model.h), over
  // this model's units and its activation slots (Note [activation slots]) ----
  void configure_stage(const std::vector<bool>& owned, int slots);
  void select_slot(int slot);
  std::span<T> unit_input(int unit, int slot);
  void begin_backward(int unit, std::span<const T> output_grad);
  std::span<const T> input_grad(int unit) const;
  std::int64_t activation_bytes() const;

  // ---- whole passes ----
  LossValue forward(const Tokens& batch, Timer timer, int step);
  void backward(Timer timer, int step);

  // Tensor parallelism (spec().tensor > 1): the group the passes' collectives go over,
  // set before the first pass; it must outlive the passes. The CPU's float model only.
  void set_tensor_group(TensorGroup* group);

  // For tests: the logits [rows, seq, vocab] of the last forward of the head unit
  // (forward_loss turns them into probabilities in place), in the backend's memory.
  std::span<const T> logits() const;

 private:
  // Block `unit`'s forward (Note [activation recomputation]); `replay`: again, in backward.
  void block_forward(int unit, Timer timer, int step, bool replay);
  // The same with --tp-overlap (Note [tensor-parallel overlap]), and its backward, which
  // runs the norms' backward through `norm_backward` (backward_unit's).
  void block_forward_overlapped(int unit, Timer timer, int step, bool replay);
  template <typename NormBackward>
  void block_backward_overlapped(int unit, Timer timer, int step,
                                 const NormBackward& norm_backward);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <typename T>
using BasicTransformer = TransformerOn<CpuBackend<T>>;
using Transformer = BasicTransformer<float>;
extern template class TransformerOn<CpuBackend<float>>;
extern template class TransformerOn<CpuBackend<double>>;

}  // namespace tandem
