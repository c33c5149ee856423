// BasicTransformer: composes the kernels of layers.h over the flat layout (transformer.h).
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "compute/cpu/blas.h"
#include "core/error.h"
#include "model/activation_slots.h"
#include "model/layers.h"
#include "model/model_ops.h"

namespace tandem {

// Note [Transformer buffers]
// What backward needs from forward is kept per block: the block's input x (the residual
// stream; x[L] is the last block's output, the final norm's input), the two norms'
// outputs and statistics, qkv (after rope for llama), the attention probabilities
// [B, H, T, T], the heads' output before the projection, the stream after attention
// (xmid), and the MLP's inner activations (gpt: before and after GELU; llama: gate|up and
// silu(gate) * up). Backward runs on shared scratch: dx is the stream's gradient, carried
// from the head down to the embedding, updated in place by each residual branch.
namespace {

// Note [activation slots]: what one micro-batch keeps from its forward to its backward.
// A whole model keeps one; a pipeline stage (configure_stage) keeps one per micro-batch in
// flight, holding only its units' tensors, and select_slot swaps the current one with a
// parked one (vector swaps: nothing is copied).
template <typename T>
struct TransformerActs {
  struct Block {
    std::vector<T> ln1, ln1_mean, ln1_rstd;  // llama: rms norm (mean unused)
    std::vector<T> qkv, att, atty, xmid;
    std::vector<T> ln2, ln2_mean, ln2_rstd;
    std::vector<T> up;   // gpt: fc output [N, F]; llama: gate|up [N, 2F]
    std::vector<T> act;  // gpt: GELU(fc); llama: silu(gate) * up; [N, F]
  };
  int rows = 0;                       // sequences of the last set_input; 0 before the first
  std::vector<std::int32_t> inputs;   // [B, T]
  std::vector<std::int32_t> targets;  // [B, T]
  std::vector<std::vector<T>> x;      // L + 1 residual streams [N, D]
  std::vector<Block> blocks;
  std::vector<T> lnf, lnf_mean, lnf_rstd;
  std::vector<T> logits;  // [N, V]; probabilities after forward_loss, then dlogits

  std::int64_t bytes() const {
    std::int64_t n = 0;
    auto add = [&](const auto& v) {
      n += static_cast<std::int64_t>(v.size() * sizeof(typename std::decay_t<decltype(v)>::value_type));
    };
    add(inputs);
    add(targets);
    for (const auto& v : x) add(v);
    for (const Block& b : blocks) {
      for (const auto* v : {&b.ln1, &b.ln1_mean, &b.ln1_rstd, &b.qkv, &b.att, &b.atty, &b.xmid,
                            &b.ln2, &b.ln2_mean, &b.ln2_rstd, &b.up, &b.act}) {
        add(*v);
      }
    }
    for (const auto* v : {&lnf, &lnf_mean, &lnf_rstd, &logits}) add(*v);
    return n;
  }
};

}  // namespace

template <typename T>
struct BasicTransformer<T>::Impl : TransformerOffsets, TransformerActs<T> {
  using Block = typename TransformerActs<T>::Block;
  // One block's parameters, resolved from the layout once.
  int max_batch = 0;
  bool gpt = true;
  std::vector<T> rope;  // llama: [T, hd/2, 2]
  // Backward scratch.
  std::vector<T> dx, dln, dqkv, datty, dup, dact, att_scratch;
  int next_backward = -1;  // the unit backward_unit expects next (-1: none)
  // Pipeline stages (Note [activation slots]): the units this model runs (all unless
  // configure_stage said otherwise), and the other slots' activations.
  std::vector<bool> owned;
  ActivationSlots<TransformerActs<T>> slots;

