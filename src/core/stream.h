// The handle of a device stream, named without the CUDA headers: layers that only pass a
// stream along (the communication contract, the model interface) use this type, and the
// CUDA code sees cudaStream_t, the same pointer type.
#pragma once

struct CUstream_st;

namespace tandem {

using ComputeStream = CUstream_st*;

}  // namespace tandem
