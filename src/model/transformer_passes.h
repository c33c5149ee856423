// TransformerOn<Backend>'s passes (transformer.h), written once for every device: included
// only by the files that instantiate them for a backend (transformer.cpp for the CPU,
// cuda/cuda_models.cpp for CUDA). Every kernel, buffer and span goes through
// `dev`, the backend (cpu_backend.h lists what one supplies).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "model/activation_slots.h"
#include "model/model_ops.h"
#include "model/transformer.h"

namespace tandem {

// Note [Transformer buffers]
// What backward needs from forward is kept per block: the block's input x (the residual
// stream; x[L] is the last block's output, the final norm's input), the two norms'
// outputs and statistics, qkv (after rope for llama), the attention probabilities
// [B, H, T, T], the heads' output before the projection, the stream after attention
// (xmid), and the MLP's inner activations (gpt: before and after GELU; llama: gate|up and
// silu(gate) * up). logits [N, V] become the probabilities in forward_loss and dlogits in
// backward_loss, in place. Backward runs on shared scratch: dx is the stream's gradient,
// carried from the head down to the embedding, updated in place by each residual branch;
// attention's scratch is what the backend asks for (attention_scratch).
//
// Note [activation slots]: what one micro-batch keeps from its forward to its backward,
// the token ids included. A whole model keeps one; a pipeline stage (configure_stage)
// keeps one per micro-batch in flight, holding only its units' tensors, and select_slot
// swaps the current one with a parked one (activation_slots.h: nothing is copied).
template <typename Backend>
struct TransformerActs {
  using T = typename Backend::Scalar;
  template <typename U>
  using Buffer = typename Backend::template Buffer<U>;
  struct Block {
    Buffer<T> ln1, ln1_mean, ln1_rstd;  // llama: rms norm (mean unused)
    Buffer<T> qkv, att, atty, xmid;
    Buffer<T> ln2, ln2_mean, ln2_rstd;
    Buffer<T> up;   // gpt: fc output [N, F]; llama: gate|up [N, 2F]
    Buffer<T> act;  // gpt: GELU(fc + bias); llama: silu(gate) * up; [N, F]
  };
  int rows = 0;                  // sequences of the last set_input; 0 before the first
  Buffer<std::int32_t> inputs;   // [B, T]
  Buffer<std::int32_t> targets;  // [B, T]
  std::vector<Buffer<T>> x;      // L + 1 residual streams [N, D]
  std::vector<Block> blocks;
  Buffer<T> lnf, lnf_mean, lnf_rstd;
  Buffer<T> logits;  // [N, V]; probabilities after forward_loss, then dlogits

  std::int64_t bytes() const {
    std::size_t n = (inputs.size() + targets.size()) * sizeof(std::int32_t);
    auto add = [&](const Buffer<T>& v) { n += v.size() * sizeof(T); };
    for (const auto& v : x) add(v);
    for (const Block& b : blocks) n += static_cast<std::size_t>(block_bytes(b));
    for (const auto* v : {&lnf, &lnf_mean, &lnf_rstd, &logits}) add(*v);
    return static_cast<std::int64_t>(n);
  }
  static std::int64_t block_bytes(const Block& b) {
    std::size_t n = 0;
    for (const auto* v : {&b.ln1, &b.ln1_mean, &b.ln1_rstd, &b.qkv, &b.att, &b.atty, &b.xmid,
                          &b.ln2, &b.ln2_mean, &b.ln2_rstd, &b.up, &b.act}) {
      n += v->size() * sizeof(T);
    }
    return static_cast<std::int64_t>(n);
  }

  // Floats of one block's attention probabilities [B, H, T, T] for max_batch sequences
  // (a tensor-parallel rank's heads: TensorShard).
  static std::size_t probs_numel(const ModelSpec& spec, int max_batch) {
    const TransformerShape& s = spec.transformer;
    return static_cast<std::size_t>(max_batch) *
           static_cast<std::size_t>(TensorShard::of(spec).heads) * static_cast<std::size_t>(s.seq) *
           static_cast<std::size_t>(s.seq);
  }
  // One block's tensors for max_batch sequences; the attention probabilities only when
  // `att` (else left empty).
  static void allocate_block(const Backend& dev, const ModelSpec& spec, int max_batch, Block& b,
                             bool att) {
    const TransformerShape& s = spec.transformer;
    const TensorShard shard = TensorShard::of(spec);
    const auto n = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(s.seq);
    const auto D = static_cast<std::size_t>(s.dim), F = static_cast<std::size_t>(shard.hidden);
    const auto W = static_cast<std::size_t>(shard.width);
    const std::size_t local = shard.local(n);  // sequence parallelism: this rank's tokens
    auto sized = [&](std::size_t size) { return dev.template buffer<T>(size); };
    b.ln1 = sized(local * D);
    b.ln1_mean = sized(local);
    b.ln1_rstd = sized(local);
    b.qkv = sized(n * 3 * W);
    if (att) {
      b.att = sized(probs_numel(spec, max_batch));
    }
    b.atty = sized(n * W);
    b.xmid = sized(local * D);
    b.ln2 = sized(local * D);
    b.ln2_mean = sized(local);
    b.ln2_rstd = sized(local);
    b.up = sized(n * (spec.kind == ModelKind::kGpt ? F : 2 * F));
    b.act = sized(n * F);
  }

  // Sized for max_batch sequences and the units in `owned`: a unit's own tensors, the
  // stream it reads (x[u - 1]) and the one it writes (x[u]).
  void allocate(const Backend& dev, const ModelSpec& spec, int max_batch,
                const std::vector<bool>& owned) {
    const TransformerShape& s = spec.transformer;
    const auto n = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(s.seq);
    const auto D = static_cast<std::size_t>(s.dim);
    const auto L = static_cast<std::size_t>(s.layers);
    auto own = [&](std::size_t unit) { return unit < owned.size() && owned[unit]; };
    auto sized = [&](std::size_t size, bool keep) {
      return keep ? dev.template buffer<T>(size) : Buffer<T>();
    };
    const std::size_t local = TensorShard::of(spec).local(n);  // the residual stream's tokens
    rows = 0;
    inputs = dev.template buffer<std::int32_t>(n);
    targets = dev.template buffer<std::int32_t>(n);
    x.clear();
    for (std::size_t i = 0; i <= L; ++i) x.push_back(sized(local * D, own(i) || own(i + 1)));
    blocks.clear();
    blocks.resize(L);
    // --recompute full keeps no block's tensors (only its input, x[l]); selective keeps all
    // but the attention probabilities (Note [activation recomputation]).
    for (std::size_t l = 0; l < L; ++l) {
      if (own(l + 1) && spec.recompute != Recompute::kFull) {
        allocate_block(dev, spec, max_batch, blocks[l], spec.recompute == Recompute::kNone);
      }
    }
    const bool head = own(L + 1);
    lnf = sized(local * D, head);
    lnf_mean = sized(local, head);
    lnf_rstd = sized(local, head);
    logits = sized(n * static_cast<std::size_t>(TensorShard::of(spec).vocab), head);
  }
};

// What the passes ask the backend to hold (backend.h): the loss of every token; the
// widest activation a linear layer reads (D or F wide) and the widest output gradient
// (qkv's 3D, the MLP's up, the head's V).
inline BackendNeeds transformer_needs(const ModelSpec& spec, int max_batch) {
  const TransformerShape& s = spec.transformer;
  const TensorShard shard = TensorShard::of(spec);
  const auto n = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(s.seq);
  const auto D = static_cast<std::size_t>(s.dim), F = static_cast<std::size_t>(shard.hidden);
  const auto W = static_cast<std::size_t>(shard.width);
  const std::size_t up = spec.kind == ModelKind::kGpt ? F : 2 * F;
  return {
      .loss_rows = n,
      .widest_input = n * std::max(D, F),
      .widest_output_grad = n * std::max({D, 3 * W, up, static_cast<std::size_t>(shard.vocab)})};
}

template <typename Backend>
struct TransformerOn<Backend>::Impl : TransformerOffsets, TransformerActs<Backend> {
  using Acts = TransformerActs<Backend>;
  using Block = typename Acts::Block;
  template <typename U>
  using Buffer = typename Backend::template Buffer<U>;

