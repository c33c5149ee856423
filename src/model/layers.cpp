// The kernels of layers.h, once for float and double. Inner loops run over one row of
// contiguous values with no calls, so the compiler vectorizes them; matrix products go
// to BLAS (gemm: sgemm or dgemm).
#define TANDEM_LAYERS_INSTANTIATE  // see the end of layers.h
#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "compute/cpu/blas.h"
#include "compute/cpu/dispatch.h"
#include "model/fast_math.h"

namespace tandem::layers {
namespace {

// exp and tanh: fastmath's vectorizable ones in float (libm's are scalar calls that cost
// as much as a GPT step's matrix products); libm's in double, where the gradient checks
// want every digit.
[[gnu::always_inline]] inline float exp_of(float x) { return fastmath::exp(x); }
inline double exp_of(double x) { return std::exp(x); }
[[gnu::always_inline]] inline float tanh_of(float x) { return fastmath::tanh(x); }
inline double tanh_of(double x) { return std::tanh(x); }
template <typename T>
T sigmoid_of(T x) {
  return T(1) / (T(1) + exp_of(-x));
}

constexpr double kNormEps = 1e-5;
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

inline std::ptrdiff_t at(std::ptrdiff_t row, int width) { return row * width; }

// GELU (tanh form) and its derivative at x, inlined into each loop that needs them.
template <typename T>
[[gnu::always_inline]] inline T gelu_of(T x) {
  const T s = T(kGeluScale), c = T(kGeluCubic);
  const T t = tanh_of(s * (x + c * x * x * x));
  return T(0.5) * x * (T(1) + t);
}

template <typename T>
[[gnu::always_inline]] inline T gelu_grad_of(T x) {
  const T s = T(kGeluScale), c = T(kGeluCubic);
  const T t = tanh_of(s * (x + c * x * x * x));
  // d/dx of 0.5 x (1 + t): product rule, with dt/dx = (1 - t^2) s (1 + 3 c x^2).
  const T dt = (T(1) - t * t) * s * (T(1) + T(3) * c * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * dt;
}

// Row reductions in 16 independent lanes (one AVX-512 register of floats), combined in a
// fixed order: the compiler vectorizes them (a single running sum or std::max_element it
// cannot, without reassociating), and the result is the same on every run and in every
// build of dispatch.h. Over a GPT's vocabulary rows (50304 wide) this is what keeps the
// softmax from costing as much as the head's GEMM; over a LayerNorm's rows, what keeps
// its mean and variance from being a chain of dependent adds.
constexpr int kLanes = 16;

// sum over i < n of f(i), in lanes. Always inlined: each build of dispatch.h gets its own
// copy at its own width (a helper left out of line would be built once, for the baseline).
template <typename T, typename F>
[[gnu::always_inline]] inline T lane_sum(int n, F f) {
  T lane[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += f(i + k);
  }
  for (; i < n; ++i) lane[0] += f(i);
  T sum = 0;
  for (int k = 0; k < kLanes; ++k) sum += lane[k];
  return sum;
}

template <typename T>
TANDEM_CPU_CLONES T row_max(const T* x, int n) {
  T lane[kLanes];
  for (int k = 0; k < kLanes; ++k) lane[k] = x[0];
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] = std::max(lane[k], x[i + k]);
  }
  for (; i < n; ++i) lane[0] = std::max(lane[0], x[i]);
  T m = lane[0];
  for (int k = 1; k < kLanes; ++k) m = std::max(m, lane[k]);
  return m;
}

// p[i] = e^(x[i] - shift) for i < n; returns their sum.
template <typename T>
TANDEM_CPU_CLONES T exp_shifted_sum(T* p, const T* x, T shift, int n) {
  for (int i = 0; i < n; ++i) p[i] = exp_of(x[i] - shift);
  return lane_sum<T>(n, [p](int i) { return p[i]; });
}

}  // namespace

