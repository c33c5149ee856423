// CudaTransformer: BasicTransformer's passes (model/transformer.cpp) as cuBLAS GEMMs and
// tandem's kernels, enqueued on one stream. The code follows transformer.cpp line for
// line; each layers::Ops call there is the same-named kernel or GEMM here.
#include "model/cuda/cuda_transformer.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <limits>
#include <string>

#include "compute/cuda/attention.h"
#include "compute/cuda/gemm.h"
#include "compute/cuda/kernels.h"
#include "compute/cuda/transformer_kernels.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/resources.h"
#include "model/activation_slots.h"
#include "model/cuda/loss_sum.h"
#include "model/layers.h"
#include "model/model_ops.h"
#include "model/transformer.h"

namespace tandem::cuda {

// Note [CudaTransformer buffers]
// The CPU's (Note [Transformer buffers] in transformer.cpp), in device memory: per block
// the norms' outputs and statistics, qkv (after rope for llama), the attention
// probabilities [B, H, T, T], the heads' output, the stream after attention (xmid) and the
// MLP's inner activations; x[l] the residual streams. logits [N, V] become the
// probabilities in forward_loss and dlogits in backward_loss, in place, as on the CPU.
// Backward scratch as on the CPU, except that attention's dP scratch holds all H heads
// of one sequence ([H, T, T]: one strided-batched GEMM per sequence).
// Note [CudaTransformer mixed precision]
// fp16/bf16 as autocast does it: the linear layers' GEMMs (qkv, projection, MLP, head:
// nearly all of a large model's FLOPs) read fp16/bf16 copies of their inputs and
// accumulate in fp32 into fp32 outputs; attention's batched products run in tf32; every
// elementwise kernel, the master weights, the gradients and the loss stay fp32. The
// weights are cast at each unit's forward into lp_params (the same layout), which its
// backward reads again (the parameters do not change within a step); activations and
// output gradients are cast just before the GEMM that reads them, into two scratch
// buffers reused in stream order. fp16 adds the rank model's dynamic loss scale: the loss
// gradient is multiplied by it (softmax_cross_entropy_backward), so the cast output
// gradients stay in fp16's range, and the SGD step divides it out or skips the step.
namespace {

// What one micro-batch keeps from its forward to its backward (Note [activation slots] in
// model/transformer.cpp). A pipeline stage's slots hold their own copy of the tokens
// (`tokens`): the rank model's staging buffer is refilled by the next micro-batch.
struct CudaTransformerActs {
  struct Block {
    DeviceBuffer<float> ln1, ln1_mean, ln1_rstd;  // llama: rms norm (mean unused)
    DeviceBuffer<float> qkv, att, atty, xmid;
    DeviceBuffer<float> ln2, ln2_mean, ln2_rstd;
    DeviceBuffer<float> up;   // gpt: fc output [N, F]; llama: gate|up [N, 2F]
    DeviceBuffer<float> act;  // gpt: GELU(fc); llama: silu(gate) * up; [N, F]
  };
  int rows = 0;  // of the last set_input
  const std::int32_t* inputs = nullptr;
  const std::int32_t* targets = nullptr;
  DeviceBuffer<std::int32_t> tokens;  // stages: inputs [N], then targets [N]
  std::vector<DeviceBuffer<float>> x;  // L + 1 residual streams [N, D]
  std::vector<Block> blocks;
  DeviceBuffer<float> lnf, lnf_mean, lnf_rstd;
  DeviceBuffer<float> logits;  // [N, V]

