// The transformer's kernels (transformer_kernels.h). Elementwise kernels use grid-stride
// loops with 64-bit indices; a row's reductions run in one block (kernel_support.cuh's
// fixed tree); reductions over rows give each output element to one thread.
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>

#include "compute/cuda/transformer_kernels.h"
#include "cuda/check.h"
#include "kernel_support.cuh"

namespace tandem::cuda {
namespace {

using detail::block_reduce;
using detail::blocks_for;
using detail::first_index;
using detail::grid_stride;
using detail::kThreads;

constexpr float kNormEps = 1e-5f;  // layers.cpp's

// ---- embedding --------------------------------------------------------------------

__global__ void embedding_forward_kernel(float* out, const std::int32_t* tokens, const float* wte,
                                         const float* wpe, std::int64_t n, int Tn, int D) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t row = i / D;
    const int c = static_cast<int>(i - row * D);
    const float e = wte[static_cast<std::int64_t>(tokens[row]) * D + c];
    out[i] = wpe == nullptr ? e : e + wpe[(row % Tn) * D + c];
  }
}

// One thread per column c of wte: it walks the tokens in order and adds each token's
// row, so every element of dwte gets its terms in the CPU's order (no two threads touch
// one element, however often a token repeats).
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout,
                                              const std::int32_t* tokens, std::int64_t N, int D) {
  const int c = static_cast<int>(blockIdx.x) * kThreads + static_cast<int>(threadIdx.x);
  if (c >= D) return;
  for (std::int64_t n = 0; n < N; ++n) {
    dwte[static_cast<std::int64_t>(tokens[n]) * D + c] += dout[n * D + c];
  }
}

// One thread per element of wpe [T, D]: the sequences in order.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int Tn,
                                              int D) {
  const std::int64_t count = static_cast<std::int64_t>(Tn) * D;
  for (std::int64_t i = first_index(); i < count; i += grid_stride()) {
    float sum = dwpe[i];
    for (int b = 0; b < B; ++b) sum += dout[static_cast<std::int64_t>(b) * count + i];
    dwpe[i] = sum;
  }
}

// ---- norms ------------------------------------------------------------------------

// One block per row.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int D) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const float* x = inp + row * D;
  float sum = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < D; i += blockDim.x) sum += x[i];
  const float m = block_reduce<false>(sum, scratch) / static_cast<float>(D);
  float var = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < D; i += blockDim.x) {
    const float d = x[i] - m;
    var += d * d;
  }
  var = block_reduce<false>(var, scratch);
  const float s = 1.0f / sqrtf(var / static_cast<float>(D) + kNormEps);
  float* o = out + row * D;
  for (int i = static_cast<int>(threadIdx.x); i < D; i += blockDim.x) {
    o[i] = (x[i] - m) * s * weight[i] + bias[i];
  }
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// One block per row: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dout * weight.
// mean == null: RMSNorm (xhat = x rstd, no mean(g) term).
__global__ void norm_backward_rows_kernel(float* dinp, const float* dresidual, const float* dout,
                                          const float* inp, const float* weight, const float* mean,
                                          const float* rstd, int D) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const float* x = inp + row * D;
  const float* d = dout + row * D;
  const float m = mean != nullptr ? mean[row] : 0.0f;
  const float s = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < D; i += blockDim.x) {
    const float g = d[i] * weight[i];
    g_sum += g;
    gx_sum += g * ((x[i] - m) * s);
  }
  const float g_mean =
      mean != nullptr ? block_reduce<false>(g_sum, scratch) / static_cast<float>(D) : 0.0f;
  const float gx_mean = block_reduce<false>(gx_sum, scratch) / static_cast<float>(D);
  float* dx = dinp + row * D;
  const float* r = dresidual != nullptr ? dresidual + row * D : nullptr;
  for (int i = static_cast<int>(threadIdx.x); i < D; i += blockDim.x) {
    const float xhat = (x[i] - m) * s;
    const float v = s * (d[i] * weight[i] - g_mean - xhat * gx_mean);
    dx[i] = r != nullptr ? r[i] + v : v;  // r[i] read before dx[i] is written: may alias
  }
}

// Block (32, kNormRows): threadIdx.x a column, threadIdx.y a residue class of rows; the
// kNormRows partial sums of a column are added in y order (as bias_backward in
// kernels.cu). dweight += sum_n dout xhat; dbias += sum_n dout (if non-null).
constexpr int kNormRows = 8;

