// tandem's own CUDA kernels (kernels.h). Elementwise kernels use grid-stride loops with
// 64-bit indices, so any n works with a bounded grid; reductions run in a fixed order,
// so results do not depend on scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>

#include "compute/cuda/kernels.h"
#include "cuda/check.h"
#include "kernel_support.cuh"

namespace tandem::cuda {
namespace {

using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;

// ---- bias -------------------------------------------------------------------------

__global__ void bias_broadcast_kernel(float* out, const float* bias, std::int64_t n, int O) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) out[i] = bias[i % O];
}

// Block (32, kBiasRows): threadIdx.x picks a column (consecutive threads read consecutive
// addresses of a row), threadIdx.y a residue class of rows; the kBiasRows partial sums of
// a column are then added in y order by one thread.
constexpr int kBiasRows = 8;

__global__ void bias_backward_kernel(float* dbias, const float* dout, int B, int O) {
  __shared__ float partial[kBiasRows][33];  // 33: no bank conflicts on the column read
  const int o = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  float sum = 0.0f;
  if (o < O) {
    for (int b = static_cast<int>(threadIdx.y); b < B; b += kBiasRows) {
      sum += dout[static_cast<std::int64_t>(b) * O + o];
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && o < O) {
    float total = 0.0f;
    for (int y = 0; y < kBiasRows; ++y) total += partial[y][threadIdx.x];
    dbias[o] += total;
  }
}

// ---- activations ------------------------------------------------------------------

__global__ void relu_forward_kernel(float* out, const float* inp, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
  }
}

__global__ void relu_backward_kernel(float* dinp, const float* inp, const float* dout,
                                     std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
  }
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi), as in layers.cpp
constexpr float kGeluCubic = 0.044715f;

__global__ void gelu_forward_kernel(float* out, const float* inp, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float x = inp[i];
    const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    out[i] = 0.5f * x * (1.0f + t);
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout,
                                     std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float x = inp[i];
    const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    // d/dx of 0.5 x (1 + t), with dt/dx = (1 - t^2) s (1 + 3 c x^2) (layers.cpp).
    const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
  }
}

// ---- softmax cross-entropy --------------------------------------------------------

using detail::block_reduce;

// One block per row.
__global__ void softmax_ce_forward_kernel(float* probs, float* row_loss, const float* logits,
                                          const std::int32_t* targets, int C) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const float* z = logits + row * C;
  float* p = probs + row * C;
  // Read before any thread writes the row: probs may alias logits (the transformer's
  // vocabulary-wide rows turn into their probabilities in place, as on the CPU).
  const float target = threadIdx.x == 0 ? z[targets[row]] : 0.0f;

  float max = -CUDART_INF_F;
  for (int c = static_cast<int>(threadIdx.x); c < C; c += blockDim.x) max = fmaxf(max, z[c]);
  max = block_reduce<true>(max, scratch);

  float sum = 0.0f;
  for (int c = static_cast<int>(threadIdx.x); c < C; c += blockDim.x) {
    const float e = expf(z[c] - max);
    p[c] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum, scratch);

  const float inv = 1.0f / sum;
  for (int c = static_cast<int>(threadIdx.x); c < C; c += blockDim.x) p[c] *= inv;
  // max - z[t] first, in double as the CPU does: with large logits, adding log(sum) to
  // max before subtracting z[t] would cancel to ulp(max).
  if (threadIdx.x == 0) {
    row_loss[row] = static_cast<float>(static_cast<double>(logf(sum)) +
                                       (static_cast<double>(max) - static_cast<double>(target)));
  }
}

// One block of kThreads threads.
__global__ void accumulate_mean_kernel(double* loss_sum, const float* row_loss, int B) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int b = static_cast<int>(threadIdx.x); b < B; b += kThreads) sum += row_loss[b];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss_sum += partial[0] / B;
}

__global__ void softmax_ce_backward_kernel(float* dlogits, const float* probs,
                                           const std::int32_t* targets, std::int64_t n, int C,
                                           float inv_b, const LossScaleState* amp) {
  if (amp != nullptr) inv_b *= amp->scale;  // a power of two: exact
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t row = i / C;
    const int c = static_cast<int>(i - row * C);
    const float d = probs[i] * inv_b;
    dlogits[i] = c == targets[row] ? d - inv_b : d;
  }
}

