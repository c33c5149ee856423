// The CUDA device backend of the model layer (model/backend.h): what the model passes
// need of a device, the CPU backend's twin (model/cpu_backend.h) on one CUDA device.
//
//   memory   Buffer<U> = DeviceBuffer<U> (cuda/resources.h) on the current device, not
//            initialized; the flat arrays are DevicePageArrays (cuda/device_pages.h),
//            zeroed on the stream, backed unit by unit: a discarded unit's memory goes back
//            to the driver, and a range is restored before its next use.
//   kernels  cuBLAS GEMMs (compute/cuda/gemm.h) and tandem's kernels
//            (compute/cuda/kernels.h, transformer_kernels.h, attention.h), enqueued on one
//            stream; the host never waits inside a pass.
//   timing   spans from CUDA events (timeline/gpu/event_timer.h), Timer = EventTimer*
//            (null: untimed).
//   loss     cross_entropy_forward adds the batch's mean loss to a device scalar
//            (LossValue = void), read back once per step (loss_sum.h).
//
// Precision (compute/precision.h): fp32, or tf32 GEMMs (attention's products included);
// fp16/bf16 for the linear layers' GEMMs, with attention in tf32
// (Note [CudaBackend mixed precision] in the .cpp). Every elementwise kernel, the master
// weights, the gradients and the loss are fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compute/cuda/gemm.h"
#include "compute/precision.h"
#include "cuda/device_pages.h"
#include "cuda/resources.h"
#include "model/backend.h"
#include "model/layout.h"
#include "model/model_ops.h"
#include "timeline/gpu/event_timer.h"

namespace tandem::cuda {

struct LossScaleState;  // compute/cuda/kernels.h
class DeviceLossSum;    // loss_sum.h

// A batch of token ids already in device memory: inputs [rows, seq] and targets [rows,
// seq] (the inputs shifted by one), in [0, vocab). set_input copies them (on the stream),
// so the caller may refill them once the stream has passed that copy.
struct DeviceTokens {
  const std::int32_t* inputs = nullptr;
  const std::int32_t* targets = nullptr;
  int rows = 0;
};

// An mlp's batch in device memory: x [rows, input], y [rows] labels in [0, classes);
// copied by set_input as DeviceTokens are.
struct DeviceBatch {
  const float* x = nullptr;
  const std::int32_t* y = nullptr;
  int rows = 0;
};

class CudaBackend {
 public:
  using Scalar = float;
  template <typename U>
  using Buffer = DeviceBuffer<U>;
  using Flat = DevicePageArray<float>;
  using Timer = EventTimer*;
  using Tokens = DeviceTokens;
  using Batch = DeviceBatch;
  using LossValue = void;
  struct Config {
    Precision precision = Precision::kFp32;
    cudaStream_t stream = nullptr;
  };

  explicit CudaBackend(Config config);
  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Precision precision() const { return precision_; }
  cudaStream_t stream() const { return stream_; }

  // ---- memory ----
  template <typename U>
  Buffer<U> buffer(std::size_t n) const {
    return Buffer<U>(n);
  }
  Flat flat(const ModelLayout& layout) const;
  // The layout's initial parameters for `seed` (layout.h), drawn on the host, uploaded.
  void initialize(Flat& params, const ModelLayout& layout, std::uint64_t seed) const;
  Buffer<float> table(const std::vector<float>& host) const;
  void zero(std::span<float> array) const;
  void zero(Flat& array) const { array.zero(); }
  void discard(Flat& array, std::size_t begin, std::size_t end) const;
  void restore(Flat& array, std::size_t begin, std::size_t end) const { array.restore(begin, end); }
  // After the stream was synchronized: every discard's memory goes back now.
  void settle(Flat& array) const { array.settle(); }
  void copy(float* to, const float* from, std::size_t n) const;
  // Host copies; both synchronize the stream before returning.
  void upload(std::span<float> to, std::span<const float> host) const;
  std::vector<float> download(std::span<const float> from) const;
  std::vector<float> download(const Flat& from) const { return from.download(); }
  // attention_backward's dP for all H heads of one sequence (one batched GEMM).
  static std::size_t attention_scratch(int Tn, int heads) {
    return static_cast<std::size_t>(heads) * static_cast<std::size_t>(Tn) *
           static_cast<std::size_t>(Tn);
  }
  // The rows' losses, and with fp16/bf16 the cast parameters and GEMM inputs.
  static std::int64_t extra_bytes(std::size_t numel, const BackendNeeds& needs, Config config);
  // Allocates those for a model whose flat parameters are `params`.
  void prepare(std::span<const float> params, const BackendNeeds& needs);
  // Called before the forward of a unit that runs GEMMs (a model knows which; the
  // backend does not guess). fp16/bf16: the cast copy of the weights `unit` reads (the
  // tied wte for gpt's head); its backward reads them again (the parameters do not change
  // within a step).
  void before_forward_unit(const ModelLayout& layout, int unit);

