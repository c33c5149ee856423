// The transformer of model/transformer.h on one CUDA device: the same passes
// (model/transformer_passes.h) over the CUDA backend (cuda_backend.h), so the same
// ModelLayout, flat arrays, units, initial parameters for a seed and spans as the CPU
// Transformer, with the compute enqueued on the backend's stream and timed by CUDA events.
#pragma once

#include "model/cuda/cuda_backend.h"
#include "model/transformer.h"

namespace tandem {
extern template class TransformerOn<cuda::CudaBackend>;
}  // namespace tandem

namespace tandem::cuda {

using CudaTransformer = TransformerOn<CudaBackend>;

}  // namespace tandem::cuda
