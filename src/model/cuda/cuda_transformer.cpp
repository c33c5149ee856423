// CudaTransformer: BasicTransformer's passes (model/transformer.cpp) as cuBLAS GEMMs and
// tandem's kernels, enqueued on one stream. The code follows transformer.cpp line for
// line; each layers::Ops call there is the same-named kernel or GEMM here.
#include "model/cuda/cuda_transformer.h"

#include <algorithm>
#include <limits>
#include <string>

#include "compute/cuda/attention.h"
#include "compute/cuda/gemm.h"
#include "compute/cuda/kernels.h"
#include "compute/cuda/transformer_kernels.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/resources.h"
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
struct CudaTransformer::Impl : TransformerOffsets {  // the tensors, then the buffers
  struct Block {
    DeviceBuffer<float> ln1, ln1_mean, ln1_rstd;  // llama: rms norm (mean unused)
    DeviceBuffer<float> qkv, att, atty, xmid;
    DeviceBuffer<float> ln2, ln2_mean, ln2_rstd;
    DeviceBuffer<float> up;   // gpt: fc output [N, F]; llama: gate|up [N, 2F]
    DeviceBuffer<float> act;  // gpt: GELU(fc); llama: silu(gate) * up; [N, F]
  };
  Impl(const ModelSpec& spec, LayoutOptions options) : layout(spec, options) {}

  ModelLayout layout;
  Precision precision = Precision::kFp32;
  cudaStream_t stream = nullptr;
  CublasHandle blas;
  int max_batch = 0;
  int rows = 0;  // of the last set_input
  bool gpt = true;
  const std::int32_t* inputs = nullptr;
  const std::int32_t* targets = nullptr;
  int next_backward = -1;

  DeviceBuffer<float> params;
  DeviceBuffer<float> grads;
  std::vector<DeviceBuffer<float>> x;  // L + 1 residual streams [N, D]
  std::vector<Block> blocks;
  DeviceBuffer<float> lnf, lnf_mean, lnf_rstd;
  DeviceBuffer<float> logits;  // [N, V]
  DeviceBuffer<float> row_loss;
  DeviceBuffer<float> rope;  // llama: [T, hd/2, 2]
  DeviceBuffer<float> dx, dln, dqkv, datty, dup, dact, att_scratch;
  std::unique_ptr<DeviceLossSum> loss;

  const float* w(std::size_t offset) const { return params.data() + offset; }
  float* g(std::size_t offset) { return grads.data() + offset; }

  // ---- Linear layers: layers::Ops's, with cuBLAS ----
  // out [N, O] = inp [N, I] . weight [I, O] (+ bias).
  void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int I, int O) {
    float beta = 0.0f;
    if (bias != nullptr) {
      bias_broadcast(out, bias, N, O, stream);
      beta = 1.0f;
    }
    gemm(blas, precision, false, false, N, O, I, 1.0f, inp, I, weight, O, beta, out, O);
  }
  // out = residual (+ bias) + inp . weight; out may alias residual.
  void linear_residual_forward(float* out, const float* residual, const float* inp,
                               const float* weight, const float* bias, int N, int I, int O) {
    residual_forward(out, residual, bias, N, O, stream);
    gemm(blas, precision, false, false, N, O, I, 1.0f, inp, I, weight, O, 1.0f, out, O);
  }
  // dweight [I, O] += inp^T . dout; dbias [O] += (non-null); dinp [N, I] = dout . weight^T.
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int I, int O) {
    gemm(blas, precision, true, false, I, O, N, 1.0f, inp, I, dout, O, 1.0f, dweight, O);
    if (dbias != nullptr) bias_backward(dbias, dout, N, O, stream);
    if (dinp != nullptr) {
      gemm(blas, precision, false, true, N, I, O, 1.0f, dout, O, weight, O, 0.0f, dinp, I);
    }
  }
};

namespace {

void check_precision(Precision precision) {
  if (precision == Precision::kFp32 || precision == Precision::kTf32) return;
  throw UsageError("--precision " + std::string(to_string(precision)) +
                   ": transformers on --device cuda compute in fp32 or tf32 (fp16 and bf16 "
                   "GEMMs are for the mlp models so far)");
}

}  // namespace

