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

TransformerFlops transformer_flops(const ModelSpec& spec, int rows) {
  const TransformerShape& s = spec.transformer;
  const double N = static_cast<double>(rows) * s.seq, D = s.dim, F = s.hidden;
  const double Tn = s.seq;
  const int up = spec.kind == ModelKind::kGpt ? 1 : 2;
  return {.attention = 2 * N * D * 3 * D + 2 * N * D * D + 2 * (2 * N * Tn * D),
          .mlp = 2 * N * D * F * up + 2 * N * F * D,
          .head = 2 * N * D * s.vocab};
}

template class TransformerOn<CpuBackend<float>>;
template class TransformerOn<CpuBackend<double>>;

}  // namespace tandem