  std::int64_t bytes() const {
    std::size_t n = tokens.size() * sizeof(std::int32_t);
    auto add = [&](const DeviceBuffer<float>& b) { n += b.size() * sizeof(float); };
    for (const auto& b : x) add(b);
    for (const Block& b : blocks) {
      for (const auto* v : {&b.ln1, &b.ln1_mean, &b.ln1_rstd, &b.qkv, &b.att, &b.atty, &b.xmid,
                            &b.ln2, &b.ln2_mean, &b.ln2_rstd, &b.up, &b.act}) {
        add(*v);
      }
    }
    for (const auto* v : {&lnf, &lnf_mean, &lnf_rstd, &logits}) add(*v);
    return static_cast<std::int64_t>(n);
  }
};

// Sizes `a` for max_batch sequences and the units in `owned`, as the CPU's allocate_acts.
void allocate_acts(CudaTransformerActs& a, const ModelSpec& spec, int max_batch,
                   const std::vector<bool>& owned, bool stage) {
  const TransformerShape& s = spec.transformer;
  const bool gpt = spec.kind == ModelKind::kGpt;
  const auto n = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(s.seq);
  const auto D = static_cast<std::size_t>(s.dim), F = static_cast<std::size_t>(s.hidden);
  const auto L = static_cast<std::size_t>(s.layers);
  const std::size_t TT = static_cast<std::size_t>(s.seq) * static_cast<std::size_t>(s.seq);
  auto own = [&](std::size_t unit) { return unit < owned.size() && owned[unit]; };
  auto sized = [](std::size_t size, bool keep) {
    return keep ? DeviceBuffer<float>(size) : DeviceBuffer<float>();
  };
  a.rows = 0;
  a.inputs = a.targets = nullptr;
  a.tokens = stage ? DeviceBuffer<std::int32_t>(2 * n) : DeviceBuffer<std::int32_t>();
  a.x.clear();
  for (std::size_t i = 0; i <= L; ++i) a.x.push_back(sized(n * D, own(i) || own(i + 1)));
  a.blocks.clear();
  a.blocks.resize(L);
  for (std::size_t l = 0; l < L; ++l) {
    CudaTransformerActs::Block& b = a.blocks[l];
    const bool keep = own(l + 1);
    b.ln1 = sized(n * D, keep);
    b.ln1_mean = sized(n, keep);
    b.ln1_rstd = sized(n, keep);
    b.qkv = sized(n * 3 * D, keep);
    b.att = sized(static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(s.heads) * TT, keep);
    b.atty = sized(n * D, keep);
    b.xmid = sized(n * D, keep);
    b.ln2 = sized(n * D, keep);
    b.ln2_mean = sized(n, keep);
    b.ln2_rstd = sized(n, keep);
    b.up = sized(n * (gpt ? F : 2 * F), keep);
    b.act = sized(n * F, keep);
  }
  const bool head = own(L + 1);
  a.lnf = sized(n * D, head);
  a.lnf_mean = sized(n, head);
  a.lnf_rstd = sized(n, head);
  a.logits = sized(n * static_cast<std::size_t>(s.vocab), head);
}

}  // namespace

struct CudaTransformer::Impl : TransformerOffsets, CudaTransformerActs {  // tensors, buffers
  using Block = CudaTransformerActs::Block;
  Impl(const ModelSpec& spec, LayoutOptions options) : layout(spec, options) {}

  ModelLayout layout;
  Precision precision = Precision::kFp32;
  cudaStream_t stream = nullptr;
  CublasHandle blas;
  int max_batch = 0;
  bool gpt = true;
  int next_backward = -1;
  // Pipeline stages: the units this model runs, and the other slots' activations.
  std::vector<bool> owned;
  bool stage = false;  // configure_stage was called: slots keep their own tokens
  ActivationSlots<CudaTransformerActs> slots;

  CudaTransformerActs& acts() { return *this; }

  DeviceBuffer<float> params;
  DeviceBuffer<float> grads;
  DeviceBuffer<float> row_loss;
  DeviceBuffer<float> rope;  // llama: [T, hd/2, 2]
  DeviceBuffer<float> dx, dln, dqkv, datty, dup, dact, att_scratch;
  std::unique_ptr<DeviceLossSum> loss;
  const LossScaleState* amp = nullptr;  // fp16: the rank model's loss scale
  // fp16/bf16 (Note [CudaTransformer mixed precision]): the parameters' cast copy, and
  // the cast GEMM inputs (activations in lp_in, output gradients in lp_dout).
  DeviceBuffer<std::uint16_t> lp_params, lp_in, lp_dout;

