// The transformer's passes (model/transformer_passes.h) instantiated for the CUDA backend.
#include "model/cuda/cuda_transformer.h"

#include "model/transformer_passes.h"

namespace tandem {

template class TransformerOn<cuda::CudaBackend>;

}  // namespace tandem