  int max_batch = 0;
  bool gpt = true;
  // Tensor parallelism: this rank's share, and the group of the others (null: none).
  // The CPU's float model only: its backend has the split kernels (layers.h).
  static constexpr bool kTensorParallel = std::is_same_v<T, float> && requires {
    &Backend::residual_add;
  };
  TensorShard shard;
  TensorGroup* tp = nullptr;
  bool split() const { return shard.ranks > 1; }
  TensorGroup& group() {
    TANDEM_CHECK(tp != nullptr);  // set_tensor_group first
    return *tp;
  }
  // Note [sequence parallelism]: with --sequence-parallel, what a block holds between its
  // products (the residual stream x, xmid, the norms' outputs and statistics) is this
  // rank's n = N / T tokens only. A column-parallel product reads every token: its input
  // is all-gathered into `gathered` first (in forward, and again in backward for its
  // weight gradient, instead of keeping N x D per block). A row-parallel product's partial
  // sum [N, D] is reduce-scattered to this rank's tokens (instead of all-reduced), and in
  // backward its output gradient is all-gathered before the product's backward, so its
  // bias gradient is every token's on every rank. The norms' gains and biases see only
  // this rank's tokens: their gradients are summed over the group, per micro-batch, before
  // they join the unit's (norm_grads). Forward moves the bytes the all-reduces did, backward
  // one gather more per column-parallel product (its input, again), and the D-wide
  // tensors shrink T times (Korthikanti et al. 2022).
  bool sequence() const { return shard.sequence; }
  Buffer<T> gathered;    // [N, D]: an all-gathered input or output gradient
  Buffer<T> dln_local;   // [n, D]: a column-parallel input gradient, reduce-scattered
  Buffer<T> norm_grads;  // [2 D]: one norm's gradients, before their sum over the group
  // this rank's rows [count, D] -> gathered [T x count, D].
  void tp_gather(const T* local, std::size_t count, int step, int unit) {
    if constexpr (kTensorParallel) {
      group().allgather({local, count},
                        {gathered.data(), count * static_cast<std::size_t>(shard.ranks)}, step,
                        unit);
    }
  }
  // A column-parallel product's input (or a row-parallel one's output gradient): every
  // token's [N, D] rows; this rank's `local` [n, D] gathered with sequence parallelism.
  const T* every_token(const T* local, int n, int step, int unit) {
    if (!sequence()) return local;
    tp_gather(local, static_cast<std::size_t>(n) * static_cast<std::size_t>(dim), step, unit);
    return gathered.data();
  }
  // Note [tensor-parallel overlap]: with --tp-overlap the all-gathers and reduce-scatters
  // of the blocks, the embedding and the head become T ring steps of point-to-point
  // transfers (to rank + 1, from rank - 1), and the work they feed or consume (a product,
  // the embedding's lookup or its gradient's scatter) is cut into the same T token blocks,
  // each computed while the next block travels (the collective matmul of Wang et al.
  // 2022; PyTorch's async TP and Transformer Engine's comm-GEMM overlap). What stays in
  // place: the loss's two small collectives (a row's max and sums, latency-bound, with no
  // product to hide behind) and the norms' gradient sums (2D values). ring_gather:
  // at step k rank r holds block (r - k) mod T, forwards it and computes on it.
  // ring_reduce_scatter: at step k rank r computes its partial of block (r - k - 1) mod T,
  // adds the sum received from rank r - 1 and forwards it; after T steps it holds its own
  // block's sum. The sums add in ring order, so the result rounds like the ring's.
  bool overlap() const { return shard.overlap; }
  Buffer<T> ring_bufs;  // [3 n, D]: two outgoing partial sums and one incoming
  template <typename Chunk>
  void ring_gather(const T* local, std::size_t count, int step, int unit, const Chunk& on_block) {
    if constexpr (kTensorParallel) {
      const int t = shard.ranks, r = shard.rank;
      T* all = gathered.data();
      std::copy_n(local, count, all + static_cast<std::size_t>(r) * count);
      for (int k = 0; k < t; ++k) {
        const int c = (r - k + t) % t, next = (c - 1 + t) % t;
        std::unique_ptr<TensorGroup::Transfer> send, recv;
        if (k + 1 < t) {
          send = group().send_next({all + static_cast<std::size_t>(c) * count, count}, step, unit);
          recv =
              group().recv_prev({all + static_cast<std::size_t>(next) * count, count}, step, unit);
        }
        on_block(c, static_cast<const T*>(all + static_cast<std::size_t>(c) * count));
        if (recv) {
          recv->wait();
          send->wait();
        }
      }
    }
  }
  template <typename Partial>
  void ring_reduce_scatter(T* out, std::size_t count, int step, int unit, const Partial& partial) {
    if constexpr (kTensorParallel) {
      const int t = shard.ranks, r = shard.rank;
      T* incoming = ring_bufs.data() + 2 * count;
      std::unique_ptr<TensorGroup::Transfer> sends[2], recv;
      for (int k = 0; k < t; ++k) {
        const int c = (r - k - 1 + 2 * t) % t;
        T* acc = k + 1 == t ? out : ring_bufs.data() + static_cast<std::size_t>(k % 2) * count;
        if (sends[k % 2]) sends[k % 2]->wait();  // its buffer is about to be written
        partial(c, acc);
        if (recv) {
          recv->wait();
          for (std::size_t i = 0; i < count; ++i) acc[i] += incoming[i];
        }
        if (k + 1 < t) {
          sends[k % 2] = group().send_next({acc, count}, step, unit);
          recv = group().recv_prev({incoming, count}, step, unit);
        }
      }
      for (auto& send : sends) {
        if (send) send->wait();
      }
    }
  }
  // partial [T x count] summed over the group, this rank's block -> out [count].
  void tp_scatter(const T* partial, T* out, std::size_t count, int step, int unit) {
    if constexpr (kTensorParallel) {
      group().reduce_scatter({partial, count * static_cast<std::size_t>(shard.ranks)}, {out, count},
                             step, unit);
    }
  }
  int seq_len = 0;
  int dim = 0;
  // The current micro-batch's shape on this rank: rows, seq, D, its heads, their width,
  // its MLP width, the tokens N and this rank's n of them (Note [sequence parallelism]).
  struct Dims {
    int B, Tn, D, H, W, F, N, n;
    // Where token block c (of n tokens, --tp-overlap) starts in a [N, width] tensor.
    std::size_t block(int c, int width) const {
      return static_cast<std::size_t>(c) * static_cast<std::size_t>(n) *
             static_cast<std::size_t>(width);
    }
    // Elements of this rank's [n, D] rows.
    std::size_t local_size() const { return static_cast<std::size_t>(n) * D; }
  };
  Dims dims() const {
    const int N = this->rows * seq_len;
    return {
        this->rows,  seq_len,      dim, shard.heads,
        shard.width, shard.hidden, N,   static_cast<int>(shard.local(static_cast<std::size_t>(N)))};
  }
  // A tensor-parallel collective of the passes, in place (transformer.h).
  void tp_allreduce(T* data, std::size_t n, int step, int unit) {
    if constexpr (kTensorParallel) {
      group().allreduce({data, n}, step, unit);
    }
  }
  Buffer<T> rope;  // llama: [T, hd/2, 2]
  // Backward scratch.
  Buffer<T> dx, dln, dqkv, datty, dup, dact, att_scratch;
  // The parallel cross-entropy's row maxima and sums (stats: sums, then target logits)
  // and every rank's maxima.
  Buffer<T> ce_max, ce_stats, ce_maxes;
  // --recompute: the tensors a block's backward reads that no block keeps, for one block
  // at a time (full: all of a Block's; selective: att only).
  Block replay;
  int next_backward = -1;  // the unit backward_unit expects next (-1: none)
  // Pipeline stages: the units this model runs (all unless configure_stage said
  // otherwise), and the other slots' activations.
  std::vector<bool> owned;
  ActivationSlots<Acts> slots;

