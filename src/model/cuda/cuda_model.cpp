// CudaModel: Mlp's forward and backward (model/model.cpp) as cuBLAS GEMMs and the
// kernels of compute/cuda/kernels.h, enqueued on one stream.
#include "model/cuda/cuda_model.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <utility>

#include "compute/cuda/gemm.h"
#include "compute/cuda/kernels.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/resources.h"
#include "model/activation_slots.h"
#include "model/cuda/loss_sum.h"

namespace tandem::cuda {

// Note [CudaModel buffers]
// As Mlp (model.cpp): pre[L] is layer L's output before the activation (pre[last]
// holds the logits), acts[L] layer L's input for L >= 1 (activation(pre[L-1])); layer
// 0 reads the batch's x in place. grad_a/grad_b ping-pong the activation gradient.
// With fp16/bf16, lp_acts[L] is the cast copy of layer L's input (written in forward,
// read again by the weight gradient), lp_weights the cast copy of the flat parameters
// (per layer, at that layer's forward) and lp_dout the cast output gradient.
namespace {

// What one micro-batch keeps from its forward to its backward (Note [activation slots] in
// model/transformer.cpp): the batch (resident in the data's device memory), the layers'
// inputs and outputs, the probabilities, and with fp16/bf16 the cast inputs.
struct CudaMlpActs {
  int rows = 0;              // of the last set_input
  const float* x = nullptr;  // the last set_input's batch
  const std::int32_t* targets = nullptr;
  std::vector<DeviceBuffer<float>> acts;  // acts[0] unused (the batch)
  std::vector<DeviceBuffer<float>> pre;
  DeviceBuffer<float> probs;
  std::vector<DeviceBuffer<std::uint16_t>> lp_acts;  // fp16/bf16 only

  std::int64_t bytes() const {
    std::size_t n = probs.size() * sizeof(float);
    for (const auto& b : acts) n += b.size() * sizeof(float);
    for (const auto& b : pre) n += b.size() * sizeof(float);
    for (const auto& b : lp_acts) n += b.size() * sizeof(std::uint16_t);
    return static_cast<std::int64_t>(n);
  }
};

// Sizes `a` for `rows` rows and the layers in `owned`: a layer's input and output.
void allocate_acts(CudaMlpActs& a, const ModelLayout& layout, int rows, bool low_precision,
                   const std::vector<bool>& owned) {
  const auto n = static_cast<std::size_t>(rows);
  const auto depth = static_cast<std::size_t>(layout.units());
  auto own = [&](std::size_t l) { return l < owned.size() && owned[l]; };
  a.rows = 0;
  a.acts.clear();
  a.pre.clear();
  a.lp_acts.clear();
  a.acts.resize(depth);
  a.pre.resize(depth);
  for (std::size_t l = 0; l < depth; ++l) {
    const LinearLayout& layer = layout.layer(static_cast<int>(l));
    if (l > 0 && (own(l) || own(l - 1))) {
      a.acts[l] = DeviceBuffer<float>(n * static_cast<std::size_t>(layer.in));
    }
    if (own(l)) a.pre[l] = DeviceBuffer<float>(n * static_cast<std::size_t>(layer.out));
  }
  a.probs = own(depth - 1) ? DeviceBuffer<float>(n * static_cast<std::size_t>(layout.spec().classes))
                           : DeviceBuffer<float>();
  if (low_precision) {
    a.lp_acts.resize(depth);
    for (std::size_t l = 0; l < depth; ++l) {
      if (own(l)) {
        a.lp_acts[l] = DeviceBuffer<std::uint16_t>(
            n * static_cast<std::size_t>(layout.layer(static_cast<int>(l)).in));
      }
    }
  }
}

}  // namespace

struct CudaModel::Impl : CudaMlpActs {
  Impl(const ModelSpec& spec, LayoutOptions options) : layout(spec, options) {}

  ModelLayout layout;
  Precision precision = Precision::kFp32;
  cudaStream_t stream = nullptr;
  int max_batch = 0;
  float* dout = nullptr;  // backward's current output gradient
  float* dinp = nullptr;
  int next_backward = -1;  // the layer backward_unit expects next