  bool low_precision() const { return casts_gemm_inputs(precision); }
  // Attention's batched products: tf32 where the linear layers are fp16/bf16.
  Precision attention_precision() const {
    return low_precision() ? Precision::kTf32 : precision;
  }
  const float* w(std::size_t offset) const { return params.data() + offset; }
  float* g(std::size_t offset) { return grads.data() + offset; }
  // A weight as a GEMM reads it: the fp32 master or its cast copy.
  const void* gemm_weight(std::size_t offset) const {
    return low_precision() ? static_cast<const void*>(lp_params.data() + offset) : w(offset);
  }
  // An activation (`n` elements) as a GEMM reads it: itself, or cast into lp_in.
  const void* gemm_input(const float* activation, std::size_t n) {
    if (!low_precision()) return activation;
    TANDEM_CHECK(n <= lp_in.size());
    cast_from_float(lp_in.data(), activation, n, precision, 1.0f, stream);
    return lp_in.data();
  }
  // An output gradient as a GEMM reads it: itself, or cast into lp_dout.
  const void* gemm_dout(const float* d, std::size_t n) {
    if (!low_precision()) return d;
    TANDEM_CHECK(n <= lp_dout.size());
    cast_from_float(lp_dout.data(), d, n, precision, 1.0f, stream);
    return lp_dout.data();
  }
  // At a unit's forward: its weights' cast copy (and the tied wte for gpt's head).
  void cast_weights(int unit) {
    if (!low_precision() || unit == 0) return;  // the embedding runs no GEMM
    for (int u : layout.units_read(unit)) {
      const std::size_t begin = layout.unit_begin(u), end = layout.unit_end(u);
      cast_from_float(lp_params.data() + begin, params.data() + begin, end - begin, precision,
                      1.0f, stream);
    }
  }

  // ---- Linear layers: layers::Ops's, with cuBLAS ----
  // out [N, O] = inp [N, I] . weight [I, O] (+ bias).
  void linear_forward(float* out, const float* inp, std::size_t weight, const float* bias, int N,
                      int I, int O) {
    float beta = 0.0f;
    if (bias != nullptr) {
      bias_broadcast(out, bias, N, O, stream);
      beta = 1.0f;
    }
    gemm(blas, precision, false, false, N, O, I, 1.0f, gemm_input(inp, elements(N, I)), I,
         gemm_weight(weight), O, beta, out, O);
  }
  // out = residual (+ bias) + inp . weight; out may alias residual.
  void linear_residual_forward(float* out, const float* residual, const float* inp,
                               std::size_t weight, const float* bias, int N, int I, int O) {
    residual_forward(out, residual, bias, N, O, stream);
    gemm(blas, precision, false, false, N, O, I, 1.0f, gemm_input(inp, elements(N, I)), I,
         gemm_weight(weight), O, 1.0f, out, O);
  }
  // dweight [I, O] += inp^T . dout; dbias [O] += (non-null); dinp [N, I] = dout . weight^T.
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, std::size_t weight, int N, int I, int O) {
    const void* d = gemm_dout(dout, elements(N, O));
    gemm(blas, precision, true, false, I, O, N, 1.0f, gemm_input(inp, elements(N, I)), I, d, O,
         1.0f, dweight, O);
    if (dbias != nullptr) bias_backward(dbias, dout, N, O, stream);
    if (dinp != nullptr) {
      gemm(blas, precision, false, true, N, I, O, 1.0f, d, O, gemm_weight(weight), O, 0.0f, dinp,
           I);
    }
  }
  static std::size_t elements(int rows, int cols) {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  }
};

