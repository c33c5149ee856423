// CudaBackend: the model passes' kernels, memory and timing on one CUDA stream.
#include "model/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "compute/cuda/attention.h"
#include "compute/cuda/kernels.h"
#include "compute/cuda/transformer_kernels.h"
#include "core/error.h"
#include "cuda/check.h"
#include "model/cuda/loss_sum.h"

namespace tandem::cuda {

// Note [CudaBackend mixed precision]
// fp16/bf16 as autocast does it: the linear layers' GEMMs (qkv, projection, MLP, head:
// nearly all of a large model's FLOPs) read fp16/bf16 copies of their inputs and
// accumulate in fp32 into fp32 outputs; attention's batched products run in tf32; every
// elementwise kernel, the master weights, the gradients and the loss stay fp32. The
// weights are cast at each unit's forward into lp_params_ (the same layout), which its
// backward reads again; activations and output gradients are cast just before the GEMM
// that reads them, into two scratch buffers reused in stream order. fp16 adds the rank
// model's dynamic loss scale: the loss gradient is multiplied by it
// (softmax_cross_entropy_backward), so the cast output gradients stay in fp16's range,
// and the SGD step divides it out or skips the step. Without a loss scale (the mlp, the
// tests), an fp16 output gradient of N rows is scaled by a power of two >= N before the
// cast (its rows carry a 1/N) and the GEMM's alpha undoes it exactly.
namespace {

std::size_t elements(int rows, int cols) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}

}  // namespace

CudaBackend::CudaBackend(Config config) : precision_(config.precision), stream_(config.stream) {
  blas_.set_stream(stream_);
  loss_ = std::make_unique<DeviceLossSum>(stream_);
}

CudaBackend::~CudaBackend() = default;

CudaBackend::Flat CudaBackend::flat(const ModelLayout& layout) const {
  std::vector<std::size_t> cuts;  // a unit is backed, and given back, as one piece
  for (int u = 0; u < layout.units(); ++u) cuts.push_back(layout.unit_begin(u));
  return Flat(layout.numel(), cuts, stream_);  // zero
}

void CudaBackend::initialize(Flat& params, const ModelLayout& layout, std::uint64_t seed) const {
  std::vector<float> initial(layout.numel());
  layout.initialize(initial, seed);
  upload(std::span<float>(params.data(), params.size()), initial);  // synchronizes
}

DeviceBuffer<float> CudaBackend::table(const std::vector<float>& host) const {
  DeviceBuffer<float> out(host.size());
  out.upload(host, stream_);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller's `host` may die
  return out;
}

void CudaBackend::zero(std::span<float> array) const {
  if (!array.empty())
    TANDEM_CUDA_CHECK(cudaMemsetAsync(array.data(), 0, array.size_bytes(), stream_));
}

void CudaBackend::discard(Flat& array, std::size_t begin, std::size_t end) const {
  TANDEM_CHECK(begin <= end && end <= array.size());
  array.discard(begin, end);
}

void CudaBackend::copy(float* to, const float* from, std::size_t n) const {
  if (n == 0) return;
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(to, from, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::upload(std::span<float> to, std::span<const float> host) const {
  TANDEM_CHECK_EQ(to.size(), host.size());
  if (host.empty()) return;
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(to.data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream_));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::vector<float> CudaBackend::download(std::span<const float> from) const {
  std::vector<float> out(from.size());
  if (!from.empty()) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(out.data(), from.data(), from.size_bytes(),
                                      cudaMemcpyDeviceToHost, stream_));
  }
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

std::int64_t CudaBackend::extra_bytes(std::size_t numel, const BackendNeeds& needs, Config config) {
  std::size_t bytes = needs.loss_rows * sizeof(float);
  if (casts_gemm_inputs(config.precision)) {
    bytes += sizeof(std::uint16_t) * (numel + needs.widest_input + needs.widest_output_grad);
  }
  return static_cast<std::int64_t>(bytes);
}

void CudaBackend::prepare(std::span<const float> params, const BackendNeeds& needs) {
  params_ = params.data();
  numel_ = params.size();
  row_loss_ = DeviceBuffer<float>(needs.loss_rows);
  if (low_precision()) {
    lp_params_ = DeviceBuffer<std::uint16_t>(numel_);
    lp_in_ = DeviceBuffer<std::uint16_t>(needs.widest_input);
    lp_dout_ = DeviceBuffer<std::uint16_t>(needs.widest_output_grad);
  }
}

void CudaBackend::before_forward_unit(const ModelLayout& layout, int unit) {
  if (!low_precision()) return;
  for (int u : layout.units_read(unit)) {
    const std::size_t begin = layout.unit_begin(u), end = layout.unit_end(u);
    cast_from_float(lp_params_.data() + begin, params_ + begin, end - begin, precision_, 1.0f,
                    stream_);
  }
}

int CudaBackend::load_tokens(const Tokens& batch, std::int32_t* inputs, std::int32_t* targets,
                             int seq, int /*vocab*/) const {
  TANDEM_CHECK(batch.inputs != nullptr && batch.targets != nullptr);
  const std::size_t bytes = elements(batch.rows, seq) * sizeof(std::int32_t);
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(inputs, batch.inputs, bytes, cudaMemcpyDeviceToDevice, stream_));
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(targets, batch.targets, bytes, cudaMemcpyDeviceToDevice, stream_));
  return batch.rows;
}