  Recompute recompute = Recompute::kNone;
  std::vector<bool> skipped;  // --layer-drop: per unit, this micro-batch (empty: none)

  Acts& acts() { return *this; }
  bool skips(int unit) const {
    return static_cast<std::size_t>(unit) < skipped.size() &&
           skipped[static_cast<std::size_t>(unit)];
  }
  // Where block l's tensors are: its own, or (full recomputation) the replay's.
  Block& block(std::size_t l) { return recompute == Recompute::kFull ? replay : this->blocks[l]; }
  // Block l's attention probabilities: its own, or the replay's.
  T* att(std::size_t l) {
    return recompute == Recompute::kNone ? this->blocks[l].att.data() : replay.att.data();
  }
};

template <typename Backend>
TransformerOn<Backend>::TransformerOn(const ModelSpec& model_spec, int max_batch,
                                      std::uint64_t seed, LayoutOptions layout_options,
                                      Config config)
    : Base(model_spec, layout_options, seed, config), impl_(std::make_unique<Impl>()) {
  TANDEM_CHECK(model_spec.is_transformer());
  const TransformerShape& s = model_spec.transformer;
  const auto n = static_cast<std::size_t>(transformer_batch_tokens(model_spec, max_batch));
  Impl& m = *impl_;
  const Backend& dev = this->backend();
  m.max_batch = max_batch;
  m.gpt = model_spec.kind == ModelKind::kGpt;
  m.shard = TensorShard::of(model_spec, layout_options.tensor_rank);
  m.seq_len = s.seq;
  m.dim = s.dim;
  TANDEM_CHECK(!m.split() || Impl::kTensorParallel);

  const auto D = static_cast<std::size_t>(s.dim), F = static_cast<std::size_t>(m.shard.hidden);
  const auto W = static_cast<std::size_t>(m.shard.width);
  const std::size_t up = m.gpt ? F : 2 * F;
  m.owned.assign(static_cast<std::size_t>(this->units()), true);
  m.acts().allocate(dev, model_spec, max_batch, m.owned);
  m.dx = dev.template buffer<T>(m.shard.local(n) * D);
  m.dln = dev.template buffer<T>(n * D);
  m.dqkv = dev.template buffer<T>(n * 3 * W);
  m.datty = dev.template buffer<T>(n * W);
  m.dup = dev.template buffer<T>(n * up);
  m.dact = dev.template buffer<T>(n * F);
  m.att_scratch = dev.template buffer<T>(Backend::attention_scratch(s.seq, m.shard.heads));
  if (m.overlap()) m.ring_bufs = dev.template buffer<T>(3 * m.shard.local(n) * D);
  if (m.sequence()) {
    m.gathered = dev.template buffer<T>(n * D);
    m.dln_local = dev.template buffer<T>(m.shard.local(n) * D);
    m.norm_grads = dev.template buffer<T>(2 * D);
  }
  if (m.split()) {
    m.ce_max = dev.template buffer<T>(n);
    m.ce_stats = dev.template buffer<T>(2 * n);
    m.ce_maxes = dev.template buffer<T>(n * static_cast<std::size_t>(m.shard.ranks));
  }
  m.recompute = model_spec.recompute;
  if (m.recompute == Recompute::kFull) {
    TransformerActs<Backend>::allocate_block(dev, model_spec, max_batch, m.replay, /*att=*/true);
  } else if (m.recompute == Recompute::kSelective) {
    m.replay.att =
        dev.template buffer<T>(TransformerActs<Backend>::probs_numel(model_spec, max_batch));
  }
  if (!m.gpt) {
    std::vector<T> table(static_cast<std::size_t>(s.seq) * static_cast<std::size_t>(s.head_dim()));
    layers::Ops<T>::rope_table(table.data(), s.seq, s.head_dim());
    m.rope = dev.table(table);
  }
  static_cast<TransformerOffsets&>(m) = transformer_offsets(this->layout());
  this->backend().prepare(this->flat_params(), transformer_needs(model_spec, max_batch));
}

template <typename Backend>
std::int64_t TransformerOn<Backend>::buffer_bytes(const ModelSpec& model_spec, int max_batch,
                                                  Config config) {
  // As the constructor allocates them (Note [Transformer buffers]), per token: of every
  // token (`whole`), or of this rank's with sequence parallelism (`local`: its norm and
  // residual regions, Note [sequence parallelism]).
  const TransformerShape& s = model_spec.transformer;
  const TensorShard shard = TensorShard::of(model_spec);
  const std::int64_t D = s.dim, F = shard.hidden, W = shard.width,
                     up = model_spec.kind == ModelKind::kGpt ? F : 2 * F;
  const std::int64_t probs = static_cast<std::int64_t>(shard.heads) * s.seq;
  // A block: qkv (3W), atty (W), probabilities, up, act; ln1, xmid, ln2 (D each) and the
  // norms' statistics.
  const std::int64_t block_whole = 4 * W + probs + up + F, block_local = 3 * D + 4;
  // Every block's tensors, or (Note [activation recomputation]) one replay block's.
  const std::int64_t blocks = model_spec.recompute == Recompute::kFull ? 1 : s.layers;
  const std::int64_t dropped = model_spec.recompute == Recompute::kSelective ? s.layers - 1 : 0;
  // Scratch: dln (D), dqkv (3W), datty (W), dup, dact; with tensor parallelism the
  // cross-entropy's (2 + 1 + ranks), with sequence parallelism the gathered tensor (D);
  // dx (D), and the sequence-parallel dln (D).
  const std::int64_t scratch_whole =
      D + 4 * W + up + F + (shard.ranks > 1 ? 3 + shard.ranks : 0) + (shard.sequence ? D : 0);
  const std::int64_t scratch_local = D + (shard.sequence ? D : 0);
  // The L + 1 residual streams, the final norm (D and 2), the logits.
  const std::int64_t whole = blocks * block_whole - dropped * probs + shard.vocab + scratch_whole;
  const std::int64_t local = (s.layers + 1) * D + blocks * block_local + D + 2 + scratch_local;
  const std::int64_t tokens = static_cast<std::int64_t>(max_batch) * s.seq;
  const auto local_tokens =
      static_cast<std::int64_t>(shard.local(static_cast<std::size_t>(tokens)));
  const auto attention = static_cast<std::int64_t>(Backend::attention_scratch(s.seq, shard.heads));
  return static_cast<std::int64_t>(sizeof(T)) *
             (tokens * whole + local_tokens * local + attention +
              static_cast<std::int64_t>(s.seq) * s.head_dim() + (shard.sequence ? 2 * D : 0)) +
         tokens * 2 * static_cast<std::int64_t>(sizeof(std::int32_t)) +
         Backend::extra_bytes(ModelLayout(model_spec).numel(),
                              transformer_needs(model_spec, max_batch), config);
}

template <typename Backend>
TransformerOn<Backend>::~TransformerOn() = default;
template <typename Backend>
TransformerOn<Backend>::TransformerOn(TransformerOn&&) noexcept = default;
template <typename Backend>
TransformerOn<Backend>& TransformerOn<Backend>::operator=(TransformerOn&&) noexcept = default;

template <typename Backend>
void TransformerOn<Backend>::configure_stage(const std::vector<bool>& owned, int slots) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(owned.size(), static_cast<std::size_t>(this->units()));
  TANDEM_CHECK(slots >= 1);
  m.owned = owned;
  m.acts().allocate(this->backend(), this->spec(), m.max_batch, owned);
  // A stage without blocks replays none.
  if (std::none_of(owned.begin() + 1, owned.end() - 1, [](bool own) { return own; })) {
    m.replay = typename Impl::Block{};
  }
  m.slots.configure(slots, [&](TransformerActs<Backend>& a) {
    a.allocate(this->backend(), this->spec(), m.max_batch, owned);
  });
  m.next_backward = -1;
}

