// The models of model/mlp.h and model/transformer.h on one CUDA device: the same passes
// (mlp_passes.h, transformer_passes.h) over the CUDA backend (cuda_backend.h), so the same
// flat layout, initial parameters for a seed, gradient bucket plans (ddp/reducer.h) and
// spans as the CPU's, with the compute enqueued on the backend's stream and timed by CUDA
// events. As RankModels (model/rank_model.h) they register for --device cuda
// (cuda_rank_model.cpp). CudaSgd is the SGD step on device arrays.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

#include "cuda/resources.h"
#include "model/cuda/cuda_backend.h"
#include "model/mlp.h"
#include "model/sgd.h"
#include "model/transformer.h"

namespace tandem {
extern template class MlpOn<cuda::CudaBackend>;
extern template class TransformerOn<cuda::CudaBackend>;
}  // namespace tandem

namespace tandem::cuda {

using CudaModel = MlpOn<CudaBackend>;
using CudaTransformer = TransformerOn<CudaBackend>;

// SGD (sgd.h's rule, sgd.cpp's rounding) on the flat fp32 device arrays.
class CudaSgd {
 public:
  // The velocity of `numel` parameters is allocated and zeroed by the first whole step,
  // as the CPU's Sgd does: a sharded strategy, which steps its shards with their own
  // velocity, never allocates it.
  CudaSgd(SgdOptions options, std::size_t numel);
  // With `amp`: fp16's loss scale divided out, or the step skipped (compute/cuda/kernels.h).
  void step(float* params, const float* grads, float grad_scale, cudaStream_t stream,
            const LossScaleState* amp = nullptr);
  // The same rule on spans of device memory with the caller's `velocity` (a shard's).
  void step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
            float grad_scale, cudaStream_t stream) const;
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::size_t numel_ = 0;
  DeviceBuffer<float> velocity_;
};

}  // namespace tandem::cuda