namespace {

// Elements of the cast GEMM inputs (Note [CudaTransformer mixed precision]): lp_in holds
// the widest activation a linear layer reads, lp_dout the widest output gradient.
std::pair<std::size_t, std::size_t> lp_scratch(const ModelSpec& spec, int max_batch) {
  const TransformerShape& s = spec.transformer;
  const auto n = static_cast<std::size_t>(max_batch) * static_cast<std::size_t>(s.seq);
  const auto D = static_cast<std::size_t>(s.dim), F = static_cast<std::size_t>(s.hidden);
  const std::size_t up = spec.kind == ModelKind::kGpt ? F : 2 * F;
  return {n * std::max(D, F), n * std::max({3 * D, up, static_cast<std::size_t>(s.vocab)})};
}

}  // namespace

CudaTransformer::CudaTransformer(const ModelSpec& spec, int max_batch, std::uint64_t seed,
                                 Precision precision, cudaStream_t stream,
                                 LayoutOptions layout_options)
    : impl_(std::make_unique<Impl>(spec, layout_options)) {
  TANDEM_CHECK(spec.is_transformer());
  const TransformerShape& s = spec.transformer;
  const std::int64_t N64 = transformer_batch_tokens(spec, max_batch);
  Impl& m = *impl_;
  m.precision = precision;
  m.stream = stream;
  m.max_batch = max_batch;
  m.gpt = spec.kind == ModelKind::kGpt;
  m.blas.set_stream(stream);

  const auto n = static_cast<std::size_t>(N64);
  const auto D = static_cast<std::size_t>(s.dim), F = static_cast<std::size_t>(s.hidden);
  const std::size_t up = m.gpt ? F : 2 * F;
  const std::size_t TT = static_cast<std::size_t>(s.seq) * static_cast<std::size_t>(s.seq);
  const auto H = static_cast<std::size_t>(s.heads);
  m.params = DeviceBuffer<float>(m.layout.numel());
  m.grads = DeviceBuffer<float>(m.layout.numel());
  m.owned.assign(static_cast<std::size_t>(m.layout.units()), true);
  allocate_acts(m.acts(), spec, max_batch, m.owned, /*stage=*/false);
  m.row_loss = DeviceBuffer<float>(n);
  m.dx = DeviceBuffer<float>(n * D);
  m.dln = DeviceBuffer<float>(n * D);
  m.dqkv = DeviceBuffer<float>(n * 3 * D);
  m.datty = DeviceBuffer<float>(n * D);
  m.dup = DeviceBuffer<float>(n * up);
  m.dact = DeviceBuffer<float>(n * F);
  m.att_scratch = DeviceBuffer<float>(H * TT);
  m.loss = std::make_unique<DeviceLossSum>(stream);
  if (m.low_precision()) {
    const auto [in, dout] = lp_scratch(spec, max_batch);
    m.lp_params = DeviceBuffer<std::uint16_t>(m.layout.numel());
    m.lp_in = DeviceBuffer<std::uint16_t>(in);
    m.lp_dout = DeviceBuffer<std::uint16_t>(dout);
  }

  // The same initial parameters (layout.h) and rotary table as the CPU model.
  std::vector<float> initial(m.layout.numel());
  m.layout.initialize(initial, seed);
  m.params.upload(initial, stream);
  m.grads.zero(stream);
  std::vector<float> table;
  if (!m.gpt) {
    table.resize(static_cast<std::size_t>(s.seq) * static_cast<std::size_t>(s.head_dim()));
    layers::Ops<float>::rope_table(table.data(), s.seq, s.head_dim());
    m.rope = DeviceBuffer<float>(table.size());
    m.rope.upload(table, stream);
  }
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));  // `initial` and `table` die here

  static_cast<TransformerOffsets&>(m) = transformer_offsets(m.layout);
}

CudaTransformer::~CudaTransformer() = default;

