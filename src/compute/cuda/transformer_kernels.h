// The transformer's own CUDA kernels, as forward/backward pairs over raw row-major
// device arrays: the GPU twins of layers::Ops (model/layers.h), same shapes, same
// constants, same gradient rule. Matrix products are not here: they are cuBLAS calls
// (gemm.h), attention's as strided-batched GEMMs around the causal softmax below
// (attention.h). model/cuda/cuda_backend.cpp hands them to the model passes. Each function
// enqueues on `stream` and returns at once; launch errors throw RuntimeError; counts of
// zero launch nothing.
//
// Gradient rule: parameter gradients (dwte, dwpe, dweight, dbias) accumulate with +=;
// activation gradients (dinp, dgate_up, dqkv, datt) are overwritten. Where the input is
// the residual stream, backward takes the stream's gradient from above (`dresidual`,
// may alias dinp) and writes dinp = dresidual + its own contribution.
//
// Deterministic: no atomics. A row's reductions (norm statistics, softmax) run in one
// block in a fixed tree; reductions over rows (dweight, dbias, dwpe, dwte) give each output
// element to one thread, which adds the rows in order. A repeated run is bit for bit the
// same.
//
// B = sequences, T = sequence length, N = B x T tokens, D = model width, H = heads,
// hd = D / H, V = vocabulary, F = MLP width.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda {

// ---- Embedding ----
// tokens [B, T] in [0, V), wte [V, D], wpe [T, D] or null (llama) -> out [B, T, D] =
// wte[token] (+ wpe[t]).
void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                       int B, int Tn, int D, cudaStream_t stream);
// dout [B, T, D] -> dwte [V, D] += (the tokens' rows, in token order as on the CPU),
// dwpe [T, D] += (if non-null).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        int B, int Tn, int D, cudaStream_t stream);

// ---- Norms (eps 1e-5) ----
// LayerNorm: inp [N, D], weight, bias [D] -> out [N, D], mean, rstd [N].
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int D, cudaStream_t stream);
// dout [N, D] -> dweight, dbias [D] +=; dinp [N, D] = dresidual (if non-null) + dL/dinp.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dresidual,
                        const float* dout, const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int D, cudaStream_t stream);
// RMSNorm: out = inp / sqrt(mean(inp^2) + eps) * weight; rstd [N].
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                     cudaStream_t stream);
// dout [N, D] -> dweight [D] +=; dinp [N, D] = dresidual (if non-null) + dL/dinp.
void rmsnorm_backward(float* dinp, float* dweight, const float* dresidual, const float* dout,
                      const float* inp, const float* weight, const float* rstd, int N, int D,
                      cudaStream_t stream);

// ---- Residual ----
// out [N, O] = residual [N, O] (+ bias [O], if non-null); out may alias residual. A GEMM
// with beta = 1 then adds inp . weight on top (a Linear layer writing into the stream).
void residual_forward(float* out, const float* residual, const float* bias, int N, int O,
                      cudaStream_t stream);

// ---- SwiGLU (llama's MLP) ----
// gate_up [N, 2F] (a row's gate, then its up) -> out [N, F] = silu(gate) * up.
void swiglu_forward(float* out, const float* gate_up, int N, int F, cudaStream_t stream);
// dout [N, F] -> dgate_up [N, 2F].
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N, int F,
                     cudaStream_t stream);

// ---- Rotary embedding (llama), in place on the queries and keys of qkv [B, T, 3D] ----
// cos_sin [T, hd/2, 2] (layers::Ops<float>::rope_table, computed on the host in double).
void rope_forward(float* qkv, const float* cos_sin, int B, int Tn, int D, int H,
                  cudaStream_t stream);
// The inverse turn, in place on dqkv.
void rope_backward(float* dqkv, const float* cos_sin, int B, int Tn, int D, int H,
                   cudaStream_t stream);

// ---- Causal softmax (attention's middle), over rows of T scores ----
// att [rows, T], row r at position t = r mod T: softmax over s <= t in place, zero above
// the diagonal. The scores' 1/sqrt(hd) is the GEMM's alpha.
void causal_softmax_forward(float* att, std::int64_t rows, int Tn, cudaStream_t stream);
// datt [rows, T] holds dL/dP on entry and dL/dS on return (S the scaled scores):
// dS[t, s] = P[t, s] (dP[t, s] - sum_s' P[t, s'] dP[t, s']), zero above the diagonal.
void causal_softmax_backward(float* datt, const float* att, std::int64_t rows, int Tn,
                             cudaStream_t stream);

}  // namespace tandem::cuda