  // ---- input ----
  int load_tokens(const Tokens& batch, std::int32_t* inputs, std::int32_t* targets, int seq,
                  int vocab) const;
  int load_batch(const Batch& batch, float* x, std::int32_t* y, int input, int classes) const;

  // ---- timing ----
  TimedSection section(Timer timer, SpanKind kind, int step, int tag, NameId name,
                       double flops) const {
    return TimedSection(timer, stream_, kind, step, tag, flops, name);
  }

  // ---- the loss ----
  // fp16: the loss gradient is multiplied by amp->scale from now on (null: by nothing).
  void set_loss_scale(const LossScaleState* amp) { amp_ = amp; }
  void reset_loss_sum();
  // Synchronizes the stream, then returns the accumulated sum of batch mean losses.
  double read_loss_sum() const;
  // Copies the sum to pinned memory on the stream; loss_sum_host() has it once the
  // stream has passed this point.
  void enqueue_loss_readback();
  double loss_sum_host() const;

  // ---- kernels: layers::Ops's (model/layers.h), enqueued ----
  void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int I, int O);
  void linear_residual_forward(float* out, const float* residual, const float* inp,
                               const float* weight, const float* bias, int N, int I, int O);
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int I, int O);
  void linear_transposed_forward(float* out, const float* inp, const float* weight, int N, int I,
                                 int O);
  void linear_transposed_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                  const float* weight, int N, int I, int O);
  void relu_forward(float* out, const float* inp, std::int64_t n);
  void relu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n);
  void gelu_forward(float* out, const float* inp, std::int64_t n);
  void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n);
  void bias_gelu_forward(float* out, float* up, const float* bias, int N, int F);
  void gelu_bias_backward(float* dinp, float* dbias, const float* up, const float* dout, int N,
                          int F);
  void swiglu_forward(float* out, const float* gate_up, int N, int F);
  void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N, int F);
  void cross_entropy_forward(float* probs, const float* logits, const std::int32_t* targets, int N,
                             int C);
  void cross_entropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                              int N, int C);
  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                         int B, int Tn, int D);
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                          int B, int Tn, int D);
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int D);
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dresidual,
                          const float* dout, const float* inp, const float* weight,
                          const float* mean, const float* rstd, int N, int D);
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                       int D);
  void rmsnorm_backward(float* dinp, float* dweight, const float* dresidual, const float* dout,
                        const float* inp, const float* weight, const float* rstd, int N, int D);
  void attention_forward(float* out, float* att, const float* qkv, int B, int Tn, int D, int H);
  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          const float* att, int B, int Tn, int D, int H);
  void rope_forward(float* qkv, const float* cos_sin, int B, int Tn, int D, int H);
  void rope_backward(float* dqkv, const float* cos_sin, int B, int Tn, int D, int H);

 private:
  bool low_precision() const { return casts_gemm_inputs(precision_); }
  // Attention's batched products: tf32 where the linear layers are fp16/bf16.
  Precision attention_precision() const;
  // What a GEMM reads: the weight (a pointer into the flat parameters) or its cast copy;
  // an activation or an output gradient (`n` elements), itself or cast into scratch.
  const void* gemm_weight(const float* weight) const;
  const void* gemm_input(const float* activation, std::size_t n);
  struct CastGrad {
    const void* data;
    float alpha;  // what the GEMM multiplies by to undo the cast's scale
  };
  CastGrad gemm_dout(const float* dout, int rows, int cols);

  Precision precision_;
  cudaStream_t stream_;
  CublasHandle blas_;
  const float* params_ = nullptr;  // the flat parameters (prepare)
  std::size_t numel_ = 0;
  DeviceBuffer<float> row_loss_;
  std::unique_ptr<DeviceLossSum> loss_;
  const LossScaleState* amp_ = nullptr;  // fp16: the rank model's loss scale
  DeviceBuffer<std::uint16_t> lp_params_, lp_in_, lp_dout_;
};

}  // namespace tandem::cuda