std::int64_t CudaTransformer::buffer_bytes(const ModelSpec& spec, int max_batch,
                                           Precision precision) {
  // The CPU's buffers (the token ids included, here in device memory), plus what differs
  // (Note [CudaTransformer buffers]): dP for H heads instead of one, and the rows' losses;
  // with fp16/bf16 the cast parameters and GEMM inputs.
  const TransformerShape& s = spec.transformer;
  const std::int64_t tokens = static_cast<std::int64_t>(max_batch) * s.seq;
  std::int64_t lp = 0;
  if (casts_gemm_inputs(precision)) {
    const auto [in, dout] = lp_scratch(spec, max_batch);
    lp = static_cast<std::int64_t>(sizeof(std::uint16_t) *
                                   (ModelLayout(spec).numel() + in + dout));
  }
  return Transformer::buffer_bytes(spec, max_batch) + lp +
         static_cast<std::int64_t>(sizeof(float)) *
             (static_cast<std::int64_t>(s.heads - 1) * s.seq * s.seq + tokens);
}

void CudaTransformer::set_loss_scale(const LossScaleState* amp) { impl_->amp = amp; }

const ModelSpec& CudaTransformer::spec() const { return impl_->layout.spec(); }
const ModelLayout& CudaTransformer::layout() const { return impl_->layout; }
int CudaTransformer::units() const { return impl_->layout.units(); }
std::size_t CudaTransformer::numel() const { return impl_->params.size(); }
float* CudaTransformer::flat_params() { return impl_->params.data(); }
float* CudaTransformer::flat_grads() { return impl_->grads.data(); }
void CudaTransformer::zero_grad() { impl_->grads.zero(impl_->stream); }

void CudaTransformer::upload_params(std::span<const float> host) {
  TANDEM_CHECK_EQ(host.size(), numel());
  impl_->params.upload(host, impl_->stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

std::vector<float> CudaTransformer::download_params() const {
  std::vector<float> out(numel());
  impl_->params.download(out, impl_->stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return out;
}

std::vector<float> CudaTransformer::download_grads() const {
  std::vector<float> out(numel());
  impl_->grads.download(out, impl_->stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return out;
}

void CudaTransformer::reset_loss_sum() { impl_->loss->reset(impl_->stream); }
double CudaTransformer::read_loss_sum() const { return impl_->loss->read(impl_->stream); }
void CudaTransformer::enqueue_loss_readback() { impl_->loss->enqueue_readback(impl_->stream); }
double CudaTransformer::loss_sum_host() const { return impl_->loss->host(); }

void CudaTransformer::set_input(const DeviceTokens& batch) {
  Impl& m = *impl_;
  TANDEM_CHECK(batch.rows >= 1 && batch.rows <= m.max_batch);
  TANDEM_CHECK(batch.inputs != nullptr && batch.targets != nullptr);
  m.rows = batch.rows;
  m.next_backward = -1;
  if (!m.stage) {
    m.inputs = batch.inputs;
    m.targets = batch.targets;
    return;
  }
  // A stage keeps the tokens with the slot, until that micro-batch's backward.
  const std::size_t n = static_cast<std::size_t>(batch.rows) * spec().transformer.seq;
  TANDEM_CHECK(m.tokens.size() >= 2 * n);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.tokens.data(), batch.inputs, n * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToDevice, m.stream));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.tokens.data() + n, batch.targets, n * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToDevice, m.stream));
  m.inputs = m.tokens.data();
  m.targets = m.tokens.data() + n;
}

void CudaTransformer::configure_stage(const std::vector<bool>& owned, int slots) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(owned.size(), static_cast<std::size_t>(units()));
  m.owned = owned;
  m.stage = true;
  allocate_acts(m.acts(), spec(), m.max_batch, owned, /*stage=*/true);
  m.slots.configure(slots, [&](CudaTransformerActs& a) {
    allocate_acts(a, spec(), m.max_batch, owned, /*stage=*/true);
  });
  m.next_backward = -1;
}

void CudaTransformer::select_slot(int slot) { impl_->slots.select(impl_->acts(), slot); }

std::span<float> CudaTransformer::unit_input(int unit, int slot) {
  Impl& m = *impl_;
  TANDEM_CHECK(unit >= 1 && unit < units());
  DeviceBuffer<float>& x = m.slots.of(m.acts(), slot).x[static_cast<std::size_t>(unit - 1)];
  TANDEM_CHECK(x.size() > 0);  // a unit of this stage, or the one after it
  return {x.data(), x.size()};
}

