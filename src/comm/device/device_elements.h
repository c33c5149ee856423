// Elements as the device backends' kernels compute them: fp32, or the 16-bit values of a
// compressed gradient, widened for the arithmetic and rounded back (as NCCL's reductions
// of them). For CUDA sources (.cu) only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tandem::device_elements {

__device__ inline float load(const float* p) { return *p; }
__device__ inline float load(const __half* p) { return __half2float(*p); }
__device__ inline float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ inline void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

}  // namespace tandem::device_elements