template <typename Backend>
void TransformerOn<Backend>::select_slot(int slot) {
  impl_->slots.select(impl_->acts(), slot);
}

template <typename Backend>
auto TransformerOn<Backend>::unit_input(int unit, int slot) -> std::span<T> {
  Impl& m = *impl_;
  TANDEM_CHECK(unit >= 1 && unit < this->units());
  auto& x = m.slots.of(m.acts(), slot).x[static_cast<std::size_t>(unit - 1)];
  TANDEM_CHECK(x.size() > 0);  // a unit of this stage, or the one after it
  return {x.data(), x.size()};
}

template <typename Backend>
void TransformerOn<Backend>::begin_backward(int unit, std::span<const T> output_grad) {
  Impl& m = *impl_;
  TANDEM_CHECK(unit >= 0 && unit < this->units() - 1);  // the head starts from the loss
  TANDEM_CHECK_EQ(output_grad.size(), m.dx.size());
  this->backend().copy(m.dx.data(), output_grad.data(), output_grad.size());
  m.next_backward = unit;
}

template <typename Backend>
auto TransformerOn<Backend>::input_grad(int unit) const -> std::span<const T> {
  const Impl& m = *impl_;
  TANDEM_CHECK(unit >= 1 && unit < this->units() && m.next_backward == unit - 1);
  return {m.dx.data(), m.dx.size()};
}

template <typename Backend>
std::int64_t TransformerOn<Backend>::activation_bytes() const {
  // Every slot alike, and the replay once (one block's, shared by the slots).
  return impl_->slots.count() * impl_->bytes() + Impl::block_bytes(impl_->replay);
}

template <typename Backend>
auto TransformerOn<Backend>::logits() const -> std::span<const T> {
  const Impl& m = *impl_;
  return {m.logits.data(),
          static_cast<std::size_t>(m.rows) * this->spec().transformer.seq * m.shard.vocab};
}

template <typename Backend>
void TransformerOn<Backend>::set_input(const Tokens& batch) {
  Impl& m = *impl_;
  TANDEM_CHECK(batch.rows >= 1 && batch.rows <= m.max_batch);
  m.rows =
      this->backend().load_tokens(batch, m.inputs.data(), m.targets.data(),
                                  this->spec().transformer.seq, this->spec().transformer.vocab);
  // Sequence parallelism cuts the batch's tokens into equal blocks (validate() says so).
  TANDEM_CHECK(!m.sequence() || m.dims().N % m.shard.ranks == 0);
  m.next_backward = -1;
  m.skipped.clear();
}

template <typename Backend>
void TransformerOn<Backend>::set_tensor_group(TensorGroup* group) {
  TANDEM_CHECK(impl_->split() && Impl::kTensorParallel);
  impl_->tp = group;
}

template <typename Backend>
void TransformerOn<Backend>::set_skipped(std::vector<bool> units) {
  TANDEM_CHECK(units.empty() || units.size() == static_cast<std::size_t>(this->units()));
  for (std::size_t u = 0; u < units.size(); ++u) {
    TANDEM_CHECK(!units[u] || (u >= 1 && u + 1 < units.size()));  // blocks only
  }
  impl_->skipped = std::move(units);
}

template <typename Backend>
bool TransformerOn<Backend>::unit_ran(int unit) const {
  return !impl_->skips(unit);
}

template <typename Backend>
void TransformerOn<Backend>::forward_unit(int unit, Timer timer, int step) {
  Impl& m = *impl_;
  Backend& dev = this->backend();
  TANDEM_CHECK(m.rows >= 1);  // set_input() first
  TANDEM_CHECK(unit >= 0 && unit < this->units() && m.owned[static_cast<std::size_t>(unit)]);
  const TransformerShape& s = this->spec().transformer;
  const int B = m.rows, Tn = s.seq, D = s.dim, L = s.layers;
  const int N = B * Tn;
  const T* w = this->flat_params().data();
  const TransformerFlops flops = transformer_flops(this->spec(), B);
  auto span = [&](ModelOp op, double f) {
    return dev.section(timer, SpanKind::kForward, step, unit, op_name(op), f);
  };
  // Sequence parallelism: this rank's tokens [first, first + n) (Note [sequence
  // parallelism]); all N without.
  const int n = static_cast<int>(m.shard.local(static_cast<std::size_t>(N)));
  const int first = m.sequence() ? m.shard.rank * n : 0;
  if (unit == 0) {
    if (m.split()) {  // vocabulary-parallel: each rank's rows, summed, then the positions
      if constexpr (Impl::kTensorParallel) {
        // With sequence parallelism the sum is reduce-scattered to this rank's tokens;
        // with --tp-overlap on a ring, each token block's rows looked up as the partial
        // sum before it arrives.
        const auto local_size = static_cast<std::size_t>(n) * D;
        if (m.overlap()) {
          m.ring_reduce_scatter(m.x[0].data(), local_size, step, unit, [&](int c, T* partial) {
            auto s0 = span(ModelOp::kEmbedding, 0);
            dev.vocab_embedding_forward(partial, m.inputs.data() + m.dims().block(c, 1), w + m.wte,
                                        n, D, m.shard.vocab_begin, m.shard.vocab);
          });
        } else {
          T* part = m.sequence() ? m.dln.data() : m.x[0].data();
          {
            auto s0 = span(ModelOp::kEmbedding, 0);
            dev.vocab_embedding_forward(part, m.inputs.data(), w + m.wte, N, D, m.shard.vocab_begin,
                                        m.shard.vocab);
          }
          if (m.sequence()) {
            m.tp_scatter(part, m.x[0].data(), local_size, step, unit);
          } else {
            m.tp_allreduce(part, static_cast<std::size_t>(N) * D, step, unit);
          }
        }
        if (m.gpt) {
          auto s1 = span(ModelOp::kEmbedding, 0);
          dev.add_positions(m.x[0].data(), w + m.wpe, first, n, Tn, D);
        }
      }
      return;
    }
    auto s0 = span(ModelOp::kEmbedding, 0);
    dev.embedding_forward(m.x[0].data(), m.inputs.data(), w + m.wte, m.gpt ? w + m.wpe : nullptr, B,
                          Tn, D);
    return;
  }
  dev.before_forward_unit(this->layout(), unit);  // the embedding runs no GEMM
  if (unit == L + 1) {
    {
      auto s1 = span(ModelOp::kNorm, 0);
      if (m.gpt) {
        dev.layernorm_forward(m.lnf.data(), m.lnf_mean.data(), m.lnf_rstd.data(), m.x[L].data(),
                              w + m.lnf_w, w + m.lnf_b, n, D);
      } else {
        dev.rmsnorm_forward(m.lnf.data(), m.lnf_rstd.data(), m.x[L].data(), w + m.lnf_w, n, D);
      }
    }
    // Tensor parallelism: this rank's vocabulary columns (the loss combines them), of
    // every token (gathered with sequence parallelism; with --tp-overlap on a ring, each
    // token block's logits computed while the next block travels).
    const int V = m.shard.vocab;
    auto head = [&](T* logits, const T* in, int rows, double f) {
      auto s2 = span(ModelOp::kHead, f);
      if (m.gpt) {  // tied: logits [N, V] = lnf [N, D] . wte^T
        dev.linear_transposed_forward(logits, in, w + m.wte, rows, D, V);
      } else {
        dev.linear_forward(logits, in, w + m.head_w, nullptr, rows, D, V);
      }
    };
    if (m.overlap()) {
      m.ring_gather(m.lnf.data(), static_cast<std::size_t>(n) * D, step, unit,
                    [&](int c, const T* lnf) {
                      head(m.logits.data() + m.dims().block(c, V), lnf, n, 2.0 * n * D * V);
                    });
    } else {
      head(m.logits.data(), m.every_token(m.lnf.data(), n, step, unit), N, flops.head);
    }
    return;
  }

  if (m.skips(unit)) {  // --layer-drop: the block is the identity
    const auto l = static_cast<std::size_t>(unit - 1);
    dev.copy(m.x[l + 1].data(), m.x[l].data(), static_cast<std::size_t>(n) * D);
    return;
  }
  block_forward(unit, timer, step, /*replay=*/false);
}

