#include "core/error.h"
#include "model/model.h"

namespace tandem {

Sgd::Sgd(SgdOptions options, std::size_t numel) : options_(options), numel_(numel) {}

void Sgd::step(std::span<float> params, std::span<const float> grads, float grad_scale) {
  // The velocity is allocated by the first step, so that a model whose optimizer a
  // sharded strategy runs (ddp/sharded.h) holds no state for it.
  if (velocity_.empty()) velocity_.assign(numel_, 0.0f);
  TANDEM_CHECK_EQ(params.size(), velocity_.size());
  TANDEM_CHECK_EQ(grads.size(), velocity_.size());
  const float lr = options_.lr;
  const float momentum = options_.momentum;
  const float decay = options_.weight_decay;
  float* v = velocity_.data();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grads[i] * grad_scale + decay * params[i];
    v[i] = momentum * v[i] + g;
    params[i] -= lr * v[i];
  }
}

}  // namespace tandem