  CublasHandle blas;
  DeviceBuffer<float> params_flat;
  DeviceBuffer<float> grads_flat;
  DeviceBuffer<float> row_loss;
  std::unique_ptr<DeviceLossSum> loss;  // made once the stream is known
  DeviceBuffer<float> grad_a;
  DeviceBuffer<float> grad_b;
  DeviceBuffer<std::uint16_t> lp_weights;
  DeviceBuffer<std::uint16_t> lp_dout;
  // Pipeline stages: the layers this model runs, and the other slots' activations.
  std::vector<bool> owned;
  ActivationSlots<CudaMlpActs> slots;

  CudaMlpActs& current() { return *this; }
  bool low_precision() const { return casts_gemm_inputs(precision); }
};

namespace {

// fp16 has 5 exponent bits: scaling the output gradient (whose rows carry a 1/B) by a
// power of two >= B keeps its values in the normal range; powers of two scale exactly.
float lp_dout_scale(Precision precision, int rows) {
  if (precision != Precision::kFp16) return 1.0f;
  return static_cast<float>(std::bit_ceil(static_cast<unsigned>(std::max(rows, 1))));
}

}  // namespace

CudaModel::CudaModel(const ModelSpec& spec, int max_batch, std::uint64_t seed, Precision precision,
                     cudaStream_t stream, LayoutOptions layout_options)
    : impl_(std::make_unique<Impl>(spec, layout_options)) {
  Impl& m = *impl_;
  if (max_batch < 1) {
    throw UsageError("model '" + spec.text + "': batch must be >= 1 (got " +
                     std::to_string(max_batch) + ")");
  }
  const ModelLayout& layout = m.layout;
  const int widest = layout.widest();
  // cuBLAS takes int dimensions and the kernels index rows * width in 64 bits; keep the
  // CPU engine's limit so both accept the same runs.
  if (static_cast<std::int64_t>(max_batch) * widest > std::numeric_limits<int>::max()) {
    throw UsageError("model '" + spec.text + "': batch " + std::to_string(max_batch) +
                     " is too large for width " + std::to_string(widest));
  }
  m.precision = precision;
  m.stream = stream;
  m.max_batch = max_batch;
  m.blas.set_stream(stream);

  const int depth = layout.units();
  const std::size_t numel = layout.numel();
  const std::size_t rows = static_cast<std::size_t>(max_batch);
  m.params_flat = DeviceBuffer<float>(numel);
  m.grads_flat = DeviceBuffer<float>(numel);
  m.owned.assign(static_cast<std::size_t>(depth), true);
  allocate_acts(m, layout, max_batch, m.low_precision(), m.owned);
  m.row_loss = DeviceBuffer<float>(rows);
  m.grad_a = DeviceBuffer<float>(rows * static_cast<std::size_t>(widest));
  m.grad_b = DeviceBuffer<float>(rows * static_cast<std::size_t>(widest));
  if (m.low_precision()) {
    m.lp_weights = DeviceBuffer<std::uint16_t>(numel);
    m.lp_dout = DeviceBuffer<std::uint16_t>(rows * static_cast<std::size_t>(widest));
  }

  // The same initial parameters as the CPU model (layout.h), drawn on the host once.
  std::vector<float> initial(numel);
  layout.initialize(initial, seed);
  m.params_flat.upload(initial, stream);
  m.grads_flat.zero(stream);
  m.loss = std::make_unique<DeviceLossSum>(stream);
  // `initial` dies at the end of this constructor.
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

CudaModel::~CudaModel() = default;

const ModelSpec& CudaModel::spec() const { return impl_->layout.spec(); }
const ModelLayout& CudaModel::layout() const { return impl_->layout; }
Precision CudaModel::precision() const { return impl_->precision; }
cudaStream_t CudaModel::stream() const { return impl_->stream; }
int CudaModel::layer_count() const { return impl_->layout.units(); }
int CudaModel::max_batch() const { return impl_->max_batch; }
const std::vector<ParamInfo>& CudaModel::params() const { return impl_->layout.params(); }
std::size_t CudaModel::numel() const { return impl_->params_flat.size(); }
float* CudaModel::flat_params() { return impl_->params_flat.data(); }
float* CudaModel::flat_grads() { return impl_->grads_flat.data(); }

std::size_t CudaModel::layer_grad_begin(int layer) const {
  TANDEM_CHECK(layer >= 0 && layer < layer_count());
  return impl_->layout.unit_begin(layer);
}

std::size_t CudaModel::layer_grad_end(int layer) const {
  TANDEM_CHECK(layer >= 0 && layer < layer_count());
  return impl_->layout.unit_end(layer);
}

void CudaModel::zero_grad() { impl_->grads_flat.zero(impl_->stream); }

void CudaModel::upload_params(std::span<const float> host) {
  TANDEM_CHECK_EQ(host.size(), numel());
  impl_->params_flat.upload(host, impl_->stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));  // host may be freed after
}

std::vector<float> CudaModel::download_params() const {
  std::vector<float> out(numel());
  impl_->params_flat.download(out, impl_->stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return out;
}

std::vector<float> CudaModel::download_grads() const {
  std::vector<float> out(numel());
  impl_->grads_flat.download(out, impl_->stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return out;
}

std::vector<float> CudaModel::download_logits() const {
  const Impl& m = *impl_;
  std::vector<float> out(static_cast<std::size_t>(m.rows) * m.layout.spec().classes);
  m.pre.back().download(out, m.stream);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return out;
}

void CudaModel::reset_loss_sum() { impl_->loss->reset(impl_->stream); }
double CudaModel::read_loss_sum() const { return impl_->loss->read(impl_->stream); }
void CudaModel::enqueue_loss_readback() { impl_->loss->enqueue_readback(impl_->stream); }
double CudaModel::loss_sum_host() const { return impl_->loss->host(); }

double CudaModel::forward_flops(int rows) const { return impl_->layout.forward_flops(rows); }

namespace {

void activation_forward(Activation activation, float* out, const float* inp, std::int64_t n,
                        cudaStream_t stream) {
  switch (activation) {
    case Activation::kReLU:
      relu_forward(out, inp, n, stream);
      break;
    case Activation::kGELU:
      gelu_forward(out, inp, n, stream);
      break;
    case Activation::kNone:
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<std::size_t>(n) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, stream));
      break;
  }
}

// In place: dout := dL/d(pre-activation) given dL/d(activation output).
void activation_backward_in_place(Activation activation, float* dout, const float* pre,
                                  std::int64_t n, cudaStream_t stream) {
  switch (activation) {
    case Activation::kReLU:
      relu_backward(dout, pre, dout, n, stream);
      break;
    case Activation::kGELU:
      gelu_backward(dout, pre, dout, n, stream);
      break;
    case Activation::kNone:
      break;  // identity
  }
}

}  // namespace

void CudaModel::configure_stage(const std::vector<bool>& owned, int slots) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(owned.size(), static_cast<std::size_t>(layer_count()));
  m.owned = owned;
  allocate_acts(m, m.layout, m.max_batch, m.low_precision(), owned);
  m.slots.configure(slots, [&](CudaMlpActs& a) {
    allocate_acts(a, m.layout, m.max_batch, m.low_precision(), owned);
  });
  m.next_backward = -1;
}