// Note [activation recomputation]: --recompute full keeps of each block only its input
// x[l] (and the stream's other checkpoints, the x[] every block reads); its other tensors
// live in one replay Block, which the block's backward fills first by running the
// block's forward again from x[l] (stopping before the down projection, whose output is
// the next block's input, already kept). --recompute selective keeps everything but the
// attention probabilities [B, H, T, T], the one tensor that grows with T^2, and the
// block's backward runs attention's core (scores, softmax, weighted sum) again from the
// kept qkv into the replay's. The same kernels on the same inputs give the same bits, so
// training is bit for bit the run without recomputation. The replayed work is timed as
// backward spans of the block named "recompute", with the FLOPs of its matrix products.
template <typename Backend>
void TransformerOn<Backend>::block_forward(int unit, Timer timer, int step, bool replay) {
  Impl& m = *impl_;
  if (m.overlap()) {
    block_forward_overlapped(unit, timer, step, replay);
    return;
  }
  Backend& dev = this->backend();
  const TransformerShape& s = this->spec().transformer;
  // Tensor parallelism: this rank's heads (W wide) and MLP width (Note [tensor-parallel
  // layout]); the whole model without.
  const int B = m.rows, Tn = s.seq, D = s.dim, H = m.shard.heads, W = m.shard.width,
            F = m.shard.hidden;
  const int N = B * Tn;
  const T* w = this->flat_params().data();
  const TransformerFlops flops = transformer_flops(this->spec(), B);
  const double down_flops = 2.0 * N * F * D;
  auto span = [&](ModelOp op, double f) {
    return replay
               ? dev.section(timer, SpanKind::kBackward, step, unit, op_name(ModelOp::kRecompute),
                             op == ModelOp::kMlp ? f - down_flops : f)
               : dev.section(timer, SpanKind::kForward, step, unit, op_name(op), f);
  };
  const auto l = static_cast<std::size_t>(unit - 1);
  auto& b = m.block(l);
  T* att = m.att(l);
  const TransformerOffsets::BlockParams& p = m.block_params[l];
  const T* x = m.x[l].data();
  // Sequence parallelism: the norm and residual regions are this rank's n tokens (Note
  // [sequence parallelism]); all N without.
  const int n = static_cast<int>(m.shard.local(static_cast<std::size_t>(N)));
  auto norm = [&](T* out, T* mean, T* rstd, const T* inp, std::size_t gain, std::size_t bias) {
    auto sn = span(ModelOp::kNorm, 0);
    if (m.gpt) {
      dev.layernorm_forward(out, mean, rstd, inp, w + gain, w + bias, n, D);
    } else {
      dev.rmsnorm_forward(out, rstd, inp, w + gain, n, D);
    }
  };
  // A column-parallel product's input: every token's (Impl::every_token).
  auto every_token = [&](const T* local) { return m.every_token(local, n, step, unit); };
  const T* no_bias = nullptr;
  auto bias = [&](std::size_t offset) { return m.gpt ? w + offset : no_bias; };

  // A row-parallel product into the residual stream: out = residual + inp . weight (+
  // bias), inside `op`'s span. Split, each rank's product is a partial sum (into the
  // scratch dln with sequence parallelism, out without): after the span it is all-reduced
  // or reduce-scattered to this rank's tokens (row_parallel_sum), then the residual and
  // the (replicated) bias are added once.
  T* partial = m.sequence() ? m.dln.data() : nullptr;
  auto row_parallel = [&](T* out, const T* residual, const T* inp, std::size_t weight,
                          std::size_t bias_at, int I) {
    if (m.split()) {
      dev.linear_forward(partial != nullptr ? partial : out, inp, w + weight, nullptr, N, I, D);
    } else {
      dev.linear_residual_forward(out, residual, inp, w + weight, bias(bias_at), N, I, D);
    }
  };
  auto row_parallel_sum = [&](T* out, const T* residual, std::size_t bias_at) {
    if (!m.split()) return;
    if constexpr (Impl::kTensorParallel) {
      if (m.sequence()) {
        m.tp_scatter(partial, out, static_cast<std::size_t>(n) * D, step, unit);
      } else {
        m.tp_allreduce(out, static_cast<std::size_t>(N) * D, step, unit);
      }
      auto sr = span(ModelOp::kResidual, 0);
      dev.residual_add(out, residual, bias(bias_at), n, D);
    }
  };

  norm(b.ln1.data(), b.ln1_mean.data(), b.ln1_rstd.data(), x, p.ln1_w, p.ln1_b);
  const T* ln1 = every_token(b.ln1.data());
  {
    auto sa = span(ModelOp::kAttention, flops.attention);
    dev.linear_forward(b.qkv.data(), ln1, w + p.qkv_w, bias(p.qkv_b), N, D, 3 * W);
    if (!m.gpt) dev.rope_forward(b.qkv.data(), m.rope.data(), B, Tn, W, H);
    dev.attention_forward(b.atty.data(), att, b.qkv.data(), B, Tn, W, H);
    row_parallel(b.xmid.data(), x, b.atty.data(), p.proj_w, p.proj_b, W);
  }
  row_parallel_sum(b.xmid.data(), x, p.proj_b);
  norm(b.ln2.data(), b.ln2_mean.data(), b.ln2_rstd.data(), b.xmid.data(), p.ln2_w, p.ln2_b);
  const T* ln2 = every_token(b.ln2.data());
  {
    auto sm = span(ModelOp::kMlp, flops.mlp);
    if (m.gpt) {
      dev.linear_forward(b.up.data(), ln2, w + p.up_w, nullptr, N, D, F);
      dev.bias_gelu_forward(b.act.data(), b.up.data(), w + p.up_b, N, F);
    } else {
      dev.linear_forward(b.up.data(), ln2, w + p.up_w, nullptr, N, D, 2 * F);
      dev.swiglu_forward(b.act.data(), b.up.data(), N, F);
    }
    if (replay) return;  // the output, x[l + 1], is kept
    row_parallel(m.x[l + 1].data(), b.xmid.data(), b.act.data(), p.down_w, p.down_b, F);
  }
  row_parallel_sum(m.x[l + 1].data(), b.xmid.data(), p.down_b);
}