int CudaBackend::load_batch(const Batch& batch, float* x, std::int32_t* y, int input,
                            int /*classes*/) const {
  TANDEM_CHECK(batch.x != nullptr && batch.y != nullptr);
  if (x != nullptr) copy(x, batch.x, elements(batch.rows, input));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(y, batch.y, elements(batch.rows, 1) * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToDevice, stream_));
  return batch.rows;
}

void CudaBackend::reset_loss_sum() { loss_->reset(stream_); }
double CudaBackend::read_loss_sum() const { return loss_->read(stream_); }
void CudaBackend::enqueue_loss_readback() { loss_->enqueue_readback(stream_); }
double CudaBackend::loss_sum_host() const { return loss_->host(); }

Precision CudaBackend::attention_precision() const {
  return low_precision() ? Precision::kTf32 : precision_;
}

const void* CudaBackend::gemm_weight(const float* weight) const {
  if (!low_precision()) return weight;
  TANDEM_CHECK(weight >= params_ && weight < params_ + numel_);
  return lp_params_.data() + (weight - params_);
}

const void* CudaBackend::gemm_input(const float* activation, std::size_t n) {
  if (!low_precision()) return activation;
  TANDEM_CHECK(n <= lp_in_.size());
  cast_from_float(lp_in_.data(), activation, n, precision_, 1.0f, stream_);
  return lp_in_.data();
}

CudaBackend::CastGrad CudaBackend::gemm_dout(const float* dout, int rows, int cols) {
  if (!low_precision()) return {dout, 1.0f};
  const std::size_t n = elements(rows, cols);
  TANDEM_CHECK(n <= lp_dout_.size());
  // A power of two scales exactly (Note [CudaBackend mixed precision]).
  const float scale =
      precision_ == Precision::kFp16 && amp_ == nullptr
          ? static_cast<float>(std::bit_ceil(static_cast<unsigned>(std::max(rows, 1))))
          : 1.0f;
  cast_from_float(lp_dout_.data(), dout, n, precision_, scale, stream_);
  return {lp_dout_.data(), 1.0f / scale};
}

// ---- Linear layers: layers::Ops's, with cuBLAS ----

void CudaBackend::linear_forward(float* out, const float* inp, const float* weight,
                                 const float* bias, int N, int I, int O) {
  float beta = 0.0f;
  if (bias != nullptr) {
    bias_broadcast(out, bias, N, O, stream_);
    beta = 1.0f;
  }
  gemm(blas_, precision_, false, false, N, O, I, 1.0f, gemm_input(inp, elements(N, I)), I,
       gemm_weight(weight), O, beta, out, O);
}

void CudaBackend::linear_residual_forward(float* out, const float* residual, const float* inp,
                                          const float* weight, const float* bias, int N, int I,
                                          int O) {
  residual_forward(out, residual, bias, N, O, stream_);
  gemm(blas_, precision_, false, false, N, O, I, 1.0f, gemm_input(inp, elements(N, I)), I,
       gemm_weight(weight), O, 1.0f, out, O);
}

void CudaBackend::linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, int N, int I, int O) {
  const CastGrad d = gemm_dout(dout, N, O);
  gemm(blas_, precision_, true, false, I, O, N, d.alpha, gemm_input(inp, elements(N, I)), I, d.data,
       O, 1.0f, dweight, O);
  if (dbias != nullptr) bias_backward(dbias, dout, N, O, stream_);
  if (dinp != nullptr) {
    gemm(blas_, precision_, false, true, N, I, O, d.alpha, d.data, O, gemm_weight(weight), O, 0.0f,
         dinp, I);
  }
}

void CudaBackend::linear_transposed_forward(float* out, const float* inp, const float* weight,
                                            int N, int I, int O) {
  gemm(blas_, precision_, false, true, N, O, I, 1.0f, gemm_input(inp, elements(N, I)), I,
       gemm_weight(weight), I, 0.0f, out, O);
}

void CudaBackend::linear_transposed_backward(float* dinp, float* dweight, const float* dout,
                                             const float* inp, const float* weight, int N, int I,
                                             int O) {
  const CastGrad d = gemm_dout(dout, N, O);
  if (dinp != nullptr) {
    gemm(blas_, precision_, false, false, N, I, O, d.alpha, d.data, O, gemm_weight(weight), I, 0.0f,
         dinp, I);
  }
  gemm(blas_, precision_, true, false, O, I, N, d.alpha, d.data, O, gemm_input(inp, elements(N, I)),
       I, 1.0f, dweight, I);
}