void CudaModel::select_slot(int slot) { impl_->slots.select(impl_->current(), slot); }

std::span<float> CudaModel::unit_input(int layer, int slot) {
  Impl& m = *impl_;
  TANDEM_CHECK(layer >= 1 && layer < layer_count());
  DeviceBuffer<float>& in = m.slots.of(m.current(), slot).acts[static_cast<std::size_t>(layer)];
  TANDEM_CHECK(in.size() > 0);  // a layer of this stage, or the one after it
  return {in.data(), in.size()};
}

void CudaModel::begin_backward(int layer, std::span<const float> output_grad) {
  Impl& m = *impl_;
  TANDEM_CHECK(layer >= 0 && layer < layer_count() - 1);  // the last starts from the loss
  TANDEM_CHECK_EQ(output_grad.size(),
                  static_cast<std::size_t>(m.max_batch) * m.layout.layer(layer).out);
  m.dout = m.grad_a.data();
  m.dinp = m.grad_b.data();
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(m.dout, output_grad.data(), output_grad.size_bytes(),
                                    cudaMemcpyDeviceToDevice, m.stream));
  m.next_backward = layer;
}

std::span<const float> CudaModel::input_grad(int layer) const {
  const Impl& m = *impl_;
  TANDEM_CHECK(layer >= 1 && layer < layer_count() && m.next_backward == layer - 1);
  return {m.dout, static_cast<std::size_t>(m.max_batch) * m.layout.layer(layer).in};
}

