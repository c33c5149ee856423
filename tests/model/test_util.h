// Shared setup for the model tests: deterministic random batches and parameters.
#pragma once

#include <cstdint>
#include <vector>

#include "model/mlp.h"
#include "model/rng.h"

namespace tandem::testing {

struct OwnedBatch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  int rows = 0;
  Batch view() const { return Batch{.x = x, .y = y, .rows = rows}; }
};

inline OwnedBatch random_batch(int rows, int input, int classes, std::uint64_t seed) {
  detail::SplitMix64 rng(seed);
  OwnedBatch b;
  b.rows = rows;
  b.x.resize(static_cast<std::size_t>(rows) * input);
  for (float& v : b.x) v = static_cast<float>(rng.normal());
  b.y.resize(rows);
  for (auto& label : b.y) label = static_cast<std::int32_t>(rng.next() % classes);
  return b;
}

// Overwrites every parameter (biases included, which init leaves at zero) so that the
// tests exercise the bias paths.
inline void randomize_params(Mlp& model, std::uint64_t seed, double scale = 0.5) {
  detail::SplitMix64 rng(seed);
  for (float& p : model.flat_params()) p = static_cast<float>(rng.uniform(-scale, scale));
}

}  // namespace tandem::testing
