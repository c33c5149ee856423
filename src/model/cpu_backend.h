// The CPU device backend of the model layer (backend.h): what a model's passes need of a
// device, on the host.
//
//   memory   Buffer<U> = std::vector<U> (zeroed); the flat parameters and gradients are
//            PageArray<T> (core/page_array.h), whose discarded pages go back to the OS.
//   kernels  layers::Ops<T> (layers.h), inherited as they are, plus the tied head's
//            products on gemm (compute/cpu/blas.h); the GEMM precision (fp32, bf16) is
//            the process-wide setting of blas.h.
//   timing   spans on the host clock, into the caller's RankRecorder, as each call runs.
//   loss     cross_entropy_forward returns the batch's mean loss (LossValue = double) and
//            adds it to the step's sum (reset_loss_sum, read_loss_sum).
//
// CpuBackend<double> runs the tests' gradient checks through the same passes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "compute/cpu/blas.h"
#include "core/error.h"
#include "core/page_array.h"
#include "model/backend.h"
#include "model/dataset.h"
#include "model/layers.h"
#include "model/layout.h"
#include "model/model_ops.h"
#include "timeline/recorder.h"

namespace tandem {

// rows sequences of seq + 1 tokens each: the model reads tokens [0, seq) of a sequence
// and predicts tokens [1, seq]. Tokens are in [0, vocab).
struct TokenBatch {
  std::span<const std::int32_t> tokens;  // [rows, seq + 1]
  int rows = 0;
};

template <typename T>
class CpuBackend : public layers::Ops<T> {
 public:
  using Scalar = T;
  template <typename U>
  using Buffer = std::vector<U>;
  using Flat = PageArray<T>;
  using Timer = RankRecorder&;
  using Tokens = TokenBatch;
  using Batch = tandem::Batch;
  using LossValue = double;
  struct Config {};

  explicit CpuBackend(Config = {}) {}

  // ---- memory ----
  template <typename U>
  Buffer<U> buffer(std::size_t n) const {
    return Buffer<U>(n, U(0));
  }
  Flat flat(const ModelLayout& layout) const { return flat_array<T>(layout); }
  // The layout's initial parameters for `seed` (layout.h).
  void initialize(Flat& params, const ModelLayout& layout, std::uint64_t seed) const {
    if constexpr (std::is_same_v<T, float>) {
      layout.initialize(params, seed);
    } else {
      std::vector<float> init(layout.numel());
      layout.initialize(init, seed);
      std::copy(init.begin(), init.end(), params.begin());
    }
  }
  // A host table (the rotary embedding's), as the kernels read it.
  Buffer<T> table(const std::vector<T>& host) const { return host; }
  void zero(std::span<T> array) const { std::fill(array.begin(), array.end(), T(0)); }
  void zero(Flat& array) const { zero(std::span<T>(array)); }
  void discard(Flat& array, std::size_t begin, std::size_t end) const { array.discard(begin, end); }
  // Pages given back come back as they are touched (zero): nothing to do.
  void restore(Flat&, std::size_t /*begin*/, std::size_t /*end*/) const {}
  void settle(Flat&) const {}  // discarded pages went back at once
  void copy(T* to, const T* from, std::size_t n) const { std::copy_n(from, n, to); }
  std::vector<T> download(std::span<const T> from) const { return {from.begin(), from.end()}; }
  // Elements the shared parts of attention_backward need (one head at a time).
  static std::size_t attention_scratch(int Tn, int /*heads*/) {
    return static_cast<std::size_t>(Tn) * static_cast<std::size_t>(Tn);
  }
  // Bytes of what the backend allocates for a model beyond the passes' buffers.
  static std::int64_t extra_bytes(std::size_t /*numel*/, const BackendNeeds&, Config) { return 0; }
  // Called once the flat parameters exist; the CPU keeps nothing of its own.
  void prepare(std::span<const T> /*params*/, const BackendNeeds&) {}
  // A unit's forward is about to read its weights (the CPU reads them as they are).
  void before_forward_unit(const ModelLayout&, int /*unit*/) {}

  // ---- input ----
  // Checks and splits a batch into inputs [rows, seq] and targets [rows, seq]; returns
  // the rows.
  int load_tokens(const Tokens& batch, std::int32_t* inputs, std::int32_t* targets, int seq,
                  int vocab) const {
    TANDEM_CHECK(batch.tokens.size() >= static_cast<std::size_t>(batch.rows) * (seq + 1));
    for (int b = 0; b < batch.rows; ++b) {
      const std::int32_t* row = batch.tokens.data() + static_cast<std::ptrdiff_t>(b) * (seq + 1);
      for (int t = 0; t <= seq; ++t) TANDEM_CHECK(row[t] >= 0 && row[t] < vocab);
      std::copy_n(row, seq, inputs + static_cast<std::ptrdiff_t>(b) * seq);
      std::copy_n(row + 1, seq, targets + static_cast<std::ptrdiff_t>(b) * seq);
    }
    return batch.rows;
  }
  // Checks and copies an mlp's batch: x [rows, input], labels [rows] in [0, classes).
  int load_batch(const Batch& batch, T* x, std::int32_t* y, int input, int classes) const {
    TANDEM_CHECK(batch.x.size() >= static_cast<std::size_t>(batch.rows) * input);
    TANDEM_CHECK(batch.y.size() >= static_cast<std::size_t>(batch.rows));
    for (int b = 0; b < batch.rows; ++b) TANDEM_CHECK(batch.y[b] >= 0 && batch.y[b] < classes);
    if (x != nullptr) std::copy_n(batch.x.data(), static_cast<std::size_t>(batch.rows) * input, x);
    std::copy_n(batch.y.data(), batch.rows, y);
    return batch.rows;
  }

  // ---- timing ----
  ScopedSpan section(Timer recorder, SpanKind kind, int step, int tag, NameId name,
                     double flops) const {
    return ScopedSpan(recorder, Lane::kCompute, kind, step, tag, name, flops);
  }

  // ---- the loss ----
  double cross_entropy_forward(T* probs, const T* logits, const std::int32_t* targets, int N,
                               int C) {
    const double loss = layers::Ops<T>::cross_entropy_forward(probs, logits, targets, N, C);
    loss_sum_ += loss;
    return loss;
  }
  // The parallel cross-entropy's last step (layers.h), the loss added to the sum likewise.
  double cross_entropy_columns_finish(T* probs, const T* stats, const T* rowmax, int N, int C) {
    const double loss = layers::Ops<T>::cross_entropy_finish(probs, stats, rowmax, N, C);
    loss_sum_ += loss;
    return loss;
  }
  void reset_loss_sum() { loss_sum_ = 0; }
  double read_loss_sum() const { return loss_sum_; }

  // ---- kernels beyond layers::Ops ----
  // A Linear layer whose weight [O, I] is stored transposed (gpt's head, tied to the
  // token embedding): out [N, O] = inp [N, I] . weight^T.
  void linear_transposed_forward(T* out, const T* inp, const T* weight, int N, int I, int O) const {
    gemm(false, true, N, O, I, T(1), inp, I, weight, I, T(0), out, O);
  }
  // dinp [N, I] = dout [N, O] . weight (if non-null); dweight [O, I] += dout^T . inp.
  void linear_transposed_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                                  int N, int I, int O) const {
    if (dinp != nullptr) gemm(false, false, N, I, O, T(1), dout, O, weight, I, T(0), dinp, I);
    gemm(true, false, O, I, N, T(1), dout, O, inp, I, T(1), dweight, I);
  }

 private:
  double loss_sum_ = 0;  // of the forwards since reset_loss_sum
};

}  // namespace tandem