  TransformerActs<T>& acts() { return *this; }
};

namespace {

template <typename T>
void resize(std::vector<T>& v, std::size_t n) {
  v.assign(n, T(0));
}

// Sizes `a` for max_batch sequences and the units in `owned` (Note [activation slots]):
// a unit's own tensors, the stream it reads (x[u - 1]) and the one it writes (x[u]).
template <typename T>
void allocate_acts(TransformerActs<T>& a, const ModelSpec& spec, int max_batch,
                   const std::vector<bool>& owned) {
  const TransformerShape& s = spec.transformer;
  const bool gpt = spec.kind == ModelKind::kGpt;
  const auto n = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(s.seq);
  const auto D = static_cast<std::size_t>(s.dim), F = static_cast<std::size_t>(s.hidden);
  const auto L = static_cast<std::size_t>(s.layers);
  auto own = [&](std::size_t unit) { return unit < owned.size() && owned[unit]; };
  auto sized = [](std::vector<T>& v, std::size_t size, bool keep) {
    if (keep) {
      v.assign(size, T(0));
    } else {
      std::vector<T>().swap(v);
    }
  };
  a.rows = 0;
  a.inputs.assign(n, 0);
  a.targets.assign(n, 0);
  a.x.resize(L + 1);
  for (std::size_t i = 0; i <= L; ++i) sized(a.x[i], n * D, own(i) || own(i + 1));
  a.blocks.resize(L);
  for (std::size_t l = 0; l < L; ++l) {
    typename TransformerActs<T>::Block& b = a.blocks[l];
    const bool keep = own(l + 1);
    sized(b.ln1, n * D, keep);
    sized(b.ln1_mean, n, keep);
    sized(b.ln1_rstd, n, keep);
    sized(b.qkv, n * 3 * D, keep);
    sized(b.att, static_cast<std::size_t>(max_batch) * s.heads * s.seq * s.seq, keep);
    sized(b.atty, n * D, keep);
    sized(b.xmid, n * D, keep);
    sized(b.ln2, n * D, keep);
    sized(b.ln2_mean, n, keep);
    sized(b.ln2_rstd, n, keep);
    sized(b.up, n * (gpt ? F : 2 * F), keep);
    sized(b.act, n * F, keep);
  }
  const bool head = own(L + 1);
  sized(a.lnf, n * D, head);
  sized(a.lnf_mean, n, head);
  sized(a.lnf_rstd, n, head);
  sized(a.logits, n * static_cast<std::size_t>(s.vocab), head);
}

}  // namespace

template <typename T>
BasicTransformer<T>::BasicTransformer(const ModelSpec& spec, int max_batch, std::uint64_t seed,
                                      LayoutOptions layout)
    : layout_(spec, layout), impl_(std::make_unique<Impl>()) {
  TANDEM_CHECK(spec.is_transformer());
  const TransformerShape& s = spec.transformer;
  const std::int64_t N = transformer_batch_tokens(spec, max_batch);
  Impl& m = *impl_;
  m.max_batch = max_batch;
  m.gpt = spec.kind == ModelKind::kGpt;
  params_ = flat_array<T>(layout_);
  grads_ = flat_array<T>(layout_);
  if constexpr (std::is_same_v<T, float>) {
    layout_.initialize(params_, seed);
  } else {
    std::vector<float> init(layout_.numel());
    layout_.initialize(init, seed);
    std::copy(init.begin(), init.end(), params_.begin());
  }

  const auto n = static_cast<std::size_t>(N);
  const auto D = static_cast<std::size_t>(s.dim), F = static_cast<std::size_t>(s.hidden);
  m.owned.assign(static_cast<std::size_t>(units()), true);
  allocate_acts(m.acts(), spec, max_batch, m.owned);
  resize(m.dx, n * D);
  resize(m.dln, n * D);
  resize(m.dqkv, n * 3 * D);
  resize(m.datty, n * D);
  resize(m.dup, n * (m.gpt ? F : 2 * F));
  resize(m.dact, n * F);
  resize(m.att_scratch, static_cast<std::size_t>(s.seq) * s.seq);
  if (!m.gpt) {
    resize(m.rope, static_cast<std::size_t>(s.seq) * s.head_dim());
    layers::Ops<T>::rope_table(m.rope.data(), s.seq, s.head_dim());
  }

  static_cast<TransformerOffsets&>(m) = transformer_offsets(layout_);
}

template <typename T>
std::int64_t BasicTransformer<T>::buffer_bytes(const ModelSpec& spec, int max_batch) {
  // As the constructor allocates them (Note [Transformer buffers]), per token.
  const TransformerShape& s = spec.transformer;
  const std::int64_t D = s.dim, F = s.hidden, up = spec.kind == ModelKind::kGpt ? F : 2 * F;
  const std::int64_t per_block =
      6 * D + 4 + 3 * D + static_cast<std::int64_t>(s.heads) * s.seq + up + F;
  const std::int64_t scratch = 3 * D + 3 * D + up + F;
  const std::int64_t per_token =
      (s.layers + 1) * D + s.layers * per_block + D + 2 + s.vocab + scratch;
  const std::int64_t tokens = static_cast<std::int64_t>(max_batch) * s.seq;
  return static_cast<std::int64_t>(sizeof(T)) *
             (tokens * per_token + static_cast<std::int64_t>(s.seq) * (s.seq + s.head_dim())) +
         tokens * 2 * static_cast<std::int64_t>(sizeof(std::int32_t));
}

template <typename T>
BasicTransformer<T>::~BasicTransformer() = default;
template <typename T>
BasicTransformer<T>::BasicTransformer(BasicTransformer&&) noexcept = default;
template <typename T>
BasicTransformer<T>& BasicTransformer<T>::operator=(BasicTransformer&&) noexcept = default;

template <typename T>
void BasicTransformer<T>::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), T(0));
}