std::int64_t CudaModel::activation_bytes() const { return impl_->bytes(); }

// Shapes, B = rows: x [B, input] -> layer L: [B, in_L] . [in_L, out_L] + [out_L] ->
// activation (all but the last) -> logits [B, classes] -> softmax cross-entropy.
void CudaModel::set_input(const DeviceBatch& batch) {
  Impl& m = *impl_;
  TANDEM_CHECK(batch.rows >= 1 && batch.rows <= m.max_batch);
  TANDEM_CHECK(batch.x != nullptr && batch.y != nullptr);
  m.rows = batch.rows;
  m.x = batch.x;
  m.targets = batch.y;
  m.next_backward = -1;
}

void CudaModel::forward_unit(int l, EventTimer* timer, int step) {
  Impl& m = *impl_;
  const int B = m.rows;
  TANDEM_CHECK(B >= 1);  // set_input() first
  TANDEM_CHECK(l >= 0 && l < layer_count() && m.owned[static_cast<std::size_t>(l)]);
  const LinearLayout& layer = m.layout.layer(l);
  const auto u = static_cast<std::size_t>(l);
  TimedSection span(timer, m.stream, SpanKind::kForward, step, l, 2.0 * B * layer.in * layer.out);
  const float* inp = l == 0 ? m.x : m.acts[u].data();
  const float* w = m.params_flat.data() + layer.weight;
  const std::size_t in_count = static_cast<std::size_t>(B) * static_cast<std::size_t>(layer.in);
  const std::size_t w_count =
      static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out);
  const void* a = inp;
  const void* b = w;
  if (m.low_precision()) {
    cast_from_float(m.lp_acts[u].data(), inp, in_count, m.precision, 1.0f, m.stream);
    cast_from_float(m.lp_weights.data() + layer.weight, w, w_count, m.precision, 1.0f, m.stream);
    a = m.lp_acts[u].data();
    b = m.lp_weights.data() + layer.weight;
  }
  float beta = 0.0f;
  if (layer.has_bias) {
    bias_broadcast(m.pre[u].data(), m.params_flat.data() + layer.bias, B, layer.out, m.stream);
    beta = 1.0f;
  }
  // pre[B, out] = inp[B, in] . W[in, out] (+ the broadcast bias)
  gemm(m.blas, m.precision, false, false, B, layer.out, layer.in, 1.0f, a, layer.in, b, layer.out,
       beta, m.pre[u].data(), layer.out);
  if (l < layer_count() - 1) {
    activation_forward(spec().activation, m.acts[u + 1].data(), m.pre[u].data(),
                       static_cast<std::int64_t>(B) * layer.out, m.stream);
  }
}

void CudaModel::forward_loss(EventTimer* timer, int step) {
  Impl& m = *impl_;
  TimedSection span(timer, m.stream, SpanKind::kForward, step, layer_count(), 0);
  softmax_cross_entropy_forward(m.probs.data(), m.row_loss.data(), m.pre.back().data(), m.targets,
                                m.rows, spec().classes, m.stream);
  m.loss->add_mean(m.row_loss.data(), m.rows, m.stream);
}

void CudaModel::backward_loss(EventTimer* timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK(m.rows >= 1);  // forward first
  m.dout = m.grad_a.data();
  m.dinp = m.grad_b.data();
  TimedSection span(timer, m.stream, SpanKind::kBackward, step, layer_count(), 0);
  softmax_cross_entropy_backward(m.dout, m.probs.data(), m.targets, m.rows, spec().classes,
                                 m.stream);
  m.next_backward = layer_count() - 1;
}

