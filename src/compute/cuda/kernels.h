// tandem's own CUDA kernels, as forward/backward pairs over raw row-major device arrays
// (the GPU twin of model/layers.h). Each function enqueues on `stream` and returns at
// once; launch errors throw RuntimeError. Counts of zero launch nothing.
//
// Gradient rule, as on the CPU: parameter gradients (dbias) accumulate with +=;
// activation gradients (dinp, dlogits) are overwritten.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "compute/precision.h"

namespace tandem::cuda {

// Bias. out [B, O] := bias [O] broadcast over rows (a GEMM with beta = 1 adds x.W on top,
// as linear_forward does on the CPU).
void bias_broadcast(float* out, const float* bias, int B, int O, cudaStream_t stream);
// dbias [O] += sum over rows of dout [B, O] (a fixed-order reduction: deterministic).
void bias_backward(float* dbias, const float* dout, int B, int O, cudaStream_t stream);

// Activations over n values; backward takes the forward's *input* and may run in place
// (dinp == dout). GELU is the tanh approximation of layers.h, same constants.
void relu_forward(float* out, const float* inp, std::int64_t n, cudaStream_t stream);
void relu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                   cudaStream_t stream);
void gelu_forward(float* out, const float* inp, std::int64_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                   cudaStream_t stream);

// Softmax cross-entropy. logits [B, C], targets [B] in [0, C) -> probs [B, C] and the
// per-row loss log(sum exp(z - max)) + max - z[target] in row_loss [B] (log-sum-exp,
// never log(p): stable for any logits). probs may alias logits.
void softmax_cross_entropy_forward(float* probs, float* row_loss, const float* logits,
                                   const std::int32_t* targets, int B, int C, cudaStream_t stream);
// *loss_sum += mean of row_loss [B], summed in double in a fixed order.
void accumulate_mean(double* loss_sum, const float* row_loss, int B, cudaStream_t stream);
// dlogits [B, C] = (probs - onehot(targets)) / B; may alias probs. With `amp`, times
// amp->scale (the loss scale, read on the device).
struct LossScaleState;
void softmax_cross_entropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                                    int B, int C, cudaStream_t stream,
                                    const LossScaleState* amp = nullptr);

// SGD with momentum and L2 weight decay on fp32 master weights, the rule of model/sgd.cpp:
//   g = grad * grad_scale + weight_decay * w;  v = momentum * v + g;  w -= lr * v
// (each product and sum rounded separately, no fused multiply-add, like the CPU loop).
// With `amp` (fp16's dynamic loss scale, below): nothing when amp->found_inf, else the
// gradient is also divided by amp->scale.
void sgd_step(float* params, float* velocity, const float* grads, std::size_t n, float lr,
              float momentum, float weight_decay, float grad_scale, cudaStream_t stream,
              const LossScaleState* amp = nullptr);

// fp16's dynamic loss scale, kept on the device so that no step waits for the host
// (docs/GPU.md, "Mixed precision"): the loss gradient is multiplied by `scale`; after the
// backward, find_nonfinite() sets found_inf where a gradient overflowed; the SGD step
// skips (above); update_loss_scale() then halves the scale and counts a skipped step, or
// doubles it after `growth_interval` clean steps in a row, and clears found_inf.
struct LossScaleState {
  float scale = 65536.0f;
  int found_inf = 0;
  int clean_steps = 0;  // since the last overflow or growth
  int skipped = 0;      // steps skipped since the start
};
void find_nonfinite(const float* x, std::size_t n, LossScaleState* amp, cudaStream_t stream);
void update_loss_scale(LossScaleState* amp, int growth_interval, cudaStream_t stream);

// Casts for the GEMM inputs. `out` holds elements of the precision's GEMM input type
// (gemm.h: __half for kFp16, __nv_bfloat16 for kBf16); out = round_to_nearest(in * scale).
// kFp32/kTf32 copy (scale 1 only).
void cast_from_float(void* out, const float* in, std::size_t n, Precision precision, float scale,
                     cudaStream_t stream);
// out = float(in) (kFp16, kBf16).
void cast_to_float(float* out, const void* in, std::size_t n, Precision precision,
                   cudaStream_t stream);

}  // namespace tandem::cuda
