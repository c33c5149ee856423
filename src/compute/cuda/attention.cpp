// Causal attention (attention.h): the CPU's per-(sequence, head) products of
// layers.cpp, as one strided-batched GEMM per sequence over its heads.
#include "compute/cuda/attention.h"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "compute/cuda/transformer_kernels.h"

namespace tandem::cuda {

// Note [heads as interleaved batches]
// A head's queries, keys and values are views of qkv (T rows, 3D apart, the head's hd
// columns), so batch i of a strided-batched GEMM is the previous one moved hd elements
// on: the matrices interleave. Inputs may overlap freely. The outputs (a head's slice of
// out [B, T, D], or of dqkv) interleave too, but no element is written by two batches.
// The GPU tests check it (TransformerKernelTest.CausalAttentionForwardAndBackward in
// tests/gpu/transformer_kernels_test.cpp); should a cuBLAS version ever mishandle it, the
// fallback is llm.c's: permute q, k, v into [B, H, T, hd] copies and back.

void attention_forward(const CublasHandle& blas, Precision precision, float* out, float* att,
                       const float* qkv, int B, int Tn, int D, int H, cudaStream_t stream) {
  const int hd = D / H;
  const int C3 = 3 * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const long long TT = static_cast<long long>(Tn) * Tn;
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<std::ptrdiff_t>(b) * Tn * C3;
    float* a = att + static_cast<std::ptrdiff_t>(b) * H * TT;
    // scores [T, T] = q [T, hd] . k^T [hd, T] / sqrt(hd), per head
    gemm_strided_batched(blas, precision, false, true, Tn, Tn, hd, scale, q, C3, hd, q + D, C3, hd,
                         0.0f, a, Tn, TT, H);
  }
  causal_softmax_forward(att, static_cast<std::int64_t>(B) * H * Tn, Tn, stream);
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + static_cast<std::ptrdiff_t>(b) * Tn * C3 + 2 * D;
    const float* a = att + static_cast<std::ptrdiff_t>(b) * H * TT;
    // out_h [T, hd] = att [T, T] . v [T, hd]; the zeros above the diagonal mask the future
    gemm_strided_batched(blas, precision, false, false, Tn, hd, Tn, 1.0f, a, Tn, TT, v, C3, hd,
                         0.0f, out + static_cast<std::ptrdiff_t>(b) * Tn * D, D, hd, H);
  }
}

// With P = att: dP = dout_h . v^T; dv = P^T . dout_h; dS = causal_softmax_backward(dP);
// dq = dS . k / sqrt(hd); dk = dS^T . q / sqrt(hd). The scratch (dP, then dS) is reused
// by every sequence, in stream order.
void attention_backward(const CublasHandle& blas, Precision precision, float* dqkv, float* scratch,
                        const float* dout, const float* qkv, const float* att, int B, int Tn, int D,
                        int H, cudaStream_t stream) {
  const int hd = D / H;
  const int C3 = 3 * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const long long TT = static_cast<long long>(Tn) * Tn;
  float* dp = scratch;
  for (int b = 0; b < B; ++b) {
    const float* q = qkv + static_cast<std::ptrdiff_t>(b) * Tn * C3;
    const float* k = q + D;
    const float* v = q + 2 * D;
    float* dq = dqkv + static_cast<std::ptrdiff_t>(b) * Tn * C3;
    float* dk = dq + D;
    float* dv = dq + 2 * D;
    const float* p = att + static_cast<std::ptrdiff_t>(b) * H * TT;
    const float* d = dout + static_cast<std::ptrdiff_t>(b) * Tn * D;
    gemm_strided_batched(blas, precision, false, true, Tn, Tn, hd, 1.0f, d, D, hd, v, C3, hd, 0.0f,
                         dp, Tn, TT, H);
    gemm_strided_batched(blas, precision, true, false, Tn, hd, Tn, 1.0f, p, Tn, TT, d, D, hd, 0.0f,
                         dv, C3, hd, H);
    causal_softmax_backward(dp, p, static_cast<std::int64_t>(H) * Tn, Tn, stream);
    gemm_strided_batched(blas, precision, false, false, Tn, hd, Tn, scale, dp, Tn, TT, k, C3, hd,
                         0.0f, dq, C3, hd, H);
    gemm_strided_batched(blas, precision, true, false, Tn, hd, Tn, scale, dp, Tn, TT, q, C3, hd,
                         0.0f, dk, C3, hd, H);
  }
}

}  // namespace tandem::cuda