// dout [B, out_L] -> activation backward (L < last) -> dW_L [in_L, out_L] +=,
// db_L [out_L] +=, d(in_L) [B, in_L] = (L > 0).
void CudaModel::backward_unit(int l, EventTimer* timer, int step) {
  Impl& m = *impl_;
  TANDEM_CHECK_EQ(l, m.next_backward);  // backward_loss, then layers last..0
  TANDEM_CHECK(m.owned[static_cast<std::size_t>(l)]);
  const int B = m.rows;
  const bool lp = m.low_precision();
  const float scale = lp_dout_scale(m.precision, B);
  const float alpha = 1.0f / scale;  // exact: scale is a power of two
  const LinearLayout& layer = m.layout.layer(l);
  const auto u = static_cast<std::size_t>(l);
  {
    const double flops = (l > 0 ? 4.0 : 2.0) * B * layer.in * layer.out;
    TimedSection span(timer, m.stream, SpanKind::kBackward, step, l, flops);
    const std::int64_t out_count = static_cast<std::int64_t>(B) * layer.out;
    if (l < layer_count() - 1) {
      activation_backward_in_place(spec().activation, m.dout, m.pre[u].data(), out_count, m.stream);
    }
    const void* dout_in = m.dout;
    const void* inp = l == 0 ? static_cast<const void*>(m.x) : m.acts[u].data();
    const void* w = m.params_flat.data() + layer.weight;
    if (lp) {
      cast_from_float(m.lp_dout.data(), m.dout, static_cast<std::size_t>(out_count), m.precision,
                      scale, m.stream);
      dout_in = m.lp_dout.data();
      inp = m.lp_acts[u].data();  // cast in forward, unchanged since
      w = m.lp_weights.data() + layer.weight;
    }
    float* dw = m.grads_flat.data() + layer.weight;
    // dW[in, out] += inp^T[in, B] . dout[B, out]
    gemm(m.blas, m.precision, true, false, layer.in, layer.out, B, alpha, inp, layer.in, dout_in,
         layer.out, 1.0f, dw, layer.out);
    if (layer.has_bias) {
      bias_backward(m.grads_flat.data() + layer.bias, m.dout, B, layer.out, m.stream);
    }
    // dinp[B, in] = dout[B, out] . W^T[out, in]; layer 0's would be dL/dx, unused.
    if (l > 0) {
      gemm(m.blas, m.precision, false, true, B, layer.in, layer.out, alpha, dout_in, layer.out, w,
           layer.out, 0.0f, m.dinp, layer.in);
    }
  }
  std::swap(m.dout, m.dinp);
  m.next_backward = l - 1;
}

void CudaModel::forward(const DeviceBatch& batch, EventTimer* timer, int step) {
  set_input(batch);
  for (int l = 0; l < layer_count(); ++l) forward_unit(l, timer, step);
  forward_loss(timer, step);
}

void CudaModel::backward(EventTimer* timer, int step,
                         const std::function<void(int layer)>& on_layer_ready) {
  backward_loss(timer, step);
  for (int l = layer_count() - 1; l >= 0; --l) {
    backward_unit(l, timer, step);
    if (on_layer_ready) on_layer_ready(l);
  }
}

CudaSgd::CudaSgd(SgdOptions options, std::size_t numel, cudaStream_t stream)
    : options_(options), velocity_(numel) {
  velocity_.zero(stream);  // ordered before every step() on the same stream
}

void CudaSgd::step(float* params, const float* grads, float grad_scale, cudaStream_t stream,
                   const LossScaleState* amp) {
  sgd_step(params, velocity_.data(), grads, velocity_.size(), options_.lr, options_.momentum,
           options_.weight_decay, grad_scale, stream, amp);
}

void CudaSgd::step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
                   float grad_scale, cudaStream_t stream) const {
  TANDEM_CHECK_EQ(params.size(), velocity.size());
  TANDEM_CHECK_EQ(grads.size(), velocity.size());
  if (params.empty()) return;
  sgd_step(params.data(), velocity.data(), grads.data(), params.size(), options_.lr,
           options_.momentum, options_.weight_decay, grad_scale, stream);
}

}  // namespace tandem::cuda