// A block's forward with --tp-overlap (Note [tensor-parallel overlap]): the products that
// read a norm's output run block by block as the ring gathers it, those that write the
// residual stream block by block as the ring reduces them; each block of work is its own
// span (flops of its share of the product).
template <typename Backend>
void TransformerOn<Backend>::block_forward_overlapped(int unit, Timer timer, int step,
                                                      bool replay) {
  Impl& m = *impl_;
  if constexpr (Impl::kTensorParallel) {
    Backend& dev = this->backend();
    const typename Impl::Dims dims = m.dims();
    const auto [B, Tn, D, H, W, F, N, n] = dims;
    const std::size_t local_size = dims.local_size();
    const T* w = this->flat_params().data();
    auto span = [&](ModelOp op, double f) {
      return replay ? dev.section(timer, SpanKind::kBackward, step, unit,
                                  op_name(ModelOp::kRecompute), f)
                    : dev.section(timer, SpanKind::kForward, step, unit, op_name(op), f);
    };
    const auto l = static_cast<std::size_t>(unit - 1);
    auto& b = m.block(l);
    T* att = m.att(l);
    const TransformerOffsets::BlockParams& p = m.block_params[l];
    const T* x = m.x[l].data();
    const T* no_bias = nullptr;
    auto bias = [&](std::size_t offset) { return m.gpt ? w + offset : no_bias; };
    auto norm = [&](T* out, T* mean, T* rstd, const T* inp, std::size_t gain, std::size_t at) {
      auto sn = span(ModelOp::kNorm, 0);
      if (m.gpt) {
        dev.layernorm_forward(out, mean, rstd, inp, w + gain, w + at, n, D);
      } else {
        dev.rmsnorm_forward(out, rstd, inp, w + gain, n, D);
      }
    };
    const int up = m.gpt ? F : 2 * F;

    norm(b.ln1.data(), b.ln1_mean.data(), b.ln1_rstd.data(), x, p.ln1_w, p.ln1_b);
    m.ring_gather(b.ln1.data(), local_size, step, unit, [&](int c, const T* ln1) {
      auto sa = span(ModelOp::kAttention, 2.0 * n * D * 3 * W);
      dev.linear_forward(b.qkv.data() + dims.block(c, 3 * W), ln1, w + p.qkv_w, bias(p.qkv_b), n, D,
                         3 * W);
    });
    {
      auto sa = span(ModelOp::kAttention, 2.0 * (2.0 * N * Tn * W));
      if (!m.gpt) dev.rope_forward(b.qkv.data(), m.rope.data(), B, Tn, W, H);
      dev.attention_forward(b.atty.data(), att, b.qkv.data(), B, Tn, W, H);
    }
    m.ring_reduce_scatter(b.xmid.data(), local_size, step, unit, [&](int c, T* partial) {
      auto sa = span(ModelOp::kAttention, 2.0 * n * W * D);
      dev.linear_forward(partial, b.atty.data() + dims.block(c, W), w + p.proj_w, nullptr, n, W, D);
    });
    {
      auto sr = span(ModelOp::kResidual, 0);
      dev.residual_add(b.xmid.data(), x, bias(p.proj_b), n, D);
    }
    norm(b.ln2.data(), b.ln2_mean.data(), b.ln2_rstd.data(), b.xmid.data(), p.ln2_w, p.ln2_b);
    m.ring_gather(b.ln2.data(), local_size, step, unit, [&](int c, const T* ln2) {
      auto sm = span(ModelOp::kMlp, 2.0 * n * D * up);
      dev.linear_forward(b.up.data() + dims.block(c, up), ln2, w + p.up_w, nullptr, n, D, up);
    });
    {
      auto sm = span(ModelOp::kMlp, 0);
      if (m.gpt) {
        dev.bias_gelu_forward(b.act.data(), b.up.data(), w + p.up_b, N, F);
      } else {
        dev.swiglu_forward(b.act.data(), b.up.data(), N, F);
      }
    }
    if (replay) return;  // the output, x[l + 1], is kept
    T* out = m.x[l + 1].data();
    m.ring_reduce_scatter(out, local_size, step, unit, [&](int c, T* partial) {
      auto sm = span(ModelOp::kMlp, 2.0 * n * F * D);
      dev.linear_forward(partial, b.act.data() + dims.block(c, F), w + p.down_w, nullptr, n, F, D);
    });
    auto sr = span(ModelOp::kResidual, 0);
    dev.residual_add(out, b.xmid.data(), bias(p.down_b), n, D);
  }
}

// A block's backward with --tp-overlap: each gather of an output gradient or a norm's
// output, and each reduce-scatter of an input gradient, overlapped with its product's
// blocks as in forward (block_forward_overlapped). m.dx holds dL/d(the block's output,
// this rank's tokens) and leaves holding dL/d(its input).
template <typename Backend>
template <typename NormBackward>
void TransformerOn<Backend>::block_backward_overlapped(int unit, Timer timer, int step,
                                                       const NormBackward& norm_backward) {
  Impl& m = *impl_;
  if constexpr (Impl::kTensorParallel) {
    Backend& dev = this->backend();
    const typename Impl::Dims dims = m.dims();
    const auto [B, Tn, D, H, W, F, N, n] = dims;
    const std::size_t local_size = dims.local_size();
    const T* w = this->flat_params().data();
    T* g = this->flat_grads().data();
    auto span = [&](ModelOp op, double f) {
      return dev.section(timer, SpanKind::kBackward, step, unit, op_name(op), f);
    };
    const auto l = static_cast<std::size_t>(unit - 1);
    auto& b = m.block(l);
    T* att = m.att(l);
    const TransformerOffsets::BlockParams& p = m.block_params[l];
    T* dx = m.dx.data();
    T* no_bias = nullptr;
    auto dbias = [&](std::size_t offset) { return m.gpt ? g + offset : no_bias; };
    const int up = m.gpt ? F : 2 * F;
    const TransformerFlops flops = transformer_flops(this->spec(), B);

    m.ring_gather(dx, local_size, step, unit, [&](int c, const T* dout) {
      auto sm = span(ModelOp::kMlp, 2.0 * (2.0 * n * F * D));
      dev.linear_backward(m.dact.data() + dims.block(c, F), g + p.down_w, dbias(p.down_b), dout,
                          b.act.data() + dims.block(c, F), w + p.down_w, n, F, D);
    });
    {
      auto sm = span(ModelOp::kMlp, 0);
      if (m.gpt) {
        dev.gelu_bias_backward(m.dup.data(), g + p.up_b, b.up.data(), m.dact.data(), N, F);
      } else {
        dev.swiglu_backward(m.dup.data(), m.dact.data(), b.up.data(), N, F);
      }
    }
    m.ring_gather(b.ln2.data(), local_size, step, unit, [&](int c, const T* ln2) {
      auto sm = span(ModelOp::kMlp, 2.0 * n * D * up);
      dev.linear_backward(nullptr, g + p.up_w, nullptr, m.dup.data() + dims.block(c, up), ln2,
                          w + p.up_w, n, D, up);
    });
    m.ring_reduce_scatter(m.dln_local.data(), local_size, step, unit, [&](int c, T* partial) {
      auto sm = span(ModelOp::kMlp, 2.0 * n * D * up);
      dev.linear_input_grad(partial, m.dup.data() + dims.block(c, up), w + p.up_w, n, D, up);
    });
    norm_backward(dx, dx, m.dln_local.data(), b.xmid.data(), b.ln2_mean.data(), b.ln2_rstd.data(),
                  p.ln2_w, p.ln2_b);
    if (m.recompute == Recompute::kSelective) {
      // The probabilities again, from the kept qkv (atty is rewritten with the same bits).
      const double core = flops.attention - 2.0 * N * D * 4 * W;  // less qkv and proj
      auto sr =
          dev.section(timer, SpanKind::kBackward, step, unit, op_name(ModelOp::kRecompute), core);
      dev.attention_forward(b.atty.data(), att, b.qkv.data(), B, Tn, W, H);
    }
    m.ring_gather(dx, local_size, step, unit, [&](int c, const T* dout) {
      auto sa = span(ModelOp::kAttention, 2.0 * (2.0 * n * W * D));
      dev.linear_backward(m.datty.data() + dims.block(c, W), g + p.proj_w, dbias(p.proj_b), dout,
                          b.atty.data() + dims.block(c, W), w + p.proj_w, n, W, D);
    });
    {
      auto sa = span(ModelOp::kAttention, 2.0 * 2.0 * (2.0 * N * Tn * W));
      dev.attention_backward(m.dqkv.data(), m.att_scratch.data(), m.datty.data(), b.qkv.data(), att,
                             B, Tn, W, H);
      if (!m.gpt) dev.rope_backward(m.dqkv.data(), m.rope.data(), B, Tn, W, H);
    }
    m.ring_gather(b.ln1.data(), local_size, step, unit, [&](int c, const T* ln1) {
      auto sa = span(ModelOp::kAttention, 2.0 * n * D * 3 * W);
      dev.linear_backward(nullptr, g + p.qkv_w, dbias(p.qkv_b),
                          m.dqkv.data() + dims.block(c, 3 * W), ln1, w + p.qkv_w, n, D, 3 * W);
    });
    m.ring_reduce_scatter(m.dln_local.data(), local_size, step, unit, [&](int c, T* partial) {
      auto sa = span(ModelOp::kAttention, 2.0 * n * D * 3 * W);
      dev.linear_input_grad(partial, m.dqkv.data() + dims.block(c, 3 * W), w + p.qkv_w, n, D,
                            3 * W);
    });
    norm_backward(dx, dx, m.dln_local.data(), m.x[l].data(), b.ln1_mean.data(), b.ln1_rstd.data(),
                  p.ln1_w, p.ln1_b);
  }
}