template <typename T>
void BasicTransformer<T>::configure_stage(const std::vector<bool>& owned, int slots) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(owned.size(), static_cast<std::size_t>(units()));
  TANDEM_CHECK(slots >= 1);
  m.owned = owned;
  allocate_acts(m.acts(), spec(), m.max_batch, owned);
  m.slots.configure(slots,
                    [&](TransformerActs<T>& a) { allocate_acts(a, spec(), m.max_batch, owned); });
  m.next_backward = -1;
}

template <typename T>
void BasicTransformer<T>::select_slot(int slot) {
  impl_->slots.select(impl_->acts(), slot);
}

template <typename T>
std::span<T> BasicTransformer<T>::unit_input(int unit, int slot) {
  Impl& m = *impl_;
  TANDEM_CHECK(unit >= 1 && unit < units());
  std::vector<T>& x = m.slots.of(m.acts(), slot).x[static_cast<std::size_t>(unit - 1)];
  TANDEM_CHECK(!x.empty());  // a unit of this stage, or the one after it
  return x;
}

template <typename T>
void BasicTransformer<T>::begin_backward(int unit, std::span<const T> output_grad) {
  Impl& m = *impl_;
  TANDEM_CHECK(unit >= 0 && unit < units() - 1);  // the head starts from the loss
  TANDEM_CHECK_EQ(output_grad.size(), m.dx.size());
  std::copy(output_grad.begin(), output_grad.end(), m.dx.begin());
  m.next_backward = unit;
}

template <typename T>
std::span<const T> BasicTransformer<T>::input_grad(int unit) const {
  const Impl& m = *impl_;
  TANDEM_CHECK(unit >= 1 && unit < units() && m.next_backward == unit - 1);
  return m.dx;
}

template <typename T>
std::int64_t BasicTransformer<T>::activation_bytes() const {
  return const_cast<Impl&>(*impl_).acts().bytes();
}

template <typename T>
std::span<const T> BasicTransformer<T>::logits() const {
  const Impl& m = *impl_;
  return {m.logits.data(),
          static_cast<std::size_t>(m.rows) * spec().transformer.seq * spec().transformer.vocab};
}

template <typename T>
void BasicTransformer<T>::set_input(const TokenBatch& batch) {
  Impl& m = *impl_;
  const int Tn = spec().transformer.seq, V = spec().transformer.vocab;
  TANDEM_CHECK(batch.rows >= 1 && batch.rows <= m.max_batch);
  TANDEM_CHECK(batch.tokens.size() >= static_cast<std::size_t>(batch.rows) * (Tn + 1));
  for (int b = 0; b < batch.rows; ++b) {
    const std::int32_t* seq = batch.tokens.data() + static_cast<std::ptrdiff_t>(b) * (Tn + 1);
    for (int t = 0; t <= Tn; ++t) TANDEM_CHECK(seq[t] >= 0 && seq[t] < V);
    std::copy_n(seq, Tn, m.inputs.data() + static_cast<std::ptrdiff_t>(b) * Tn);
    std::copy_n(seq + 1, Tn, m.targets.data() + static_cast<std::ptrdiff_t>(b) * Tn);
  }
  m.rows = batch.rows;
  m.next_backward = -1;
}