// ---- optimizer --------------------------------------------------------------------

// The _rn intrinsics keep nvcc from fusing into FMAs, so the update rounds like the CPU's.
__global__ void sgd_kernel(float* params, float* velocity, const float* grads, std::int64_t n,
                           float lr, float momentum, float weight_decay, float grad_scale,
                           const LossScaleState* amp) {
  if (amp != nullptr) {
    if (amp->found_inf != 0) return;  // the step is skipped
    grad_scale /= amp->scale;         // a power of two: exact
  }
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float w = params[i];
    const float g = __fadd_rn(__fmul_rn(grads[i], grad_scale), __fmul_rn(weight_decay, w));
    const float v = __fadd_rn(__fmul_rn(momentum, velocity[i]), g);
    velocity[i] = v;
    params[i] = __fsub_rn(w, __fmul_rn(lr, v));
  }
}

// Any non-finite x sets found_inf (every writer stores the same 1: no race on the value).
__global__ void find_nonfinite_kernel(const float* x, std::int64_t n, LossScaleState* amp) {
  bool bad = false;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) bad |= !isfinite(x[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) amp->found_inf = 1;
}

__global__ void update_loss_scale_kernel(LossScaleState* amp, int growth_interval) {
  if (amp->found_inf != 0) {
    amp->scale = fmaxf(amp->scale * 0.5f, 1.0f);
    amp->clean_steps = 0;
    amp->skipped += 1;
    amp->found_inf = 0;
  } else if (++amp->clean_steps >= growth_interval) {
    amp->scale = fminf(amp->scale * 2.0f, 16777216.0f);  // 2^24: fp16's gradients fit
    amp->clean_steps = 0;
  }
}

// ---- casts ------------------------------------------------------------------------

__device__ __forceinline__ void store(__half* out, float v) { *out = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* out, float v) {
  *out = __float2bfloat16_rn(v);
}
__device__ __forceinline__ float load(const __half* in) { return __half2float(*in); }
__device__ __forceinline__ float load(const __nv_bfloat16* in) { return __bfloat162float(*in); }

template <typename T>
__global__ void cast_from_float_kernel(T* out, const float* in, std::int64_t n, float scale) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) store(out + i, in[i] * scale);
}

template <typename T>
__global__ void cast_to_float_kernel(float* out, const T* in, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) out[i] = load(in + i);
}

}  // namespace

void bias_broadcast(float* out, const float* bias, int B, int O, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(B) * O;
  if (n <= 0) return;
  bias_broadcast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, bias, n, O);
  TANDEM_CUDA_CHECK_LAUNCH("bias_broadcast_kernel");
}

void bias_backward(float* dbias, const float* dout, int B, int O, cudaStream_t stream) {
  if (B <= 0 || O <= 0) return;
  const dim3 block(32, kBiasRows);
  const dim3 grid(static_cast<unsigned>((O + 31) / 32));
  bias_backward_kernel<<<grid, block, 0, stream>>>(dbias, dout, B, O);
  TANDEM_CUDA_CHECK_LAUNCH("bias_backward_kernel");
}

// An elementwise kernel over n values, its arguments then n (nothing when n <= 0).
template <typename Kernel, typename... Args>
void launch_elementwise(Kernel kernel, const char* name, std::int64_t n, cudaStream_t stream,
                        Args... args) {
  if (n <= 0) return;
  kernel<<<blocks_for(n), kThreads, 0, stream>>>(args..., n);
  TANDEM_CUDA_CHECK_LAUNCH(name);
}

void relu_forward(float* out, const float* inp, std::int64_t n, cudaStream_t stream) {
  launch_elementwise(relu_forward_kernel, "relu_forward_kernel", n, stream, out, inp);
}

void relu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                   cudaStream_t stream) {
  launch_elementwise(relu_backward_kernel, "relu_backward_kernel", n, stream, dinp, inp, dout);
}

void gelu_forward(float* out, const float* inp, std::int64_t n, cudaStream_t stream) {
  launch_elementwise(gelu_forward_kernel, "gelu_forward_kernel", n, stream, out, inp);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n,
                   cudaStream_t stream) {
  launch_elementwise(gelu_backward_kernel, "gelu_backward_kernel", n, stream, dinp, inp, dout);
}

