// The models' kernels as forward/backward pairs on raw row-major arrays, in the manner of
// llm.c: shapes at the top of each pair, no allocation, no state. Mlp (mlp.h) and
// Transformer (transformer.h) compose them.
//
// Written once for float (training) and double (the gradient checks of the tests run
// the same code in double, where central finite differences are exact enough to compare
// against): layers::Ops<float> and layers::Ops<double>, both instantiated in layers.cpp.
//
// Gradient rule: parameter gradients (dweight, dbias, dwte, ...) accumulate with +=;
// activation gradients (dinp, dlogits) are overwritten. Where a kernel's input is the
// transformer's residual stream, its backward takes the stream's gradient from above
// explicitly (`dresidual`, may alias `dinp`) and writes dinp = dresidual + its own
// contribution, so the residual add costs no extra pass and the rule still holds.
//
// B = rows (or sequences), N = rows of tokens (B x T), D = model width, T = sequence
// length, H = heads, hd = D / H, V = vocabulary, F = MLP width, C = classes.
#pragma once

#include <cstdint>

namespace tandem::layers {

template <typename T>
struct Ops {
  // ---- Linear ----
  // inp [B, I], weight [I, O] (row-major, so out = inp . weight), bias [O] or null,
  // out [B, O].
  static void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int B, int I,
                             int O);
  // dout [B, O] -> dweight [I, O] +=, dbias [O] += (if non-null), dinp [B, I] = (if
  // non-null).
  static void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                              const T* weight, int B, int I, int O);
  // dinp [B, I] = dout [B, O] . weight^T: linear_backward's input gradient alone.
  static void linear_input_grad(T* dinp, const T* dout, const T* weight, int B, int I, int O);
  // A Linear layer that writes into the residual stream: out = residual + inp . weight
  // (+ bias); residual and out [B, O] may alias. Its backward is linear_backward with
  // dout = the stream's gradient.
  static void linear_residual_forward(T* out, const T* residual, const T* inp, const T* weight,
                                      const T* bias, int B, int I, int O);

  // ---- Elementwise, over n values; backward takes the forward's *input* and may run in
  // place (dinp == dout) ----
  static void relu_forward(T* out, const T* inp, std::int64_t n);
  static void relu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n);
  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  static void gelu_forward(T* out, const T* inp, std::int64_t n);
  static void gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n);
  // The bias of the Linear layer before a GELU, fused with it (one pass over the MLP's
  // widest activation instead of two): up [N, F] += bias [F], then out = gelu(up).
  static void bias_gelu_forward(T* out, T* up, const T* bias, int N, int F);
  // gelu_backward on up [N, F], and dbias [F] += the column sums of dinp, in one pass.
  static void gelu_bias_backward(T* dinp, T* dbias, const T* up, const T* dout, int N, int F);
  // SwiGLU (llama's MLP) on gate_up [N, 2F], a row's gate then its up:
  // out [N, F] = silu(gate) * up, silu(x) = x * sigmoid(x).
  static void swiglu_forward(T* out, const T* gate_up, int N, int F);
  // dout [N, F] -> dgate_up [N, 2F] (overwritten).
  static void swiglu_backward(T* dgate_up, const T* dout, const T* gate_up, int N, int F);

  // ---- Losses ----
  // Softmax cross-entropy, mean over rows. logits [B, C], targets [B] in [0, C), probs
  // [B, C] (may alias logits: the row becomes its probabilities). Returns the mean loss.
  static double cross_entropy_forward(T* probs, const T* logits, const std::int32_t* targets,
                                      int B, int C);
  // dlogits [B, C] = (probs - onehot(targets)) / B; may alias probs.
  static void cross_entropy_backward(T* dlogits, const T* probs, const std::int32_t* targets,
                                     int B, int C);

  // ---- Transformer ----
  // Token plus learned position embedding (gpt). tokens [B, T] in [0, V), wte [V, D],
  // wpe [T, D] or null (llama has no learned positions), out [B, T, D].
  static void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe,
                                int B, int Tn, int D);
  // dout [B, T, D] -> dwte [V, D] += (the tokens' rows), dwpe [T, D] += (if non-null).
  static void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens,
                                 int B, int Tn, int D);

  // LayerNorm over the last dimension, eps 1e-5. inp [N, D], weight and bias [D]; out
  // [N, D]; mean and rstd [N] (1 / sqrt(var + eps)) are what the backward needs.
  static void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight,
                                const T* bias, int N, int D);
  // dout [N, D] -> dweight, dbias [D] +=; dinp [N, D] = dresidual (if non-null) + dL/dinp.
  static void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dresidual,
                                 const T* dout, const T* inp, const T* weight, const T* mean,
                                 const T* rstd, int N, int D);

  // RMSNorm (llama), eps 1e-5: out = inp / sqrt(mean(inp^2) + eps) * weight. rstd [N].
  static void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int D);
  // dout [N, D] -> dweight [D] +=; dinp [N, D] = dresidual (if non-null) + dL/dinp.
  static void rmsnorm_backward(T* dinp, T* dweight, const T* dresidual, const T* dout,
                               const T* inp, const T* weight, const T* rstd, int N, int D);

  // Causal multi-head self-attention. qkv [B, T, 3D]: each token's query, key and value,
  // head h at columns h*hd of each third. out [B, T, D] (heads side by side), att
  // [B, H, T, T]: the softmax of (q . k^T) / sqrt(hd) over keys s <= t, zero above the
  // diagonal. The products are BLAS calls on strided views, one per (sequence, head).
  static void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int D, int H);
  // dout [B, T, D] -> dqkv [B, T, 3D] (overwritten). scratch: T * T values.
  static void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att,
                                 int B, int Tn, int D, int H);

  // Rotary position embedding (llama), in place on the queries and keys of qkv
  // [B, T, 3D]: within every head, the pair (x[2i], x[2i+1]) of position t turns by
  // t * theta_i, theta_i = 10000^(-2i / hd). cos_sin [T, hd/2, 2] from rope_table.
  static void rope_table(T* cos_sin, int Tn, int hd);
  static void rope_forward(T* qkv, const T* cos_sin, int B, int Tn, int D, int H);
  // The inverse turn (the rotation's transpose), in place on dqkv's queries and keys.
  static void rope_backward(T* dqkv, const T* cos_sin, int B, int Tn, int D, int H);

  // ---- Tensor parallelism (Note [tensor-parallel layout] in layout.cpp); each rank runs
  // these on its shard, between the collectives the passes issue ----
  // A vocabulary-parallel embedding's part: out [N, D] = wte's row (tokens - vbegin) for
  // the tokens in [vbegin, vbegin + vcount) this rank holds (wte [vcount, D]), zero for
  // the others; the sum over ranks is the embedding.
  static void vocab_embedding_forward(T* out, const std::int32_t* tokens, const T* wte, int N,
                                      int D, int vbegin, int vcount);
  // dout [N, D] -> dwte [vcount, D] += for the tokens this rank holds.
  static void vocab_embedding_backward(T* dwte, const T* dout, const std::int32_t* tokens, int N,
                                       int D, int vbegin, int vcount);
  // gpt's positions, after the embedding's sum, on `count` tokens from token `first` of
  // sequences of Tn: out [count, D] += wpe [Tn, D] at each token's position; and dwpe
  // [Tn, D] += dout [count, D] likewise.
  static void add_positions(T* out, const T* wpe, int first, int count, int Tn, int D);
  static void positions_backward(T* dwpe, const T* dout, int first, int count, int Tn, int D);
  // After a row-parallel product's sum: out [N, D] = residual + bias (if non-null) + out.
  static void residual_add(T* out, const T* residual, const T* bias, int N, int D);
  // Cross-entropy over a vocabulary split by columns: logits [N, C] are this rank's
  // columns [vbegin, vbegin + C) of the whole's. Around two collectives:
  //   row_max: rowmax [N] = each row's largest logit here    -> the max over ranks
  //   exp_sums: probs = exp(logits - rowmax); stats [2N]: each row's sum of them, then
  //     its target's logit where this rank holds it (else 0) -> summed over ranks
  //   finish: probs /= the sum; returns the mean of log(sum) + rowmax - target logit.
  // probs may alias logits.
  static void cross_entropy_row_max(T* rowmax, const T* logits, int N, int C);
  static void cross_entropy_exp_sums(T* probs, T* stats, const T* logits, const T* rowmax,
                                     const std::int32_t* targets, int N, int C, int vbegin);
  static double cross_entropy_finish(T* probs, const T* stats, const T* rowmax, int N, int C);
  // dlogits [N, C] = (probs - onehot(targets - vbegin)) / N, the one-hot only where this
  // rank holds the target; may alias probs. vbegin 0 and the whole vocabulary:
  // cross_entropy_backward.
  static void cross_entropy_backward_columns(T* dlogits, const T* probs,
                                             const std::int32_t* targets, int N, int C, int vbegin);
};

// layers.cpp instantiates both; it must not see these first, or GCC drops the
// target_clones of the definitions there (compute/cpu/dispatch.h).
#ifndef TANDEM_LAYERS_INSTANTIATE
extern template struct Ops<float>;
extern template struct Ops<double>;
#endif

}  // namespace tandem::layers