std::int64_t transformer_batch_tokens(const ModelSpec& spec, int max_batch) {
  const TransformerShape& s = spec.transformer;
  if (max_batch < 1) {
    throw UsageError("model '" + spec.text + "': batch must be >= 1 (got " +
                     std::to_string(max_batch) + ")");
  }
  const std::int64_t tokens = static_cast<std::int64_t>(max_batch) * s.seq;
  if (tokens * std::max({s.vocab, 3 * s.dim, 2 * s.hidden}) > std::numeric_limits<int>::max()) {
    throw UsageError("model '" + spec.text + "': batch " + std::to_string(max_batch) + " x seq " +
                     std::to_string(s.seq) + " is too large for one matrix product");
  }
  return tokens;
}

TransformerFlops transformer_flops(const ModelSpec& spec, int rows) {
  const TransformerShape& s = spec.transformer;
  const double N = static_cast<double>(rows) * s.seq, D = s.dim, F = s.hidden;
  const double Tn = s.seq;
  const int up = spec.kind == ModelKind::kGpt ? 1 : 2;
  return {.attention = 2 * N * D * 3 * D + 2 * N * D * D + 2 * (2 * N * Tn * D),
          .mlp = 2 * N * D * F * up + 2 * N * F * D,
          .head = 2 * N * D * s.vocab};
}

template <typename T>
void BasicTransformer<T>::forward_unit(int unit, RankRecorder& recorder, int step) {
  using Ops = layers::Ops<T>;
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);  // set_input() first
  TANDEM_CHECK(unit >= 0 && unit < units() && m.owned[static_cast<std::size_t>(unit)]);
  const TransformerShape& s = spec().transformer;
  const int B = m.rows, Tn = s.seq, D = s.dim, H = s.heads, F = s.hidden, L = s.layers;
  const int N = B * Tn;
  const T* w = params_.data();
  const TransformerFlops flops = transformer_flops(spec(), B);
  auto span = [&](ModelOp op, double f) {
    return ScopedSpan(recorder, Lane::kCompute, SpanKind::kForward, step, unit, op_name(op), f);
  };

  if (unit == 0) {
    auto s0 = span(ModelOp::kEmbedding, 0);
    Ops::embedding_forward(m.x[0].data(), m.inputs.data(), w + m.wte, m.gpt ? w + m.wpe : nullptr,
                           B, Tn, D);
    return;
  }
  if (unit == L + 1) {
    {
      auto s1 = span(ModelOp::kNorm, 0);
      if (m.gpt) {
        Ops::layernorm_forward(m.lnf.data(), m.lnf_mean.data(), m.lnf_rstd.data(), m.x[L].data(),
                               w + m.lnf_w, w + m.lnf_b, N, D);
      } else {
        Ops::rmsnorm_forward(m.lnf.data(), m.lnf_rstd.data(), m.x[L].data(), w + m.lnf_w, N, D);
      }
    }
    auto s2 = span(ModelOp::kHead, flops.head);
    if (m.gpt) {
      // Tied: logits [N, V] = lnf [N, D] . wte^T [D, V].
      gemm(false, true, N, s.vocab, D, T(1), m.lnf.data(), D, w + m.wte, D, T(0), m.logits.data(),
           s.vocab);
    } else {
      Ops::linear_forward(m.logits.data(), m.lnf.data(), w + m.head_w, nullptr, N, D, s.vocab);
    }
    return;
  }

  const auto l = static_cast<std::size_t>(unit - 1);
  typename Impl::Block& b = m.blocks[l];
  const TransformerOffsets::BlockParams& p = m.block_params[l];
  const T* x = m.x[l].data();
  auto norm = [&](T* out, T* mean, T* rstd, const T* inp, std::size_t gain, std::size_t bias) {
    auto sn = span(ModelOp::kNorm, 0);
    if (m.gpt) {
      Ops::layernorm_forward(out, mean, rstd, inp, w + gain, w + bias, N, D);
    } else {
      Ops::rmsnorm_forward(out, rstd, inp, w + gain, N, D);
    }
  };
  const T* no_bias = nullptr;
  auto bias = [&](std::size_t offset) { return m.gpt ? w + offset : no_bias; };

  norm(b.ln1.data(), b.ln1_mean.data(), b.ln1_rstd.data(), x, p.ln1_w, p.ln1_b);
  {
    auto sa = span(ModelOp::kAttention, flops.attention);
    Ops::linear_forward(b.qkv.data(), b.ln1.data(), w + p.qkv_w, bias(p.qkv_b), N, D, 3 * D);
    if (!m.gpt) Ops::rope_forward(b.qkv.data(), m.rope.data(), B, Tn, D, H);
    Ops::attention_forward(b.atty.data(), b.att.data(), b.qkv.data(), B, Tn, D, H);
    Ops::linear_residual_forward(b.xmid.data(), x, b.atty.data(), w + p.proj_w, bias(p.proj_b), N,
                                 D, D);
  }
  norm(b.ln2.data(), b.ln2_mean.data(), b.ln2_rstd.data(), b.xmid.data(), p.ln2_w, p.ln2_b);
  auto sm = span(ModelOp::kMlp, flops.mlp);
  if (m.gpt) {
    Ops::linear_forward(b.up.data(), b.ln2.data(), w + p.up_w, nullptr, N, D, F);
    Ops::bias_gelu_forward(b.act.data(), b.up.data(), w + p.up_b, N, F);
  } else {
    Ops::linear_forward(b.up.data(), b.ln2.data(), w + p.up_w, nullptr, N, D, 2 * F);
    Ops::swiglu_forward(b.act.data(), b.up.data(), N, F);
  }
  Ops::linear_residual_forward(m.x[l + 1].data(), b.xmid.data(), b.act.data(), w + p.down_w,
                               bias(p.down_b), N, F, D);
}

