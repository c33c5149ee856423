// The CPU's transformers (transformer.h): the passes of transformer_passes.h on the CPU
// backend, in float (training) and double (the gradient checks), and the shape helpers
// every device's transformer shares.
#include "model/transformer.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"
#include "model/transformer_passes.h"

namespace tandem {

std::int64_t transformer_batch_tokens(const ModelSpec& spec, int max_batch) {
  const TransformerShape& s = spec.transformer;
  if (max_batch < 1) {
    throw UsageError("model '" + spec.text + "': batch must be >= 1 (got " +
                     std::to_string(max_batch) + ")");
  }
  const std::int64_t tokens = static_cast<std::int64_t>(max_batch) * s.seq;
  if (tokens * std::max({s.vocab, 3 * s.dim, 2 * s.hidden}) > std::numeric_limits<int>::max()) {
    throw UsageError("model '" + spec.text + "': batch " + std::to_string(max_batch) + " x seq " +
                     std::to_string(s.seq) + " is too large for one matrix product");
  }
  return tokens;
}

TensorShard TensorShard::of(const ModelSpec& spec, int rank) {
  const TransformerShape& s = spec.transformer;
  const int t = spec.tensor;
  TANDEM_CHECK(t >= 1 && rank >= 0 && rank < t && s.heads % t == 0 && s.hidden % t == 0 &&
               s.vocab % t == 0);
  return {.ranks = t,
          .rank = rank,
          .heads = s.heads / t,
          .width = s.dim / t,
          .hidden = s.hidden / t,
          .vocab = s.vocab / t,
          .vocab_begin = rank * (s.vocab / t),
          .sequence = spec.sequence_parallel && t > 1,
          .overlap = spec.tp_overlap && spec.sequence_parallel && t > 1};
}

TransformerFlops transformer_flops(const ModelSpec& spec, int rows) {
  // A tensor-parallel rank's share (Note [tensor-parallel layout]); the whole without.
  const TransformerShape& s = spec.transformer;
  const TensorShard shard = TensorShard::of(spec);
  const double N = static_cast<double>(rows) * s.seq, D = s.dim, F = shard.hidden;
  const double W = shard.width, Tn = s.seq;
  const int up = spec.kind == ModelKind::kGpt ? 1 : 2;
  return {.attention = 2 * N * D * 3 * W + 2 * N * W * D + 2 * (2 * N * Tn * W),
          .mlp = 2 * N * D * F * up + 2 * N * F * D,
          .head = 2 * N * D * shard.vocab};
}

template class TransformerOn<CpuBackend<float>>;
template class TransformerOn<CpuBackend<double>>;

}  // namespace tandem