void softmax_cross_entropy_forward(float* probs, float* row_loss, const float* logits,
                                   const std::int32_t* targets, int B, int C, cudaStream_t stream) {
  if (B <= 0 || C <= 0) return;
  softmax_ce_forward_kernel<<<static_cast<unsigned>(B), kThreads, 0, stream>>>(probs, row_loss,
                                                                               logits, targets, C);
  TANDEM_CUDA_CHECK_LAUNCH("softmax_ce_forward_kernel");
}

void accumulate_mean(double* loss_sum, const float* row_loss, int B, cudaStream_t stream) {
  if (B <= 0) return;
  accumulate_mean_kernel<<<1, kThreads, 0, stream>>>(loss_sum, row_loss, B);
  TANDEM_CUDA_CHECK_LAUNCH("accumulate_mean_kernel");
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                                    int B, int C, cudaStream_t stream, const LossScaleState* amp) {
  const std::int64_t n = static_cast<std::int64_t>(B) * C;
  if (n <= 0) return;
  const float inv_b = 1.0f / static_cast<float>(B);
  softmax_ce_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dlogits, probs, targets, n, C,
                                                                     inv_b, amp);
  TANDEM_CUDA_CHECK_LAUNCH("softmax_ce_backward_kernel");
}

void sgd_step(float* params, float* velocity, const float* grads, std::size_t n, float lr,
              float momentum, float weight_decay, float grad_scale, cudaStream_t stream,
              const LossScaleState* amp) {
  if (n == 0) return;
  const auto count = static_cast<std::int64_t>(n);
  sgd_kernel<<<blocks_for(count), kThreads, 0, stream>>>(params, velocity, grads, count, lr,
                                                         momentum, weight_decay, grad_scale, amp);
  TANDEM_CUDA_CHECK_LAUNCH("sgd_kernel");
}

void find_nonfinite(const float* x, std::size_t n, LossScaleState* amp, cudaStream_t stream) {
  if (n == 0) return;
  const auto count = static_cast<std::int64_t>(n);
  find_nonfinite_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, amp);
  TANDEM_CUDA_CHECK_LAUNCH("find_nonfinite_kernel");
}

void update_loss_scale(LossScaleState* amp, int growth_interval, cudaStream_t stream) {
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(amp, growth_interval);
  TANDEM_CUDA_CHECK_LAUNCH("update_loss_scale_kernel");
}

namespace {

// fp32 and tf32 keep floats: there the cast is a copy. Says whether it was one.
bool copy_if_floats(void* out, const void* in, std::size_t n, Precision precision,
                    cudaStream_t stream) {
  if (precision != Precision::kFp32 && precision != Precision::kTf32) return false;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  return true;
}

}  // namespace

void cast_from_float(void* out, const float* in, std::size_t n, Precision precision, float scale,
                     cudaStream_t stream) {
  if (n == 0) return;
  TANDEM_CHECK(scale == 1.0f || casts_gemm_inputs(precision));
  if (copy_if_floats(out, in, n, precision, stream)) return;
  const auto count = static_cast<std::int64_t>(n);
  if (precision == Precision::kFp16) {
    cast_from_float_kernel<<<blocks_for(count), kThreads, 0, stream>>>(static_cast<__half*>(out),
                                                                       in, count, scale);
  } else {
    cast_from_float_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(out), in, count, scale);
  }
  TANDEM_CUDA_CHECK_LAUNCH("cast_from_float_kernel");
}

void cast_to_float(float* out, const void* in, std::size_t n, Precision precision,
                   cudaStream_t stream) {
  if (n == 0 || copy_if_floats(out, in, n, precision, stream)) return;
  const auto count = static_cast<std::int64_t>(n);
  if (precision == Precision::kFp16) {
    cast_to_float_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        out, static_cast<const __half*>(in), count);
  } else {
    cast_to_float_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        out, static_cast<const __nv_bfloat16*>(in), count);
  }
  TANDEM_CUDA_CHECK_LAUNCH("cast_to_float_kernel");
}

}  // namespace tandem::cuda