template <typename T>
double BasicTransformer<T>::forward_loss(RankRecorder& recorder, int step) {
  Impl& m = *impl_;
  const TransformerShape& s = spec().transformer;
  ScopedSpan span(recorder, Lane::kCompute, SpanKind::kForward, step, units(),
                  op_name(ModelOp::kLoss));
  return layers::Ops<T>::cross_entropy_forward(m.logits.data(), m.logits.data(), m.targets.data(),
                                               m.rows * s.seq, s.vocab);
}

template <typename T>
void BasicTransformer<T>::backward_loss(RankRecorder& recorder, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);
  const TransformerShape& s = spec().transformer;
  ScopedSpan span(recorder, Lane::kCompute, SpanKind::kBackward, step, units(),
                  op_name(ModelOp::kLoss));
  layers::Ops<T>::cross_entropy_backward(m.logits.data(), m.logits.data(), m.targets.data(),
                                         m.rows * s.seq, s.vocab);
  m.next_backward = units() - 1;
}

template <typename T>
void BasicTransformer<T>::backward_unit(int unit, RankRecorder& recorder, int step) {
  using Ops = layers::Ops<T>;
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(unit, m.next_backward);  // backward_loss, then units last..0
  TANDEM_CHECK(m.owned[static_cast<std::size_t>(unit)]);
  m.next_backward = unit - 1;
  const TransformerShape& s = spec().transformer;
  const int B = m.rows, Tn = s.seq, D = s.dim, H = s.heads, F = s.hidden, L = s.layers;
  const int N = B * Tn;
  const T* w = params_.data();
  T* g = grads_.data();
  const TransformerFlops flops = transformer_flops(spec(), B);
  auto span = [&](ModelOp op, double f) {
    return ScopedSpan(recorder, Lane::kCompute, SpanKind::kBackward, step, unit, op_name(op),
                      2 * f);
  };

  if (unit == 0) {
    auto s0 = span(ModelOp::kEmbedding, 0);
    Ops::embedding_backward(g + m.wte, m.gpt ? g + m.wpe : nullptr, m.dx.data(), m.inputs.data(), B,
                            Tn, D);
    return;
  }
  if (unit == L + 1) {
    {
      auto s2 = span(ModelOp::kHead, flops.head);
      if (m.gpt) {
        // dlnf [N, D] = dlogits [N, V] . wte [V, D]; dwte [V, D] += dlogits^T . lnf.
        gemm(false, false, N, D, s.vocab, T(1), m.logits.data(), s.vocab, w + m.wte, D, T(0),
             m.dln.data(), D);
        gemm(true, false, s.vocab, D, N, T(1), m.logits.data(), s.vocab, m.lnf.data(), D, T(1),
             g + m.wte, D);
      } else {
        Ops::linear_backward(m.dln.data(), g + m.head_w, nullptr, m.logits.data(), m.lnf.data(),
                             w + m.head_w, N, D, s.vocab);
      }
    }
    auto s1 = span(ModelOp::kNorm, 0);
    if (m.gpt) {
      Ops::layernorm_backward(m.dx.data(), g + m.lnf_w, g + m.lnf_b, nullptr, m.dln.data(),
                              m.x[L].data(), w + m.lnf_w, m.lnf_mean.data(), m.lnf_rstd.data(), N,
                              D);
    } else {
      Ops::rmsnorm_backward(m.dx.data(), g + m.lnf_w, nullptr, m.dln.data(), m.x[L].data(),
                            w + m.lnf_w, m.lnf_rstd.data(), N, D);
    }
    return;
  }

  // A block: m.dx holds dL/d(its output); it leaves holding dL/d(its input).
  const auto l = static_cast<std::size_t>(unit - 1);
  typename Impl::Block& b = m.blocks[l];
  const TransformerOffsets::BlockParams& p = m.block_params[l];
  T* dx = m.dx.data();
  T* no_bias = nullptr;
  auto dbias = [&](std::size_t offset) { return m.gpt ? g + offset : no_bias; };
  auto norm_backward = [&](const T* inp, const T* mean, const T* rstd, std::size_t gain,
                           std::size_t bias) {
    auto sn = span(ModelOp::kNorm, 0);
    if (m.gpt) {
      Ops::layernorm_backward(dx, g + gain, g + bias, dx, m.dln.data(), inp, w + gain, mean, rstd,
                              N, D);
    } else {
      Ops::rmsnorm_backward(dx, g + gain, dx, m.dln.data(), inp, w + gain, rstd, N, D);
    }
  };

  {
    auto sm = span(ModelOp::kMlp, flops.mlp);
    Ops::linear_backward(m.dact.data(), g + p.down_w, dbias(p.down_b), dx, b.act.data(),
                         w + p.down_w, N, F, D);
    if (m.gpt) {
      Ops::gelu_bias_backward(m.dup.data(), g + p.up_b, b.up.data(), m.dact.data(), N, F);
      Ops::linear_backward(m.dln.data(), g + p.up_w, nullptr, m.dup.data(), b.ln2.data(),
                           w + p.up_w, N, D, F);
    } else {
      Ops::swiglu_backward(m.dup.data(), m.dact.data(), b.up.data(), N, F);
      Ops::linear_backward(m.dln.data(), g + p.up_w, nullptr, m.dup.data(), b.ln2.data(),
                           w + p.up_w, N, D, 2 * F);
    }
  }
  norm_backward(b.xmid.data(), b.ln2_mean.data(), b.ln2_rstd.data(), p.ln2_w, p.ln2_b);
  {
    auto sa = span(ModelOp::kAttention, flops.attention);
    Ops::linear_backward(m.datty.data(), g + p.proj_w, dbias(p.proj_b), dx, b.atty.data(),
                         w + p.proj_w, N, D, D);
    Ops::attention_backward(m.dqkv.data(), m.att_scratch.data(), m.datty.data(), b.qkv.data(),
                            b.att.data(), B, Tn, D, H);
    if (!m.gpt) Ops::rope_backward(m.dqkv.data(), m.rope.data(), B, Tn, D, H);
    Ops::linear_backward(m.dln.data(), g + p.qkv_w, dbias(p.qkv_b), m.dqkv.data(), b.ln1.data(),
                         w + p.qkv_w, N, D, 3 * D);
  }
  norm_backward(m.x[l].data(), b.ln1_mean.data(), b.ln1_rstd.data(), p.ln1_w, p.ln1_b);
}

template <typename T>
double BasicTransformer<T>::forward(const TokenBatch& batch, RankRecorder& recorder, int step) {
  set_input(batch);
  for (int u = 0; u < units(); ++u) forward_unit(u, recorder, step);
  return forward_loss(recorder, step);
}

template <typename T>
void BasicTransformer<T>::backward(RankRecorder& recorder, int step) {
  backward_loss(recorder, step);
  for (int u = units() - 1; u >= 0; --u) backward_unit(u, recorder, step);
}

template class BasicTransformer<float>;
template class BasicTransformer<double>;

}  // namespace tandem