// ---- Elementwise and the rest: the kernels of compute/cuda ----

void CudaBackend::relu_forward(float* out, const float* inp, std::int64_t n) {
  cuda::relu_forward(out, inp, n, stream_);
}

void CudaBackend::relu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n) {
  cuda::relu_backward(dinp, inp, dout, n, stream_);
}

void CudaBackend::gelu_forward(float* out, const float* inp, std::int64_t n) {
  cuda::gelu_forward(out, inp, n, stream_);
}

void CudaBackend::gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n) {
  cuda::gelu_backward(dinp, inp, dout, n, stream_);
}

void CudaBackend::bias_gelu_forward(float* out, float* up, const float* bias, int N, int F) {
  residual_forward(up, up, bias, N, F, stream_);  // up += bias, in place
  cuda::gelu_forward(out, up, static_cast<std::int64_t>(elements(N, F)), stream_);
}

void CudaBackend::gelu_bias_backward(float* dinp, float* dbias, const float* up, const float* dout,
                                     int N, int F) {
  cuda::gelu_backward(dinp, up, dout, static_cast<std::int64_t>(elements(N, F)), stream_);
  bias_backward(dbias, dinp, N, F, stream_);
}

void CudaBackend::swiglu_forward(float* out, const float* gate_up, int N, int F) {
  cuda::swiglu_forward(out, gate_up, N, F, stream_);
}

void CudaBackend::swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N,
                                  int F) {
  cuda::swiglu_backward(dgate_up, dout, gate_up, N, F, stream_);
}

void CudaBackend::cross_entropy_forward(float* probs, const float* logits,
                                        const std::int32_t* targets, int N, int C) {
  TANDEM_CHECK(static_cast<std::size_t>(N) <= row_loss_.size());
  softmax_cross_entropy_forward(probs, row_loss_.data(), logits, targets, N, C, stream_);
  loss_->add_mean(row_loss_.data(), N, stream_);
}

void CudaBackend::cross_entropy_backward(float* dlogits, const float* probs,
                                         const std::int32_t* targets, int N, int C) {
  softmax_cross_entropy_backward(dlogits, probs, targets, N, C, stream_, amp_);
}

void CudaBackend::embedding_forward(float* out, const std::int32_t* tokens, const float* wte,
                                    const float* wpe, int B, int Tn, int D) {
  cuda::embedding_forward(out, tokens, wte, wpe, B, Tn, D, stream_);
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, const float* dout,
                                     const std::int32_t* tokens, int B, int Tn, int D) {
  cuda::embedding_backward(dwte, dwpe, dout, tokens, B, Tn, D, stream_);
}

void CudaBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                    const float* weight, const float* bias, int N, int D) {
  cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, D, stream_);
}

void CudaBackend::layernorm_backward(float* dinp, float* dweight, float* dbias,
                                     const float* dresidual, const float* dout, const float* inp,
                                     const float* weight, const float* mean, const float* rstd,
                                     int N, int D) {
  cuda::layernorm_backward(dinp, dweight, dbias, dresidual, dout, inp, weight, mean, rstd, N, D,
                           stream_);
}

void CudaBackend::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight,
                                  int N, int D) {
  cuda::rmsnorm_forward(out, rstd, inp, weight, N, D, stream_);
}

void CudaBackend::rmsnorm_backward(float* dinp, float* dweight, const float* dresidual,
                                   const float* dout, const float* inp, const float* weight,
                                   const float* rstd, int N, int D) {
  cuda::rmsnorm_backward(dinp, dweight, dresidual, dout, inp, weight, rstd, N, D, stream_);
}

void CudaBackend::attention_forward(float* out, float* att, const float* qkv, int B, int Tn, int D,
                                    int H) {
  cuda::attention_forward(blas_, attention_precision(), out, att, qkv, B, Tn, D, H, stream_);
}

void CudaBackend::attention_backward(float* dqkv, float* scratch, const float* dout,
                                     const float* qkv, const float* att, int B, int Tn, int D,
                                     int H) {
  cuda::attention_backward(blas_, attention_precision(), dqkv, scratch, dout, qkv, att, B, Tn, D, H,
                           stream_);
}

void CudaBackend::rope_forward(float* qkv, const float* cos_sin, int B, int Tn, int D, int H) {
  cuda::rope_forward(qkv, cos_sin, B, Tn, D, H, stream_);
}

void CudaBackend::rope_backward(float* dqkv, const float* cos_sin, int B, int Tn, int D, int H) {
  cuda::rope_backward(dqkv, cos_sin, B, Tn, D, H, stream_);
}

}  // namespace tandem::cuda
