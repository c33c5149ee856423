// The CPU optimizer: SGD on the flat arrays (model/layout.h), the rule every device
// follows (compute/cuda/kernels.h's sgd_step rounds like it).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace tandem {

// SGD with momentum and decoupled-from-nothing L2 weight decay, on the flat arrays:
//   g = grad * grad_scale + weight_decay * w;  v = momentum * v + g;  w -= lr * v
struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
};

// One step of that rule on spans of equal size; `velocity` is the momentum state.
void sgd_update(const SgdOptions& options, std::span<float> params, std::span<const float> grads,
                std::span<float> velocity, float grad_scale);

class Sgd {
 public:
  // The velocity (numel floats, zero) is allocated by the first step.
  Sgd(SgdOptions options, std::size_t numel);
  void step(std::span<float> params, std::span<const float> grads, float grad_scale = 1.0f);
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::size_t numel_ = 0;
  std::vector<float> velocity_;
};

}  // namespace tandem