// Note [parallel cross-entropy]: with the vocabulary split, each rank holds its columns of
// the logits and never the whole row. The softmax needs the row's max and sum of
// exponentials, and the loss the target's logit: the ranks gather their row maxima, then
// sum their shifted exponentials and their target logits (zero where another rank holds
// the target) in one all-reduce of 2N values; each rank then normalizes its own columns
// (Megatron-LM's vocab-parallel cross-entropy). The rows' sums add in another order than
// the unsplit model's, so the loss agrees to rounding, not to the bit.
template <typename Impl, typename Backend, typename Section>
double parallel_cross_entropy(Impl& m, Backend& dev, const Section& section, int step, int tag) {
  const int N = m.dims().N, C = m.shard.vocab;
  const auto n = static_cast<std::size_t>(N);
  {
    auto s0 = section();
    dev.cross_entropy_row_max(m.ce_max.data(), m.logits.data(), N, C);
  }
  m.group().allgather({m.ce_max.data(), n}, {m.ce_maxes.data(), n * m.shard.ranks}, step, tag);
  {
    auto s1 = section();
    for (std::size_t i = 0; i < n; ++i) {
      for (int r = 0; r < m.shard.ranks; ++r) {
        m.ce_max[i] = std::max(m.ce_max[i], m.ce_maxes[static_cast<std::size_t>(r) * n + i]);
      }
    }
    dev.cross_entropy_exp_sums(m.logits.data(), m.ce_stats.data(), m.logits.data(), m.ce_max.data(),
                               m.targets.data(), N, C, m.shard.vocab_begin);
  }
  m.tp_allreduce(m.ce_stats.data(), 2 * n, step, tag);
  auto s2 = section();
  return dev.cross_entropy_columns_finish(m.logits.data(), m.ce_stats.data(), m.ce_max.data(), N,
                                          C);
}

template <typename Backend>
auto TransformerOn<Backend>::forward_loss(Timer timer, int step) -> LossValue {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);
  const TransformerShape& s = this->spec().transformer;
  Backend& dev = this->backend();
  auto section = [&] {
    return dev.section(timer, SpanKind::kForward, step, this->units(), op_name(ModelOp::kLoss), 0);
  };
  if (m.split()) {
    if constexpr (Impl::kTensorParallel) {
      return parallel_cross_entropy(m, dev, section, step, this->units());
    }
  }
  auto span = section();
  return dev.cross_entropy_forward(m.logits.data(), m.logits.data(), m.targets.data(),
                                   m.rows * s.seq, s.vocab);
}

template <typename Backend>
void TransformerOn<Backend>::backward_loss(Timer timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);
  const TransformerShape& s = this->spec().transformer;
  auto span = this->backend().section(timer, SpanKind::kBackward, step, this->units(),
                                      op_name(ModelOp::kLoss), 0);
  if (m.split()) {
    if constexpr (Impl::kTensorParallel) {
      this->backend().cross_entropy_backward_columns(m.logits.data(), m.logits.data(),
                                                     m.targets.data(), m.rows * s.seq,
                                                     m.shard.vocab, m.shard.vocab_begin);
    }
  } else {
    this->backend().cross_entropy_backward(m.logits.data(), m.logits.data(), m.targets.data(),
                                           m.rows * s.seq, s.vocab);
  }
  m.next_backward = this->units() - 1;
}

