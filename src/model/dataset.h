// The MLPs' data: a batch of rows and labels, and the learnable synthetic task every
// rank draws its own shard of.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

struct Batch {
  std::span<const float> x;        // [rows, input]
  std::span<const std::int32_t> y;  // [rows] class labels
  int rows = 0;
};

// A learnable synthetic task: inputs ~ N(0,1), labels = argmax of a fixed random
// teacher (one hidden layer, GELU) that is the same on every rank. Each rank draws its
// own shard deterministically from (seed, rank), `batches` batches cycled over steps.
class SyntheticDataset {
 public:
  SyntheticDataset(int input, int classes, int rows, int batches, std::uint64_t seed, int rank);
  Batch batch(int step) const;  // batch (step mod batches)
  int rows() const { return rows_; }

 private:
  int input_;
  int rows_;
  int batches_;
  std::vector<float> x_;
  std::vector<std::int32_t> y_;
};

}  // namespace tandem