__global__ void norm_backward_params_kernel(float* dweight, float* dbias, const float* dout,
                                            const float* inp, const float* mean, const float* rstd,
                                            int N, int D) {
  __shared__ float partial_w[kNormRows][33];
  __shared__ float partial_b[kNormRows][33];
  const int c = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  float w = 0.0f, b = 0.0f;
  if (c < D) {
    for (int n = static_cast<int>(threadIdx.y); n < N; n += kNormRows) {
      const std::int64_t i = static_cast<std::int64_t>(n) * D + c;
      const float m = mean != nullptr ? mean[n] : 0.0f;
      w += dout[i] * ((inp[i] - m) * rstd[n]);
      b += dout[i];
    }
  }
  partial_w[threadIdx.y][threadIdx.x] = w;
  partial_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < D) {
    float tw = 0.0f, tb = 0.0f;
    for (int y = 0; y < kNormRows; ++y) {
      tw += partial_w[y][threadIdx.x];
      tb += partial_b[y][threadIdx.x];
    }
    dweight[c] += tw;
    if (dbias != nullptr) dbias[c] += tb;
  }
}

// One block per row.
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* weight, int D) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const float* x = inp + row * D;
  float ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < D; i += blockDim.x) ss += x[i] * x[i];
  ss = block_reduce<false>(ss, scratch);
  const float s = 1.0f / sqrtf(ss / static_cast<float>(D) + kNormEps);
  float* o = out + row * D;
  for (int i = static_cast<int>(threadIdx.x); i < D; i += blockDim.x) o[i] = x[i] * s * weight[i];
  if (threadIdx.x == 0) rstd[row] = s;
}

// ---- residual ---------------------------------------------------------------------

__global__ void residual_forward_kernel(float* out, const float* residual, const float* bias,
                                        std::int64_t n, int O) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = bias != nullptr ? residual[i] + bias[i % O] : residual[i];
  }
}

// ---- SwiGLU -----------------------------------------------------------------------

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void swiglu_forward_kernel(float* out, const float* gate_up, std::int64_t n, int F) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t row = i / F;
    const std::int64_t at = row * 2 * F + (i - row * F);
    const float g = gate_up[at];
    out[i] = g * sigmoid(g) * gate_up[at + F];
  }
}

// d silu(g) / dg = sig + g sig (1 - sig).
__global__ void swiglu_backward_kernel(float* dgate_up, const float* dout, const float* gate_up,
                                       std::int64_t n, int F) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t row = i / F;
    const std::int64_t at = row * 2 * F + (i - row * F);
    const float g = gate_up[at];
    const float up = gate_up[at + F];
    const float sig = sigmoid(g);
    dgate_up[at] = dout[i] * up * (sig + g * sig * (1.0f - sig));
    dgate_up[at + F] = dout[i] * g * sig;
  }
}

// ---- rotary embedding -------------------------------------------------------------

// One thread per (token, pair) of the queries and keys: N x D pairs (D/2 per part).
__global__ void rope_kernel(float* qkv, const float* cos_sin, std::int64_t n, int Tn, int D, int H,
                            float sign) {
  const int hd = D / H;
  const int pairs = hd / 2;
  const int half = D / 2;  // pairs per part (queries or keys)
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const std::int64_t token = i / D;
    const int r = static_cast<int>(i - token * D);
    const int part = r / half;
    const int within = r - part * half;
    const int h = within / pairs;
    const int p = within - h * pairs;
    const int t = static_cast<int>(token % Tn);
    float* x = qkv + token * 3 * D + part * D + h * hd + 2 * p;
    const float* cs = cos_sin + (static_cast<std::int64_t>(t) * pairs + p) * 2;
    const float c = cs[0];
    const float s = sign * cs[1];
    const float x0 = x[0];
    const float x1 = x[1];
    x[0] = x0 * c - x1 * s;
    x[1] = x0 * s + x1 * c;
  }
}

// ---- causal softmax ---------------------------------------------------------------

// One block per row of scores; row r is position t = r mod T.
__global__ void causal_softmax_forward_kernel(float* att, int Tn) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % Tn);
  float* a = att + row * Tn;
  float max = -CUDART_INF_F;
  for (int s = static_cast<int>(threadIdx.x); s <= t; s += blockDim.x) max = fmaxf(max, a[s]);
  max = block_reduce<true>(max, scratch);
  float sum = 0.0f;
  for (int s = static_cast<int>(threadIdx.x); s <= t; s += blockDim.x) {
    const float e = expf(a[s] - max);
    a[s] = e;
    sum += e;
  }
  const float inv = 1.0f / block_reduce<false>(sum, scratch);
  for (int s = static_cast<int>(threadIdx.x); s < Tn; s += blockDim.x) {
    a[s] = s <= t ? a[s] * inv : 0.0f;
  }
}

__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int Tn) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const int t = static_cast<int>(row % Tn);
  const float* p = att + row * Tn;
  float* d = datt + row * Tn;
  float dot = 0.0f;
  for (int s = static_cast<int>(threadIdx.x); s <= t; s += blockDim.x) dot += p[s] * d[s];
  dot = block_reduce<false>(dot, scratch);
  for (int s = static_cast<int>(threadIdx.x); s < Tn; s += blockDim.x) {
    d[s] = s <= t ? p[s] * (d[s] - dot) : 0.0f;
  }
}

}  // namespace