CudaTransformer::CudaTransformer(const ModelSpec& spec, int max_batch, std::uint64_t seed,
                                 Precision precision, cudaStream_t stream,
                                 LayoutOptions layout_options)
    : impl_(std::make_unique<Impl>(spec, layout_options)) {
  TANDEM_CHECK(spec.is_transformer());
  check_precision(precision);
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
  for (int l = 0; l <= s.layers; ++l) m.x.emplace_back(n * D);
  m.blocks.resize(static_cast<std::size_t>(s.layers));
  for (auto& b : m.blocks) {
    b.ln1 = DeviceBuffer<float>(n * D);
    b.ln1_mean = DeviceBuffer<float>(n);
    b.ln1_rstd = DeviceBuffer<float>(n);
    b.qkv = DeviceBuffer<float>(n * 3 * D);
    b.att = DeviceBuffer<float>(static_cast<std::size_t>(max_batch) * H * TT);
    b.atty = DeviceBuffer<float>(n * D);
    b.xmid = DeviceBuffer<float>(n * D);
    b.ln2 = DeviceBuffer<float>(n * D);
    b.ln2_mean = DeviceBuffer<float>(n);
    b.ln2_rstd = DeviceBuffer<float>(n);
    b.up = DeviceBuffer<float>(n * up);
    b.act = DeviceBuffer<float>(n * F);
  }
  m.lnf = DeviceBuffer<float>(n * D);
  m.lnf_mean = DeviceBuffer<float>(n);
  m.lnf_rstd = DeviceBuffer<float>(n);
  m.logits = DeviceBuffer<float>(n * static_cast<std::size_t>(s.vocab));
  m.row_loss = DeviceBuffer<float>(n);
  m.dx = DeviceBuffer<float>(n * D);
  m.dln = DeviceBuffer<float>(n * D);
  m.dqkv = DeviceBuffer<float>(n * 3 * D);
  m.datty = DeviceBuffer<float>(n * D);
  m.dup = DeviceBuffer<float>(n * up);
  m.dact = DeviceBuffer<float>(n * F);
  m.att_scratch = DeviceBuffer<float>(H * TT);
  m.loss = std::make_unique<DeviceLossSum>(stream);

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

std::int64_t CudaTransformer::buffer_bytes(const ModelSpec& spec, int max_batch) {
  // The CPU's buffers (the token ids included, here in device memory), plus what differs
  // (Note [CudaTransformer buffers]): dP for H heads instead of one, and the rows' losses.
  const TransformerShape& s = spec.transformer;
  const std::int64_t tokens = static_cast<std::int64_t>(max_batch) * s.seq;
  return Transformer::buffer_bytes(spec, max_batch) +
         static_cast<std::int64_t>(sizeof(float)) *
             (static_cast<std::int64_t>(s.heads - 1) * s.seq * s.seq + tokens);
}

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
  m.inputs = batch.inputs;
  m.targets = batch.targets;
  m.next_backward = -1;
}