// ---- Linear ----

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::linear_forward(T* out, const T* inp, const T* weight, const T* bias,
                                              int B, int I, int O) {
  // Broadcast the bias into out first so that one gemm with beta = 1 adds x.W on top,
  // instead of a second pass over out.
  T beta = 0;
  if (bias != nullptr) {
    for (int b = 0; b < B; ++b) std::copy_n(bias, O, out + at(b, O));
    beta = 1;
  }
  gemm(false, false, B, O, I, T(1), inp, I, weight, O, beta, out, O);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::linear_backward(T* dinp, T* dweight, T* dbias, const T* dout,
                                               const T* inp, const T* weight, int B, int I, int O) {
  // dweight[I, O] += inp^T[I, B] . dout[B, O]
  gemm(true, false, I, O, B, T(1), inp, I, dout, O, T(1), dweight, O);
  if (dbias != nullptr) {
    for (int b = 0; b < B; ++b) {
      const T* row = dout + at(b, O);
      for (int o = 0; o < O; ++o) dbias[o] += row[o];
    }
  }
  if (dinp != nullptr) linear_input_grad(dinp, dout, weight, B, I, O);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::linear_input_grad(T* dinp, const T* dout, const T* weight, int B,
                                                 int I, int O) {
  // dinp[B, I] = dout[B, O] . weight^T[O, I]
  gemm(false, true, B, I, O, T(1), dout, O, weight, O, T(0), dinp, I);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::linear_residual_forward(T* out, const T* residual, const T* inp,
                                                       const T* weight, const T* bias, int B, int I,
                                                       int O) {
  // out = residual (+ bias) first, then one gemm with beta = 1 adds inp . weight.
  for (std::ptrdiff_t n = 0; n < B; ++n) {
    T* o = out + at(n, O);
    const T* r = residual + at(n, O);
    if (bias != nullptr) {
      for (int i = 0; i < O; ++i) o[i] = r[i] + bias[i];
    } else if (o != r) {
      std::memcpy(o, r, sizeof(T) * static_cast<std::size_t>(O));
    }
  }
  gemm(false, false, B, O, I, T(1), inp, I, weight, O, T(1), out, O);
}

// ---- Elementwise ----

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::relu_forward(T* out, const T* inp, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = inp[i] > T(0) ? inp[i] : T(0);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::relu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dinp[i] = inp[i] > T(0) ? dout[i] : T(0);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::gelu_forward(T* out, const T* inp, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = gelu_of(inp[i]);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::gelu_backward(T* dinp, const T* inp, const T* dout, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dinp[i] = dout[i] * gelu_grad_of(inp[i]);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::bias_gelu_forward(T* out, T* up, const T* bias, int N, int F) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    T* u = up + at(n, F);
    T* o = out + at(n, F);
    for (int i = 0; i < F; ++i) {
      u[i] += bias[i];
      o[i] = gelu_of(u[i]);
    }
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::gelu_bias_backward(T* dinp, T* dbias, const T* up, const T* dout,
                                                  int N, int F) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* u = up + at(n, F);
    const T* d = dout + at(n, F);
    T* di = dinp + at(n, F);
    for (int i = 0; i < F; ++i) {
      di[i] = d[i] * gelu_grad_of(u[i]);
      dbias[i] += di[i];
    }
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::swiglu_forward(T* out, const T* gate_up, int N, int F) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* gate = gate_up + at(n, 2 * F);
    const T* up = gate + F;
    T* o = out + at(n, F);
    for (int i = 0; i < F; ++i) o[i] = gate[i] * sigmoid_of(gate[i]) * up[i];
  }
}

// d silu(g) / dg = sig + g sig (1 - sig).
template <typename T>
TANDEM_CPU_CLONES void Ops<T>::swiglu_backward(T* dgate_up, const T* dout, const T* gate_up, int N,
                                               int F) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* gate = gate_up + at(n, 2 * F);
    const T* up = gate + F;
    const T* d = dout + at(n, F);
    T* dgate = dgate_up + at(n, 2 * F);
    T* dup = dgate + F;
    for (int i = 0; i < F; ++i) {
      const T g = gate[i];
      const T sig = sigmoid_of(g);
      dgate[i] = d[i] * up[i] * (sig + g * sig * (T(1) - sig));
      dup[i] = d[i] * g * sig;
    }
  }
}

// ---- Losses ----

template <typename T>
TANDEM_CPU_CLONES double Ops<T>::cross_entropy_forward(T* probs, const T* logits,
                                                       const std::int32_t* targets, int B, int C) {
  double total = 0.0;  // the mean of B terms: double keeps it exact enough
  for (std::ptrdiff_t b = 0; b < B; ++b) {
    const T* z = logits + at(b, C);
    T* p = probs + at(b, C);
    // Subtracting the row max keeps exp() in range; the loss uses log-sum-exp directly
    // rather than log(p), which underflows for tiny probabilities. The target's logit is
    // read before the row (which may alias probs) turns into probabilities.
    const T target = z[targets[b]];
    const T max = row_max(z, C);
    const T sum = exp_shifted_sum(p, z, max, C);
    const T inv = T(1) / sum;
    for (int c = 0; c < C; ++c) p[c] *= inv;
    total +=
        std::log(static_cast<double>(sum)) + static_cast<double>(max) - static_cast<double>(target);
  }
  return total / B;
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::cross_entropy_backward(T* dlogits, const T* probs,
                                                      const std::int32_t* targets, int B, int C) {
  cross_entropy_backward_columns(dlogits, probs, targets, B, C, 0);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::cross_entropy_backward_columns(T* dlogits, const T* probs,
                                                              const std::int32_t* targets, int N,
                                                              int C, int vbegin) {
  const T inv_n = T(1) / static_cast<T>(N);
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* p = probs + at(n, C);
    T* d = dlogits + at(n, C);
    for (int c = 0; c < C; ++c) d[c] = p[c] * inv_n;
    const int target = targets[n] - vbegin;
    if (target >= 0 && target < C) d[target] -= inv_n;
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::cross_entropy_row_max(T* rowmax, const T* logits, int N, int C) {
  for (std::ptrdiff_t n = 0; n < N; ++n) rowmax[n] = row_max(logits + at(n, C), C);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::cross_entropy_exp_sums(T* probs, T* stats, const T* logits,
                                                      const T* rowmax, const std::int32_t* targets,
                                                      int N, int C, int vbegin) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* z = logits + at(n, C);
    const int target = targets[n] - vbegin;
    // Read before the row (which may alias probs) turns into exponentials.
    stats[N + n] = target >= 0 && target < C ? z[target] : T(0);
    stats[n] = exp_shifted_sum(probs + at(n, C), z, rowmax[n], C);
  }
}

template <typename T>
TANDEM_CPU_CLONES double Ops<T>::cross_entropy_finish(T* probs, const T* stats, const T* rowmax,
                                                      int N, int C) {
  double total = 0.0;
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    T* p = probs + at(n, C);
    const T inv = T(1) / stats[n];
    for (int c = 0; c < C; ++c) p[c] *= inv;
    total += std::log(static_cast<double>(stats[n])) + static_cast<double>(rowmax[n]) -
             static_cast<double>(stats[N + n]);
  }
  return total / N;
}

// ---- Transformer ----

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::embedding_forward(T* out, const std::int32_t* tokens, const T* wte,
                                                 const T* wpe, int B, int Tn, int D) {
  // The whole vocabulary's rows, then the positions: each element is wte + wpe, added once.
  vocab_embedding_forward(out, tokens, wte, B * Tn, D, 0, std::numeric_limits<int>::max());
  if (wpe != nullptr) add_positions(out, wpe, 0, B * Tn, Tn, D);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::embedding_backward(T* dwte, T* dwpe, const T* dout,
                                                  const std::int32_t* tokens, int B, int Tn,
                                                  int D) {
  // The same accumulations, token by token, into each of the two arrays.
  vocab_embedding_backward(dwte, dout, tokens, B * Tn, D, 0, std::numeric_limits<int>::max());
  if (dwpe != nullptr) positions_backward(dwpe, dout, 0, B * Tn, Tn, D);
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::vocab_embedding_forward(T* out, const std::int32_t* tokens,
                                                       const T* wte, int N, int D, int vbegin,
                                                       int vcount) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    T* o = out + at(n, D);
    const int row = tokens[n] - vbegin;
    if (row >= 0 && row < vcount) {
      std::memcpy(o, wte + at(row, D), sizeof(T) * static_cast<std::size_t>(D));
    } else {
      std::fill_n(o, D, T(0));
    }
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::vocab_embedding_backward(T* dwte, const T* dout,
                                                        const std::int32_t* tokens, int N, int D,
                                                        int vbegin, int vcount) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const int row = tokens[n] - vbegin;
    if (row < 0 || row >= vcount) continue;
    const T* d = dout + at(n, D);
    T* e = dwte + at(row, D);
    for (int i = 0; i < D; ++i) e[i] += d[i];
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::add_positions(T* out, const T* wpe, int first, int count, int Tn,
                                             int D) {
  for (std::ptrdiff_t n = 0; n < count; ++n) {
    T* o = out + at(n, D);
    const T* p = wpe + at((first + n) % Tn, D);
    for (int i = 0; i < D; ++i) o[i] += p[i];
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::positions_backward(T* dwpe, const T* dout, int first, int count,
                                                  int Tn, int D) {
  for (std::ptrdiff_t n = 0; n < count; ++n) {
    const T* d = dout + at(n, D);
    T* p = dwpe + at((first + n) % Tn, D);
    for (int i = 0; i < D; ++i) p[i] += d[i];
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::residual_add(T* out, const T* residual, const T* bias, int N,
                                            int D) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    T* o = out + at(n, D);
    const T* r = residual + at(n, D);
    if (bias != nullptr) {
      for (int i = 0; i < D; ++i) o[i] = (r[i] + bias[i]) + o[i];
    } else {
      for (int i = 0; i < D; ++i) o[i] = r[i] + o[i];
    }
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::layernorm_forward(T* out, T* mean, T* rstd, const T* inp,
                                                 const T* weight, const T* bias, int N, int D) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* x = inp + at(n, D);
    const T m = lane_sum<T>(D, [x](int i) { return x[i]; }) / static_cast<T>(D);
    const T var = lane_sum<T>(D, [x, m](int i) { return (x[i] - m) * (x[i] - m); });
    const T s = T(1) / std::sqrt(var / static_cast<T>(D) + T(kNormEps));
    T* o = out + at(n, D);
    for (int i = 0; i < D; ++i) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

// With xhat = (x - mean) rstd and g = dout * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename T>
TANDEM_CPU_CLONES void Ops<T>::layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dresidual,
                                                  const T* dout, const T* inp, const T* weight,
                                                  const T* mean, const T* rstd, int N, int D) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* x = inp + at(n, D);
    const T* d = dout + at(n, D);
    const T m = mean[n];
    const T s = rstd[n];
    for (int i = 0; i < D; ++i) {
      dweight[i] += d[i] * (x[i] - m) * s;
      dbias[i] += d[i];
    }
    const T g_mean =
        lane_sum<T>(D, [d, weight](int i) { return d[i] * weight[i]; }) / static_cast<T>(D);
    const T gx_mean = lane_sum<T>(D, [=](int i) { return d[i] * weight[i] * (x[i] - m) * s; }) /
                      static_cast<T>(D);
    T* dx = dinp + at(n, D);
    const T* r = dresidual != nullptr ? dresidual + at(n, D) : nullptr;
    for (int i = 0; i < D; ++i) {
      const T xhat = (x[i] - m) * s;
      const T v = s * (d[i] * weight[i] - g_mean - xhat * gx_mean);
      dx[i] = r != nullptr ? r[i] + v : v;
    }
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight,
                                               int N, int D) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* x = inp + at(n, D);
    const T ss = lane_sum<T>(D, [x](int i) { return x[i] * x[i]; });
    const T s = T(1) / std::sqrt(ss / static_cast<T>(D) + T(kNormEps));
    T* o = out + at(n, D);
    for (int i = 0; i < D; ++i) o[i] = x[i] * s * weight[i];
    rstd[n] = s;
  }
}

// With xhat = x rstd and g = dout * weight: dx = rstd * (g - xhat * mean(g * xhat)).
template <typename T>
TANDEM_CPU_CLONES void Ops<T>::rmsnorm_backward(T* dinp, T* dweight, const T* dresidual,
                                                const T* dout, const T* inp, const T* weight,
                                                const T* rstd, int N, int D) {
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const T* x = inp + at(n, D);
    const T* d = dout + at(n, D);
    const T s = rstd[n];
    for (int i = 0; i < D; ++i) dweight[i] += d[i] * x[i] * s;
    const T gx_mean =
        lane_sum<T>(D, [=](int i) { return d[i] * weight[i] * x[i] * s; }) / static_cast<T>(D);
    T* dx = dinp + at(n, D);
    const T* r = dresidual != nullptr ? dresidual + at(n, D) : nullptr;
    for (int i = 0; i < D; ++i) {
      const T v = s * (d[i] * weight[i] - x[i] * s * gx_mean);
      dx[i] = r != nullptr ? r[i] + v : v;
    }
  }
}

namespace {

// Row t of the scores: softmax over s <= t, zero above the diagonal.
template <typename T>
TANDEM_CPU_CLONES void causal_softmax_row(T* row, int t, int Tn) {
  const T max = row_max(row, t + 1);
  const T inv = T(1) / exp_shifted_sum(row, row, max, t + 1);
  for (int s = 0; s <= t; ++s) row[s] *= inv;
  for (int s = t + 1; s < Tn; ++s) row[s] = 0;
}

}  // namespace

// Per (sequence, head) the products run on strided views of qkv, so no head is copied
// out: a head's queries are T rows of hd values, 3D apart.
template <typename T>
TANDEM_CPU_CLONES void Ops<T>::attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int D,
                                                 int H) {
  const int hd = D / H;
  const int C3 = 3 * D;
  const T scale = T(1) / std::sqrt(static_cast<T>(hd));
  for (int b = 0; b < B; ++b) {
    const T* base = qkv + static_cast<std::ptrdiff_t>(b) * Tn * C3;
    for (int h = 0; h < H; ++h) {
      const T* q = base + static_cast<std::ptrdiff_t>(h) * hd;
      const T* k = q + D;
      const T* v = q + 2 * D;
      T* a = att + (static_cast<std::ptrdiff_t>(b) * H + h) * Tn * Tn;
      // scores [T, T] = q [T, hd] . k^T [hd, T] / sqrt(hd)
      gemm(false, true, Tn, Tn, hd, scale, q, C3, k, C3, T(0), a, Tn);
      for (int t = 0; t < Tn; ++t) causal_softmax_row(a + at(t, Tn), t, Tn);
      // out_h [T, hd] = att [T, T] . v [T, hd]; the zeros above the diagonal mask the future.
      T* o = out + static_cast<std::ptrdiff_t>(b) * Tn * D + static_cast<std::ptrdiff_t>(h) * hd;
      gemm(false, false, Tn, hd, Tn, T(1), a, Tn, v, C3, T(0), o, D);
    }
  }
}

// With P = att (row-wise softmax) and S the scaled scores:
//   dP = dout_h . v^T;  dv = P^T . dout_h;
//   dS[t, s] = P[t, s] (dP[t, s] - sum_s' P[t, s'] dP[t, s'])  (zero where P is);
//   dq = dS . k / sqrt(hd);  dk = dS^T . q / sqrt(hd).
template <typename T>
TANDEM_CPU_CLONES void Ops<T>::attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv,
                                                  const T* att, int B, int Tn, int D, int H) {
  const int hd = D / H;
  const int C3 = 3 * D;
  const T scale = T(1) / std::sqrt(static_cast<T>(hd));
  for (int b = 0; b < B; ++b) {
    const T* base = qkv + static_cast<std::ptrdiff_t>(b) * Tn * C3;
    T* dbase = dqkv + static_cast<std::ptrdiff_t>(b) * Tn * C3;
    for (int h = 0; h < H; ++h) {
      const std::ptrdiff_t col = static_cast<std::ptrdiff_t>(h) * hd;
      const T* q = base + col;
      const T* k = q + D;
      const T* v = q + 2 * D;
      T* dq = dbase + col;
      T* dk = dq + D;
      T* dv = dq + 2 * D;
      const T* p = att + (static_cast<std::ptrdiff_t>(b) * H + h) * Tn * Tn;
      const T* d = dout + static_cast<std::ptrdiff_t>(b) * Tn * D + col;
      T* dp = scratch;
      gemm(false, true, Tn, Tn, hd, T(1), d, D, v, C3, T(0), dp, Tn);
      gemm(true, false, Tn, hd, Tn, T(1), p, Tn, d, D, T(0), dv, C3);
      for (int t = 0; t < Tn; ++t) {
        const T* pr = p + at(t, Tn);
        T* dr = dp + at(t, Tn);
        const T dot = lane_sum<T>(t + 1, [pr, dr](int s) { return pr[s] * dr[s]; });
        for (int s = 0; s <= t; ++s) dr[s] = pr[s] * (dr[s] - dot);
        for (int s = t + 1; s < Tn; ++s) dr[s] = 0;
      }
      gemm(false, false, Tn, hd, Tn, scale, dp, Tn, k, C3, T(0), dq, C3);
      gemm(true, false, Tn, hd, Tn, scale, dp, Tn, q, C3, T(0), dk, C3);
    }
  }
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::rope_table(T* cos_sin, int Tn, int hd) {
  const int pairs = hd / 2;
  for (int t = 0; t < Tn; ++t) {
    for (int i = 0; i < pairs; ++i) {
      // In double: angles reach T radians, where float's 24 bits would blur the phase.
      const double theta = std::pow(10000.0, -2.0 * i / hd);
      const double angle = t * theta;
      T* cs = cos_sin + (static_cast<std::ptrdiff_t>(t) * pairs + i) * 2;
      cs[0] = static_cast<T>(std::cos(angle));
      cs[1] = static_cast<T>(std::sin(angle));
    }
  }
}

namespace {

// Turns every (x0, x1) pair of the queries and keys by the table's angle; sign -1 turns
// backward (the transpose of the rotation).
template <typename T>
void rope_apply(T* qkv, const T* cos_sin, int B, int Tn, int D, int H, T sign) {
  const int hd = D / H;
  const int pairs = hd / 2;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < Tn; ++t) {
      T* row = qkv + (static_cast<std::ptrdiff_t>(b) * Tn + t) * 3 * D;
      const T* cs = cos_sin + static_cast<std::ptrdiff_t>(t) * pairs * 2;
      for (int part = 0; part < 2; ++part) {  // queries, then keys
        for (int h = 0; h < H; ++h) {
          T* x = row + part * D + h * hd;
          for (int i = 0; i < pairs; ++i) {
            const T c = cs[2 * i];
            const T s = sign * cs[2 * i + 1];
            const T x0 = x[2 * i];
            const T x1 = x[2 * i + 1];
            x[2 * i] = x0 * c - x1 * s;
            x[2 * i + 1] = x0 * s + x1 * c;
          }
        }
      }
    }
  }
}

}  // namespace

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::rope_forward(T* qkv, const T* cos_sin, int B, int Tn, int D, int H) {
  rope_apply(qkv, cos_sin, B, Tn, D, H, T(1));
}

template <typename T>
TANDEM_CPU_CLONES void Ops<T>::rope_backward(T* dqkv, const T* cos_sin, int B, int Tn, int D,
                                             int H) {
  rope_apply(dqkv, cos_sin, B, Tn, D, H, T(-1));
}

template struct Ops<float>;
template struct Ops<double>;

}  // namespace tandem::layers