void CudaTransformer::begin_backward(int unit, std::span<const float> output_grad) {
  Impl& m = *impl_;
  TANDEM_CHECK(unit >= 0 && unit < units() - 1);  // the head starts from the loss
  TANDEM_CHECK_EQ(output_grad.size(), m.dx.size());
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.dx.data(), output_grad.data(), output_grad.size_bytes(),
                                    cudaMemcpyDeviceToDevice, m.stream));
  m.next_backward = unit;
}

std::span<const float> CudaTransformer::input_grad(int unit) const {
  const Impl& m = *impl_;
  TANDEM_CHECK(unit >= 1 && unit < units() && m.next_backward == unit - 1);
  return {m.dx.data(), m.dx.size()};
}

std::int64_t CudaTransformer::activation_bytes() const { return impl_->bytes(); }

void CudaTransformer::forward_unit(int unit, EventTimer* timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);  // set_input() first
  TANDEM_CHECK(unit >= 0 && unit < units() && m.owned[static_cast<std::size_t>(unit)]);
  const TransformerShape& s = spec().transformer;
  const int B = m.rows, Tn = s.seq, D = s.dim, H = s.heads, F = s.hidden, L = s.layers;
  const int N = B * Tn;
  const cudaStream_t st = m.stream;
  const TransformerFlops flops = transformer_flops(spec(), B);
  auto span = [&](ModelOp op, double f) {
    return TimedSection(timer, st, SpanKind::kForward, step, unit, f, op_name(op));
  };
  m.cast_weights(unit);

  if (unit == 0) {
    auto s0 = span(ModelOp::kEmbedding, 0);
    embedding_forward(m.x[0].data(), m.inputs, m.w(m.wte), m.gpt ? m.w(m.wpe) : nullptr, B, Tn, D,
                      st);
    return;
  }
  if (unit == L + 1) {
    {
      auto s1 = span(ModelOp::kNorm, 0);
      if (m.gpt) {
        layernorm_forward(m.lnf.data(), m.lnf_mean.data(), m.lnf_rstd.data(), m.x[L].data(),
                          m.w(m.lnf_w), m.w(m.lnf_b), N, D, st);
      } else {
        rmsnorm_forward(m.lnf.data(), m.lnf_rstd.data(), m.x[L].data(), m.w(m.lnf_w), N, D, st);
      }
    }
    auto s2 = span(ModelOp::kHead, flops.head);
    if (m.gpt) {
      // Tied: logits [N, V] = lnf [N, D] . wte^T [D, V].
      gemm(m.blas, m.precision, false, true, N, s.vocab, D, 1.0f,
           m.gemm_input(m.lnf.data(), Impl::elements(N, D)), D, m.gemm_weight(m.wte), D, 0.0f,
           m.logits.data(), s.vocab);
    } else {
      m.linear_forward(m.logits.data(), m.lnf.data(), m.head_w, nullptr, N, D, s.vocab);
    }
    return;
  }

  const auto l = static_cast<std::size_t>(unit - 1);
  Impl::Block& b = m.blocks[l];
  const TransformerOffsets::BlockParams& p = m.block_params[l];
  const float* x = m.x[l].data();
  auto norm = [&](float* out, float* mean, float* rstd, const float* inp, std::size_t gain,
                  std::size_t bias) {
    auto sn = span(ModelOp::kNorm, 0);
    if (m.gpt) {
      layernorm_forward(out, mean, rstd, inp, m.w(gain), m.w(bias), N, D, st);
    } else {
      rmsnorm_forward(out, rstd, inp, m.w(gain), N, D, st);
    }
  };
  auto bias = [&](std::size_t offset) { return m.gpt ? m.w(offset) : nullptr; };

  norm(b.ln1.data(), b.ln1_mean.data(), b.ln1_rstd.data(), x, p.ln1_w, p.ln1_b);
  {
    auto sa = span(ModelOp::kAttention, flops.attention);
    m.linear_forward(b.qkv.data(), b.ln1.data(), p.qkv_w, bias(p.qkv_b), N, D, 3 * D);
    if (!m.gpt) rope_forward(b.qkv.data(), m.rope.data(), B, Tn, D, H, st);
    attention_forward(m.blas, m.attention_precision(), b.atty.data(), b.att.data(), b.qkv.data(),
                      B, Tn, D, H, st);
    m.linear_residual_forward(b.xmid.data(), x, b.atty.data(), p.proj_w, bias(p.proj_b), N, D, D);
  }
  norm(b.ln2.data(), b.ln2_mean.data(), b.ln2_rstd.data(), b.xmid.data(), p.ln2_w, p.ln2_b);
  auto sm = span(ModelOp::kMlp, flops.mlp);
  const std::int64_t inner = static_cast<std::int64_t>(N) * F;
  if (m.gpt) {
    m.linear_forward(b.up.data(), b.ln2.data(), p.up_w, m.w(p.up_b), N, D, F);
    gelu_forward(b.act.data(), b.up.data(), inner, st);
  } else {
    m.linear_forward(b.up.data(), b.ln2.data(), p.up_w, nullptr, N, D, 2 * F);
    swiglu_forward(b.act.data(), b.up.data(), N, F, st);
  }
  m.linear_residual_forward(m.x[l + 1].data(), b.xmid.data(), b.act.data(), p.down_w,
                            bias(p.down_b), N, F, D);
}

