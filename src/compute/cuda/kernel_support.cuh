// What tandem's kernel files share (kernels.cu, transformer_kernels.cu): launch shapes,
// grid-stride indices, and the fixed-order warp and block reductions that keep every
// result independent of scheduling (no atomics). Device code only; included by .cu files
// of this directory.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>

namespace tandem::cuda::detail {

inline constexpr int kThreads = 256;  // a multiple of 32: the block reductions assume whole warps
inline constexpr std::int64_t kMaxBlocks = 65536;

inline unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ __forceinline__ std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() {
  return static_cast<std::int64_t>(blockDim.x) * gridDim.x;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Every thread of the block gets the result. scratch holds 32 floats; the leading
// barrier lets a second reduction reuse it after the first one's readers are done.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? scratch[lane] : (kMax ? -CUDART_INF_F : 0.0f);
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

}  // namespace tandem::cuda::detail