void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                       int B, int Tn, int D, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(B) * Tn * D;
  if (n <= 0) return;
  embedding_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, tokens, wte, wpe, n, Tn, D);
  TANDEM_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        int B, int Tn, int D, cudaStream_t stream) {
  const std::int64_t N = static_cast<std::int64_t>(B) * Tn;
  if (N <= 0 || D <= 0) return;
  embedding_backward_wte_kernel<<<static_cast<unsigned>((D + kThreads - 1) / kThreads), kThreads, 0,
                                  stream>>>(dwte, dout, tokens, N, D);
  TANDEM_CUDA_CHECK_LAUNCH("embedding_backward_wte_kernel");
  if (dwpe == nullptr) return;
  const std::int64_t count = static_cast<std::int64_t>(Tn) * D;
  embedding_backward_wpe_kernel<<<blocks_for(count), kThreads, 0, stream>>>(dwpe, dout, B, Tn, D);
  TANDEM_CUDA_CHECK_LAUNCH("embedding_backward_wpe_kernel");
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int D, cudaStream_t stream) {
  if (N <= 0 || D <= 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(out, mean, rstd, inp,
                                                                              weight, bias, D);
  TANDEM_CUDA_CHECK_LAUNCH("layernorm_forward_kernel");
}

namespace {

void norm_backward(float* dinp, float* dweight, float* dbias, const float* dresidual,
                   const float* dout, const float* inp, const float* weight, const float* mean,
                   const float* rstd, int N, int D, cudaStream_t stream) {
  if (N <= 0 || D <= 0) return;
  // The two kernels read dout and inp and write disjoint outputs: their order is free.
  const dim3 block(32, kNormRows);
  const dim3 grid(static_cast<unsigned>((D + 31) / 32));
  norm_backward_params_kernel<<<grid, block, 0, stream>>>(dweight, dbias, dout, inp, mean, rstd, N,
                                                          D);
  TANDEM_CUDA_CHECK_LAUNCH("norm_backward_params_kernel");
  norm_backward_rows_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
      dinp, dresidual, dout, inp, weight, mean, rstd, D);
  TANDEM_CUDA_CHECK_LAUNCH("norm_backward_rows_kernel");
}

}  // namespace

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dresidual,
                        const float* dout, const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int D, cudaStream_t stream) {
  norm_backward(dinp, dweight, dbias, dresidual, dout, inp, weight, mean, rstd, N, D, stream);
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                     cudaStream_t stream) {
  if (N <= 0 || D <= 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, stream>>>(out, rstd, inp, weight,
                                                                            D);
  TANDEM_CUDA_CHECK_LAUNCH("rmsnorm_forward_kernel");
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dresidual, const float* dout,
                      const float* inp, const float* weight, const float* rstd, int N, int D,
                      cudaStream_t stream) {
  norm_backward(dinp, dweight, nullptr, dresidual, dout, inp, weight, nullptr, rstd, N, D, stream);
}

void residual_forward(float* out, const float* residual, const float* bias, int N, int O,
                      cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(N) * O;
  if (n <= 0 || (out == residual && bias == nullptr)) return;
  residual_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, residual, bias, n, O);
  TANDEM_CUDA_CHECK_LAUNCH("residual_forward_kernel");
}

void swiglu_forward(float* out, const float* gate_up, int N, int F, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(N) * F;
  if (n <= 0) return;
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, gate_up, n, F);
  TANDEM_CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N, int F,
                     cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(N) * F;
  if (n <= 0) return;
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dgate_up, dout, gate_up, n, F);
  TANDEM_CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

void rope_forward(float* qkv, const float* cos_sin, int B, int Tn, int D, int H,
                  cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(B) * Tn * D;
  if (n <= 0) return;
  rope_kernel<<<blocks_for(n), kThreads, 0, stream>>>(qkv, cos_sin, n, Tn, D, H, 1.0f);
  TANDEM_CUDA_CHECK_LAUNCH("rope_kernel");
}

void rope_backward(float* dqkv, const float* cos_sin, int B, int Tn, int D, int H,
                   cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(B) * Tn * D;
  if (n <= 0) return;
  rope_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dqkv, cos_sin, n, Tn, D, H, -1.0f);
  TANDEM_CUDA_CHECK_LAUNCH("rope_kernel");
}

void causal_softmax_forward(float* att, std::int64_t rows, int Tn, cudaStream_t stream) {
  if (rows <= 0 || Tn <= 0) return;
  causal_softmax_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(att, Tn);
  TANDEM_CUDA_CHECK_LAUNCH("causal_softmax_forward_kernel");
}

void causal_softmax_backward(float* datt, const float* att, std::int64_t rows, int Tn,
                             cudaStream_t stream) {
  if (rows <= 0 || Tn <= 0) return;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(datt, att,
                                                                                       Tn);
  TANDEM_CUDA_CHECK_LAUNCH("causal_softmax_backward_kernel");
}

}  // namespace tandem::cuda
