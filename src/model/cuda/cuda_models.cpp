// The models' passes (model/mlp_passes.h, transformer_passes.h) instantiated for the CUDA
// backend, and CudaSgd.
#include "model/cuda/cuda_models.h"

#include "compute/cuda/kernels.h"
#include "core/error.h"
#include "model/mlp_passes.h"
#include "model/transformer_passes.h"

namespace tandem {

template class MlpOn<cuda::CudaBackend>;
template class TransformerOn<cuda::CudaBackend>;

}  // namespace tandem

namespace tandem::cuda {

CudaSgd::CudaSgd(SgdOptions options, std::size_t numel) : options_(options), numel_(numel) {}

void CudaSgd::step(float* params, const float* grads, float grad_scale, cudaStream_t stream,
                   const LossScaleState* amp) {
  if (velocity_.size() != numel_) {
    velocity_ = DeviceBuffer<float>(numel_);
    velocity_.zero(stream);  // ordered before this step and every later one on the stream
  }
  sgd_step(params, velocity_.data(), grads, velocity_.size(), options_.lr, options_.momentum,
           options_.weight_decay, grad_scale, stream, amp);
}

void CudaSgd::step(std::span<float> params, std::span<const float> grads, std::span<float> velocity,
                   float grad_scale, cudaStream_t stream) const {
  TANDEM_CHECK_EQ(params.size(), velocity.size());
  TANDEM_CHECK_EQ(grads.size(), velocity.size());
  if (params.empty()) return;
  sgd_step(params.data(), velocity.data(), grads.data(), params.size(), options_.lr,
           options_.momentum, options_.weight_decay, grad_scale, stream);
}

}  // namespace tandem::cuda
