#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "compute/cpu/blas.h"

namespace tandem::layers {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                    int I, int O) {
  // Broadcast the bias into out first so that one sgemm with beta = 1 adds x.W on top,
  // instead of a second pass over out.
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int b = 0; b < B; ++b) std::copy_n(bias, O, out + static_cast<std::ptrdiff_t>(b) * O);
    beta = 1.0f;
  }
  sgemm(false, false, B, O, I, 1.0f, inp, I, weight, O, beta, out, O);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int I, int O) {
  // dweight[I, O] += inp^T[I, B] . dout[B, O]
  sgemm(true, false, I, O, B, 1.0f, inp, I, dout, O, 1.0f, dweight, O);
  if (dbias != nullptr) {
    for (int b = 0; b < B; ++b) {
      const float* row = dout + static_cast<std::ptrdiff_t>(b) * O;
      for (int o = 0; o < O; ++o) dbias[o] += row[o];
    }
  }
  // dinp[B, I] = dout[B, O] . weight^T[O, I]
  if (dinp != nullptr) sgemm(false, true, B, I, O, 1.0f, dout, O, weight, O, 0.0f, dinp, I);
}

void relu_forward(float* out, const float* inp, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

namespace {
constexpr float kGeluScale = static_cast<float>(0.7978845608028654);  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
}  // namespace

void gelu_forward(float* out, const float* inp, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
    out[i] = 0.5f * x * (1.0f + t);
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
    // d/dx of 0.5 x (1 + t): product rule, with dt/dx = (1 - t^2) s (1 + 3 c x^2).
    const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    dinp[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
  }
}

float softmax_cross_entropy_forward(float* probs, const float* logits, const std::int32_t* targets,
                                    int B, int C) {
  double total = 0.0;  // the mean of B small terms: double keeps it exact enough
  for (int b = 0; b < B; ++b) {
    const float* z = logits + static_cast<std::ptrdiff_t>(b) * C;
    float* p = probs + static_cast<std::ptrdiff_t>(b) * C;
    // Subtracting the row max keeps exp() from overflowing; the loss uses log-sum-exp
    // directly rather than log(p), which would underflow to -inf for tiny probabilities.
    const float max = *std::max_element(z, z + C);
    float sum = 0.0f;
    for (int c = 0; c < C; ++c) {
      p[c] = std::exp(z[c] - max);
      sum += p[c];
    }
    const float inv = 1.0f / sum;
    for (int c = 0; c < C; ++c) p[c] *= inv;
    total += static_cast<double>(std::log(sum)) + static_cast<double>(max) -
             static_cast<double>(z[targets[b]]);
  }
  return static_cast<float>(total / B);
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                                    int B, int C) {
  const float inv_b = 1.0f / static_cast<float>(B);
  for (int b = 0; b < B; ++b) {
    const float* p = probs + static_cast<std::ptrdiff_t>(b) * C;
    float* d = dlogits + static_cast<std::ptrdiff_t>(b) * C;
    for (int c = 0; c < C; ++c) d[c] = p[c] * inv_b;
    d[targets[b]] -= inv_b;
  }
}

}  // namespace tandem::layers
