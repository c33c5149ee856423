#include "compute/cpu/dispatch.h"
#include "core/error.h"
#include "model/sgd.h"

namespace tandem {

Sgd::Sgd(SgdOptions options, std::size_t numel) : options_(options), numel_(numel) {}

TANDEM_CPU_CLONES void sgd_update(const SgdOptions& options, std::span<float> params, std::span<const float> grads,
                std::span<float> velocity, float grad_scale) {
  TANDEM_CHECK_EQ(params.size(), velocity.size());
  TANDEM_CHECK_EQ(grads.size(), velocity.size());
  const float lr = options.lr;
  const float momentum = options.momentum;
  const float decay = options.weight_decay;
  float* v = velocity.data();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grads[i] * grad_scale + decay * params[i];
    v[i] = momentum * v[i] + g;
    params[i] -= lr * v[i];
  }
}

void Sgd::step(std::span<float> params, std::span<const float> grads, float grad_scale) {
  // The velocity is allocated by the first step, so that a model whose optimizer a
  // sharded strategy runs (ddp/sharded.h) holds no state for it.
  if (velocity_.empty()) velocity_.assign(numel_, 0.0f);
  sgd_update(options_, params, grads, velocity_, grad_scale);
}

}  // namespace tandem