template <typename Backend>
void TransformerOn<Backend>::backward_unit(int unit, Timer timer, int step) {
  Impl& m = *impl_;
  Backend& dev = this->backend();
  TANDEM_CHECK_EQ(unit, m.next_backward);  // backward_loss, then units last..0
  TANDEM_CHECK(m.owned[static_cast<std::size_t>(unit)]);
  m.next_backward = unit - 1;
  const TransformerShape& s = this->spec().transformer;
  // This rank's share with tensor parallelism (block_forward); the whole model without.
  const int B = m.rows, Tn = s.seq, D = s.dim, H = m.shard.heads, W = m.shard.width,
            F = m.shard.hidden, V = m.shard.vocab, L = s.layers;
  const int N = B * Tn;
  const T* w = this->flat_params().data();
  T* g = this->flat_grads().data();
  // Sequence parallelism: the norm and residual regions are this rank's n tokens (Note
  // [sequence parallelism]); all N without.
  const int n = static_cast<int>(m.shard.local(static_cast<std::size_t>(N)));
  const std::size_t local_size = static_cast<std::size_t>(n) * D;
  // Split, the input gradient of a column-parallel product (qkv, the MLP's up, the head) is
  // each rank's part of the sum: all-reduced before the norm below it reads it (Note
  // [tensor-parallel layout]), or reduce-scattered to this rank's tokens. Returns where
  // the norm's output gradient is.
  auto column_parallel_sum = [&]() -> const T* {
    if (m.sequence()) {
      m.tp_scatter(m.dln.data(), m.dln_local.data(), local_size, step, unit);
      return m.dln_local.data();
    }
    if (m.split()) m.tp_allreduce(m.dln.data(), static_cast<std::size_t>(N) * D, step, unit);
    return m.dln.data();
  };
  // Every token's rows of a local [n, D] tensor (Impl::every_token).
  auto every_token = [&](const T* local) { return m.every_token(local, n, step, unit); };
  const TransformerFlops flops = transformer_flops(this->spec(), B);
  auto span = [&](ModelOp op, double f) {
    return dev.section(timer, SpanKind::kBackward, step, unit, op_name(op), 2 * f);
  };
  // A norm's backward on this rank's tokens: dinp = dresidual + dL/dinp. With sequence
  // parallelism its gain's and bias's gradients are this rank's tokens' share: computed
  // apart, summed over the group, then added to the unit's.
  auto norm_backward = [&](T* dinp, const T* dresidual, const T* dout, const T* inp, const T* mean,
                           const T* rstd, std::size_t gain, std::size_t bias) {
    T* dgain = g + gain;
    T* dbias_at = g + bias;
    if constexpr (Impl::kTensorParallel) {
      if (m.sequence()) {
        std::fill(m.norm_grads.begin(), m.norm_grads.end(), T(0));
        dgain = m.norm_grads.data();
        dbias_at = m.norm_grads.data() + D;
      }
    }
    {
      auto sn = span(ModelOp::kNorm, 0);
      if (m.gpt) {
        dev.layernorm_backward(dinp, dgain, dbias_at, dresidual, dout, inp, w + gain, mean, rstd, n,
                               D);
      } else {
        dev.rmsnorm_backward(dinp, dgain, dresidual, dout, inp, w + gain, rstd, n, D);
      }
    }
    if (!m.sequence()) return;
    if constexpr (Impl::kTensorParallel) {
      const std::size_t count = m.gpt ? 2 * static_cast<std::size_t>(D) : D;
      m.tp_allreduce(m.norm_grads.data(), count, step, unit);
      for (int i = 0; i < D; ++i) g[gain + static_cast<std::size_t>(i)] += m.norm_grads[i];
      if (m.gpt) {
        for (int i = 0; i < D; ++i) g[bias + static_cast<std::size_t>(i)] += m.norm_grads[D + i];
      }
    }
  };

  if (unit == 0) {
    if (m.split()) {  // each rank its vocabulary rows; the positions are everyone's
      if constexpr (Impl::kTensorParallel) {
        // Every token's output gradient: gathered with sequence parallelism, with
        // --tp-overlap on a ring, each block's rows accumulated while the next travels.
        auto embedding = [&](const T* dout, int first, int rows) {
          auto s0 = span(ModelOp::kEmbedding, 0);
          dev.vocab_embedding_backward(g + m.wte, dout, m.inputs.data() + first, rows, D,
                                       m.shard.vocab_begin, V);
          if (m.gpt) dev.positions_backward(g + m.wpe, dout, first, rows, Tn, D);
        };
        if (m.overlap()) {
          m.ring_gather(m.dx.data(), local_size, step, unit,
                        [&](int c, const T* dout) { embedding(dout, c * n, n); });
        } else {
          embedding(every_token(m.dx.data()), 0, N);
        }
      }
      return;
    }
    auto s0 = span(ModelOp::kEmbedding, 0);
    dev.embedding_backward(g + m.wte, m.gpt ? g + m.wpe : nullptr, m.dx.data(), m.inputs.data(), B,
                           Tn, D);
    return;
  }
  if (unit == L + 1 && m.overlap()) {
    if constexpr (Impl::kTensorParallel) {
      // --tp-overlap: the norm's output gathered again on a ring for the weight's gradient,
      // then the input gradient reduce-scattered on another, block by block.
      const typename Impl::Dims dims = m.dims();
      const double product = static_cast<double>(n) * D * V;  // span() doubles: 2 n D V
      m.ring_gather(m.lnf.data(), local_size, step, unit, [&](int c, const T* lnf) {
        auto s2 = span(ModelOp::kHead, product);
        const T* dlogits = m.logits.data() + dims.block(c, V);
        if (m.gpt) {
          dev.linear_transposed_backward(nullptr, g + m.wte, dlogits, lnf, w + m.wte, n, D, V);
        } else {
          dev.linear_backward(nullptr, g + m.head_w, nullptr, dlogits, lnf, w + m.head_w, n, D, V);
        }
      });
      m.ring_reduce_scatter(m.dln_local.data(), local_size, step, unit, [&](int c, T* partial) {
        auto s2 = span(ModelOp::kHead, product);
        const T* dlogits = m.logits.data() + dims.block(c, V);
        if (m.gpt) {  // dlnf = dlogits . wte, wte [V, D]
          dev.linear_forward(partial, dlogits, w + m.wte, nullptr, n, V, D);
        } else {
          dev.linear_input_grad(partial, dlogits, w + m.head_w, n, D, V);
        }
      });
      norm_backward(m.dx.data(), nullptr, m.dln_local.data(), m.x[L].data(), m.lnf_mean.data(),
                    m.lnf_rstd.data(), m.lnf_w, m.lnf_b);
    }
    return;
  }
  if (unit == L + 1) {
    const T* lnf = every_token(m.lnf.data());  // gathered again for the weight's gradient
    {
      auto s2 = span(ModelOp::kHead, flops.head);
      if (m.gpt) {
        dev.linear_transposed_backward(m.dln.data(), g + m.wte, m.logits.data(), lnf, w + m.wte, N,
                                       D, V);
      } else {
        dev.linear_backward(m.dln.data(), g + m.head_w, nullptr, m.logits.data(), lnf, w + m.head_w,
                            N, D, V);
      }
    }
    const T* dlnf = column_parallel_sum();
    norm_backward(m.dx.data(), nullptr, dlnf, m.x[L].data(), m.lnf_mean.data(), m.lnf_rstd.data(),
                  m.lnf_w, m.lnf_b);
    return;
  }

  // A block: m.dx holds dL/d(its output); it leaves holding dL/d(its input).
  if (m.skips(unit)) return;  // --layer-drop: the identity passes dx through unchanged
  const auto l = static_cast<std::size_t>(unit - 1);
  if (m.recompute == Recompute::kFull) block_forward(unit, timer, step, /*replay=*/true);
  auto& b = m.block(l);
  T* att = m.att(l);
  const TransformerOffsets::BlockParams& p = m.block_params[l];
  T* dx = m.dx.data();
  T* no_bias = nullptr;
  auto dbias = [&](std::size_t offset) { return m.gpt ? g + offset : no_bias; };

  if (m.overlap()) {
    block_backward_overlapped(unit, timer, step, norm_backward);
    return;
  }
  // The products that read a norm's output (qkv, up) need every token's: with sequence
  // parallelism it is gathered again, between two spans of the part.
  auto up_backward = [&](const T* ln2) {
    dev.linear_backward(m.dln.data(), g + p.up_w, nullptr, m.dup.data(), ln2, w + p.up_w, N, D,
                        m.gpt ? F : 2 * F);
  };
  {
    // The down projection's output gradient, every token's: its bias gradient is then the
    // same on every rank.
    const T* dout = every_token(dx);
    auto sm = span(ModelOp::kMlp, flops.mlp);
    dev.linear_backward(m.dact.data(), g + p.down_w, dbias(p.down_b), dout, b.act.data(),
                        w + p.down_w, N, F, D);
    if (m.gpt) {
      dev.gelu_bias_backward(m.dup.data(), g + p.up_b, b.up.data(), m.dact.data(), N, F);
    } else {
      dev.swiglu_backward(m.dup.data(), m.dact.data(), b.up.data(), N, F);
    }
    if (!m.sequence()) up_backward(b.ln2.data());
  }
  if (m.sequence()) {
    const T* ln2 = every_token(b.ln2.data());
    auto sm = span(ModelOp::kMlp, 0);
    up_backward(ln2);
  }
  norm_backward(dx, dx, column_parallel_sum(), b.xmid.data(), b.ln2_mean.data(), b.ln2_rstd.data(),
                p.ln2_w, p.ln2_b);
  {
    if (m.recompute == Recompute::kSelective) {
      // The probabilities again, from the kept qkv (atty is rewritten with the same bits).
      const double core = flops.attention - 2.0 * N * D * 4 * W;  // less qkv and proj
      auto sr =
          dev.section(timer, SpanKind::kBackward, step, unit, op_name(ModelOp::kRecompute), core);
      dev.attention_forward(b.atty.data(), att, b.qkv.data(), B, Tn, W, H);
    }
    auto qkv_backward = [&](const T* ln1) {
      dev.linear_backward(m.dln.data(), g + p.qkv_w, dbias(p.qkv_b), m.dqkv.data(), ln1,
                          w + p.qkv_w, N, D, 3 * W);
    };
    const T* dout = every_token(dx);
    {
      auto sa = span(ModelOp::kAttention, flops.attention);
      dev.linear_backward(m.datty.data(), g + p.proj_w, dbias(p.proj_b), dout, b.atty.data(),
                          w + p.proj_w, N, W, D);
      dev.attention_backward(m.dqkv.data(), m.att_scratch.data(), m.datty.data(), b.qkv.data(), att,
                             B, Tn, W, H);
      if (!m.gpt) dev.rope_backward(m.dqkv.data(), m.rope.data(), B, Tn, W, H);
      if (!m.sequence()) qkv_backward(b.ln1.data());
    }
    if (m.sequence()) {
      const T* ln1 = every_token(b.ln1.data());
      auto sa = span(ModelOp::kAttention, 0);
      qkv_backward(ln1);
    }
  }
  norm_backward(dx, dx, column_parallel_sum(), m.x[l].data(), b.ln1_mean.data(), b.ln1_rstd.data(),
                p.ln1_w, p.ln1_b);
}

template <typename Backend>
auto TransformerOn<Backend>::forward(const Tokens& batch, Timer timer, int step) -> LossValue {
  set_input(batch);
  for (int u = 0; u < this->units(); ++u) forward_unit(u, timer, step);
  return forward_loss(timer, step);
}

template <typename Backend>
void TransformerOn<Backend>::backward(Timer timer, int step) {
  backward_loss(timer, step);
  for (int u = this->units() - 1; u >= 0; --u) backward_unit(u, timer, step);
}

}  // namespace tandem