void CudaTransformer::forward_unit(int unit, EventTimer* timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);  // set_input() first
  TANDEM_CHECK(unit >= 0 && unit < units());
  const TransformerShape& s = spec().transformer;
  const int B = m.rows, Tn = s.seq, D = s.dim, H = s.heads, F = s.hidden, L = s.layers;
  const int N = B * Tn;
  const cudaStream_t st = m.stream;
  const TransformerFlops flops = transformer_flops(spec(), B);
  auto span = [&](ModelOp op, double f) {
    return TimedSection(timer, st, SpanKind::kForward, step, unit, f, op_name(op));
  };

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
      gemm(m.blas, m.precision, false, true, N, s.vocab, D, 1.0f, m.lnf.data(), D, m.w(m.wte), D,
           0.0f, m.logits.data(), s.vocab);
    } else {
      m.linear_forward(m.logits.data(), m.lnf.data(), m.w(m.head_w), nullptr, N, D, s.vocab);
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
    m.linear_forward(b.qkv.data(), b.ln1.data(), m.w(p.qkv_w), bias(p.qkv_b), N, D, 3 * D);
    if (!m.gpt) rope_forward(b.qkv.data(), m.rope.data(), B, Tn, D, H, st);
    attention_forward(m.blas, m.precision, b.atty.data(), b.att.data(), b.qkv.data(), B, Tn, D, H,
                      st);
    m.linear_residual_forward(b.xmid.data(), x, b.atty.data(), m.w(p.proj_w), bias(p.proj_b), N, D,
                              D);
  }
  norm(b.ln2.data(), b.ln2_mean.data(), b.ln2_rstd.data(), b.xmid.data(), p.ln2_w, p.ln2_b);
  auto sm = span(ModelOp::kMlp, flops.mlp);
  const std::int64_t inner = static_cast<std::int64_t>(N) * F;
  if (m.gpt) {
    m.linear_forward(b.up.data(), b.ln2.data(), m.w(p.up_w), m.w(p.up_b), N, D, F);
    gelu_forward(b.act.data(), b.up.data(), inner, st);
  } else {
    m.linear_forward(b.up.data(), b.ln2.data(), m.w(p.up_w), nullptr, N, D, 2 * F);
    swiglu_forward(b.act.data(), b.up.data(), N, F, st);
  }
  m.linear_residual_forward(m.x[l + 1].data(), b.xmid.data(), b.act.data(), m.w(p.down_w),
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
                                 s.vocab, m.stream);
  m.next_backward = units() - 1;
}

void CudaTransformer::backward_unit(int unit, EventTimer* timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(unit, m.next_backward);  // backward_loss, then units last..0
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
        gemm(m.blas, m.precision, false, false, N, D, s.vocab, 1.0f, m.logits.data(), s.vocab,
             m.w(m.wte), D, 0.0f, m.dln.data(), D);
        gemm(m.blas, m.precision, true, false, s.vocab, D, N, 1.0f, m.logits.data(), s.vocab,
             m.lnf.data(), D, 1.0f, m.g(m.wte), D);
      } else {
        m.linear_backward(m.dln.data(), m.g(m.head_w), nullptr, m.logits.data(), m.lnf.data(),
                          m.w(m.head_w), N, D, s.vocab);
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
    m.linear_backward(m.dact.data(), m.g(p.down_w), dbias(p.down_b), dx, b.act.data(),
                      m.w(p.down_w), N, F, D);
    const std::int64_t inner = static_cast<std::int64_t>(N) * F;
    if (m.gpt) {
      gelu_backward(m.dup.data(), b.up.data(), m.dact.data(), inner, st);
      m.linear_backward(m.dln.data(), m.g(p.up_w), m.g(p.up_b), m.dup.data(), b.ln2.data(),
                        m.w(p.up_w), N, D, F);
    } else {
      swiglu_backward(m.dup.data(), m.dact.data(), b.up.data(), N, F, st);
      m.linear_backward(m.dln.data(), m.g(p.up_w), nullptr, m.dup.data(), b.ln2.data(), m.w(p.up_w),
                        N, D, 2 * F);
    }
  }
  norm_backward(b.xmid.data(), b.ln2_mean.data(), b.ln2_rstd.data(), p.ln2_w, p.ln2_b);
  {
    auto sa = span(ModelOp::kAttention, flops.attention);
    m.linear_backward(m.datty.data(), m.g(p.proj_w), dbias(p.proj_b), dx, b.atty.data(),
                      m.w(p.proj_w), N, D, D);
    attention_backward(m.blas, m.precision, m.dqkv.data(), m.att_scratch.data(), m.datty.data(),
                       b.qkv.data(), b.att.data(), B, Tn, D, H, st);
    if (!m.gpt) rope_backward(m.dqkv.data(), m.rope.data(), B, Tn, D, H, st);
    m.linear_backward(m.dln.data(), m.g(p.qkv_w), dbias(p.qkv_b), m.dqkv.data(), b.ln1.data(),
                      m.w(p.qkv_w), N, D, 3 * D);
  }
  norm_backward(m.x[l].data(), b.ln1_mean.data(), b.ln1_rstd.data(), p.ln1_w, p.ln1_b);
}

}  // namespace tandem::cuda