void CudaTransformer::forward_loss(EventTimer* timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);
  const TransformerShape& s = spec().transformer;
  const int N = m.rows * s.seq;
  TimedSection span(timer, m.stream, SpanKind::kForward, step, units(), 0, op_name(ModelOp::kLoss));
  softmax_cross_entropy_forward(m.logits.data(), m.row_loss.data(), m.logits.data(), m.targets, N,
                                s.vocab, m.stream);
  m.loss->add_mean(m.row_loss.data(), N, m.stream);
}

void CudaTransformer::backward_loss(EventTimer* timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);
  const TransformerShape& s = spec().transformer;
  TimedSection span(timer, m.stream, SpanKind::kBackward, step, units(), 0,
                    op_name(ModelOp::kLoss));
  softmax_cross_entropy_backward(m.logits.data(), m.logits.data(), m.targets, m.rows * s.seq,
                                 s.vocab, m.stream, m.amp);
  m.next_backward = units() - 1;
}

void CudaTransformer::backward_unit(int unit, EventTimer* timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(unit, m.next_backward);  // backward_loss, then units last..0
  TANDEM_CHECK(m.owned[static_cast<std::size_t>(unit)]);
  m.next_backward = unit - 1;
  const TransformerShape& s = spec().transformer;
  const int B = m.rows, Tn = s.seq, D = s.dim, H = s.heads, F = s.hidden, L = s.layers;
  const int N = B * Tn;
  const cudaStream_t st = m.stream;
  const TransformerFlops flops = transformer_flops(spec(), B);
  auto span = [&](ModelOp op, double f) {
    return TimedSection(timer, st, SpanKind::kBackward, step, unit, 2 * f, op_name(op));
  };

  if (unit == 0) {
    auto s0 = span(ModelOp::kEmbedding, 0);
    embedding_backward(m.g(m.wte), m.gpt ? m.g(m.wpe) : nullptr, m.dx.data(), m.inputs, B, Tn, D,
                       st);
    return;
  }
  if (unit == L + 1) {
    {
      auto s2 = span(ModelOp::kHead, flops.head);
      if (m.gpt) {
        // dlnf [N, D] = dlogits [N, V] . wte [V, D]; dwte [V, D] += dlogits^T . lnf.
        const void* dlogits = m.gemm_dout(m.logits.data(), Impl::elements(N, s.vocab));
        gemm(m.blas, m.precision, false, false, N, D, s.vocab, 1.0f, dlogits, s.vocab,
             m.gemm_weight(m.wte), D, 0.0f, m.dln.data(), D);
        gemm(m.blas, m.precision, true, false, s.vocab, D, N, 1.0f, dlogits, s.vocab,
             m.gemm_input(m.lnf.data(), Impl::elements(N, D)), D, 1.0f, m.g(m.wte), D);
      } else {
        m.linear_backward(m.dln.data(), m.g(m.head_w), nullptr, m.logits.data(), m.lnf.data(),
                          m.head_w, N, D, s.vocab);
      }
    }
    auto s1 = span(ModelOp::kNorm, 0);
    if (m.gpt) {
      layernorm_backward(m.dx.data(), m.g(m.lnf_w), m.g(m.lnf_b), nullptr, m.dln.data(),
                         m.x[L].data(), m.w(m.lnf_w), m.lnf_mean.data(), m.lnf_rstd.data(), N, D,
                         st);
    } else {
      rmsnorm_backward(m.dx.data(), m.g(m.lnf_w), nullptr, m.dln.data(), m.x[L].data(),
                       m.w(m.lnf_w), m.lnf_rstd.data(), N, D, st);
    }
    return;
  }

  // A block: m.dx holds dL/d(its output); it leaves holding dL/d(its input).
  const auto l = static_cast<std::size_t>(unit - 1);
  Impl::Block& b = m.blocks[l];
  const TransformerOffsets::BlockParams& p = m.block_params[l];
  float* dx = m.dx.data();
  auto dbias = [&](std::size_t offset) { return m.gpt ? m.g(offset) : nullptr; };
  auto norm_backward = [&](const float* inp, const float* mean, const float* rstd, std::size_t gain,
                           std::size_t bias) {
    auto sn = span(ModelOp::kNorm, 0);
    if (m.gpt) {
      layernorm_backward(dx, m.g(gain), m.g(bias), dx, m.dln.data(), inp, m.w(gain), mean, rstd, N,
                         D, st);
    } else {
      rmsnorm_backward(dx, m.g(gain), dx, m.dln.data(), inp, m.w(gain), rstd, N, D, st);
    }
  };

  {
    auto sm = span(ModelOp::kMlp, flops.mlp);
    m.linear_backward(m.dact.data(), m.g(p.down_w), dbias(p.down_b), dx, b.act.data(), p.down_w,
                      N, F, D);
    const std::int64_t inner = static_cast<std::int64_t>(N) * F;
    if (m.gpt) {
      gelu_backward(m.dup.data(), b.up.data(), m.dact.data(), inner, st);
      m.linear_backward(m.dln.data(), m.g(p.up_w), m.g(p.up_b), m.dup.data(), b.ln2.data(),
                        p.up_w, N, D, F);
    } else {
      swiglu_backward(m.dup.data(), m.dact.data(), b.up.data(), N, F, st);
      m.linear_backward(m.dln.data(), m.g(p.up_w), nullptr, m.dup.data(), b.ln2.data(), p.up_w, N,
                        D, 2 * F);
    }
  }
  norm_backward(b.xmid.data(), b.ln2_mean.data(), b.ln2_rstd.data(), p.ln2_w, p.ln2_b);
  {
    auto sa = span(ModelOp::kAttention, flops.attention);
    m.linear_backward(m.datty.data(), m.g(p.proj_w), dbias(p.proj_b), dx, b.atty.data(), p.proj_w,
                      N, D, D);
    attention_backward(m.blas, m.attention_precision(), m.dqkv.data(), m.att_scratch.data(), m.datty.data(),
                       b.qkv.data(), b.att.data(), B, Tn, D, H, st);
    if (!m.gpt) rope_backward(m.dqkv.data(), m.rope.data(), B, Tn, D, H, st);
    m.linear_backward(m.dln.data(), m.g(p.qkv_w), dbias(p.qkv_b), m.dqkv.data(), b.ln1.data(),
                      p.qkv_w, N, D, 3 * D);
  }
  norm_backward(m.x[l].data(), b.ln1_mean.data(), b.ln1_rstd.data(), p.ln1_w, p.ln1_b);
}

}  // namespace tandem::cuda
