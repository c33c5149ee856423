// The model's kernels as forward/backward pairs on raw row-major arrays, in the manner of
// llm.c: shapes at the top of each pair, no allocation, no state. Model composes them.
//
// Gradient rule: parameter gradients (dweight, dbias) accumulate with +=; activation
// gradients (dinp, dlogits) are overwritten.
#pragma once

#include <cstdint>

namespace tandem::layers {

// Linear. inp [B, I], weight [I, O] (row-major, so out = inp . weight), bias [O] or null,
// out [B, O].
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                    int I, int O);
// dout [B, O] -> dweight [I, O] +=, dbias [O] += (if non-null), dinp [B, I] = (if non-null).
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int I, int O);

// Elementwise activations over n values. Backward takes the forward's *input* and may run
// in place (dinp == dout).
void relu_forward(float* out, const float* inp, std::int64_t n);
void relu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n);
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(float* out, const float* inp, std::int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::int64_t n);

// Softmax cross-entropy, mean over rows. logits [B, C], targets [B] in [0, C), probs [B, C].
// Returns the mean loss; probs is what the backward needs.
float softmax_cross_entropy_forward(float* probs, const float* logits, const std::int32_t* targets,
                                    int B, int C);
// dlogits [B, C] = (probs - onehot(targets)) / B.
void softmax_cross_entropy_backward(float* dlogits, const float* probs, const std::int32_t* targets,
                                    int B, int C);

}  // namespace tandem::layers
