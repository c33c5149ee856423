// Causal multi-head self-attention on a GPU, the twin of layers::Ops::attention_forward and
// attention_backward (model/layers.h), same layout: qkv [B, T, 3D] holds each token's
// query, key and value, head h at columns h*hd of each third; att [B, H, T, T] the
// probabilities. The products are cuBLAS strided-batched GEMMs on views of qkv, one call
// per sequence for all H heads (head h at column h*hd, rows 3D apart: the CPU's per-head
// BLAS calls, batched); the masked softmax and its backward are kernels
// (transformer_kernels.h). Enqueued on the handle's stream.
#pragma once

#include <cuda_runtime_api.h>

#include "compute/cuda/gemm.h"
#include "compute/precision.h"

namespace tandem::cuda {

// qkv [B, T, 3D] -> att [B, H, T, T] (softmax of q.k^T / sqrt(hd) over s <= t, zero
// above the diagonal), out [B, T, D] (heads side by side).
void attention_forward(const CublasHandle& blas, Precision precision, float* out, float* att,
                       const float* qkv, int B, int Tn, int D, int H, cudaStream_t stream);
// dout [B, T, D] -> dqkv [B, T, 3D] (overwritten). scratch: H * T * T floats.
void attention_backward(const CublasHandle& blas, Precision precision, float* dqkv, float* scratch,
                        const float* dout, const float* qkv, const float* att, int B, int Tn, int D,
                        int H, cudaStream_t stream);

}  // namespace tandem::cuda
