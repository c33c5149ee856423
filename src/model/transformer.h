// Decoder-only transformers (gpt, llama; model_spec.h) with explicit forward and backward
// passes on the CPU, over the flat layout of layout.h, driven unit by unit like Mlp:
//   set_input, forward_unit(0..L+1), forward_loss, backward_loss, backward_unit(L+1..0).
// Unit 0 is the embedding, units 1..L the blocks, unit L+1 the final norm and the head
// (layout.h); docs/MODELS.md draws the whole model.
//
// BasicTransformer<T> runs in float (training: Transformer) or double (the tests' gradient
// checks, where central finite differences are exact enough): the same code, kernels of
// layers.h.
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
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/page_array.h"
#include "model/layout.h"
#include "timeline/recorder.h"

namespace tandem {

// rows sequences of seq + 1 tokens each: the model reads tokens [0, seq) of a sequence
// and predicts tokens [1, seq]. Tokens are in [0, vocab).
struct TokenBatch {
  std::span<const std::int32_t> tokens;  // [rows, seq + 1]
  int rows = 0;
};

// The FLOPs of a forward pass's matrix products over `rows` sequences, per span: a
// block's attention (qkv, the full T x T scores and weighted sum, projection) and mlp,
// and the head. Backward spans carry twice these. Shared by every device's transformer
// so that their spans agree.
struct TransformerFlops {
  double attention = 0;
  double mlp = 0;
  double head = 0;
};
TransformerFlops transformer_flops(const ModelSpec& spec, int rows);

// Tokens of a batch of max_batch sequences (max_batch x seq); throws UsageError when
// max_batch < 1 or the largest matrix product (tokens x max(vocab, 3 dim, 2 hidden))
// would not fit the int dimensions BLAS and cuBLAS take. Every device's transformer
// checks its batch with it.
std::int64_t transformer_batch_tokens(const ModelSpec& spec, int max_batch);

template <typename T>
class BasicTransformer {
 public:
  // Deterministic initialization from seed (layout.h); every buffer the passes need is
  // allocated here for up to max_batch sequences, so steps allocate nothing. The flat
  // arrays are laid out as `layout` asks (layout.h).
  BasicTransformer(const ModelSpec& spec, int max_batch, std::uint64_t seed,
                   LayoutOptions layout = {});
  // Bytes of the buffers that constructor allocates besides the parameters and gradients.
  static std::int64_t buffer_bytes(const ModelSpec& spec, int max_batch);
  ~BasicTransformer();
  BasicTransformer(BasicTransformer&&) noexcept;
  BasicTransformer& operator=(BasicTransformer&&) noexcept;

  const ModelSpec& spec() const { return layout_.spec(); }
  const ModelLayout& layout() const { return layout_; }
  int units() const { return layout_.units(); }
  std::span<T> flat_params() { return params_; }
  std::span<const T> flat_params() const { return params_; }
  std::span<T> flat_grads() { return grads_; }
  std::span<const T> flat_grads() const { return grads_; }
  void zero_grad();
  // Elements [begin, end) of the flat parameters or gradients read as zero afterwards, and
  // their whole pages go back to the operating system (core/page_array.h).
  void discard_params(std::size_t begin, std::size_t end) { params_.discard(begin, end); }
  void discard_grads(std::size_t begin, std::size_t end) { grads_.discard(begin, end); }

  // ---- unit by unit ----
  // Copies the batch in: 1 <= rows <= max_batch, tokens in [0, vocab) (checked).
  void set_input(const TokenBatch& batch);
  void forward_unit(int unit, RankRecorder& recorder, int step);
  // The mean cross-entropy over the batch's rows x seq predictions.
  double forward_loss(RankRecorder& recorder, int step);
  void backward_loss(RankRecorder& recorder, int step);
  // Units last..0, in that order; parameter gradients accumulate (+=).
  void backward_unit(int unit, RankRecorder& recorder, int step);

  // ---- pipeline stages (rank_model.h) ----
  // Runs only the units marked in `owned` (one flag per unit), keeping activations for
  // `slots` micro-batches in flight, of those units only; slot 0 is current.
  void configure_stage(const std::vector<bool>& owned, int slots);
  // The slot that set_input and the passes use from now on.
  void select_slot(int slot);
  // The residual stream `unit` reads (unit - 1's output) in `slot`, max_batch sequences.
  std::span<T> unit_input(int unit, int slot);
  // A block whose output feeds another stage starts backward from dL/d(its output).
  void begin_backward(int unit, std::span<const T> output_grad);
  // After backward_unit(unit): dL/d(unit's input), until the next backward_unit.
  std::span<const T> input_grad(int unit) const;
  // Bytes of the activations one slot keeps (inputs and targets included).
  std::int64_t activation_bytes() const;

  // ---- whole passes ----
  double forward(const TokenBatch& batch, RankRecorder& recorder, int step);
  void backward(RankRecorder& recorder, int step);

  // For tests: the logits [rows, seq, vocab] of the last forward of the head unit
  // (forward_loss turns them into probabilities in place).
  std::span<const T> logits() const;

 private:
  struct Impl;
  ModelLayout layout_;
  PageArray<T> params_;
  PageArray<T> grads_;
  std::unique_ptr<Impl> impl_;
};

using Transformer = BasicTransformer<float>;
extern template class BasicTransformer<float>;
extern template class BasicTransformer<double>;

}  // namespace tandem
