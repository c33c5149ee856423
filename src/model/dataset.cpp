// SyntheticDataset: inputs from (seed, rank), labels from a teacher network that depends
// on the seed only, so every rank learns the same function from different samples.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compute/cpu/blas.h"
#include "core/error.h"
#include "model/layers.h"
#include "model/dataset.h"
#include "model/rng.h"

namespace tandem {
namespace {

constexpr int kTeacherHidden = 64;
// 2^28 floats (1 GiB) of inputs: far above any useful shard, well below a machine's memory.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 28;

}  // namespace

SyntheticDataset::SyntheticDataset(int input, int classes, int rows, int batches,
                                   std::uint64_t seed, int rank)
    : input_(input), rows_(rows), batches_(batches) {
  if (input < 1 || classes < 1 || rows < 1 || batches < 1 || rank < 0) {
    throw UsageError("synthetic dataset: input, classes, rows and batches must be >= 1 (got " +
                     std::to_string(input) + ", " + std::to_string(classes) + ", " +
                     std::to_string(rows) + ", " + std::to_string(batches) + ")");
  }
  const std::int64_t samples = static_cast<std::int64_t>(rows) * batches;
  if (samples * std::max(input, kTeacherHidden) > kMaxElements ||
      samples * classes > kMaxElements) {
    throw UsageError("synthetic dataset: " + std::to_string(rows) + " rows x " +
                     std::to_string(batches) + " batches x " + std::to_string(input) +
                     " features is too large");
  }

  // Teacher weights, from the seed alone. Scaled by 1/sqrt(fan_in) so that pre-activations
  // are about N(0, 1): GELU then sits in its curved region and the labels are a nonlinear
  // function of x spread over all classes.
  detail::SplitMix64 teacher_rng(detail::mix64(seed ^ 0x7465616368657221ULL));  // "teacher!"
  std::vector<float> w1(static_cast<std::size_t>(input) * kTeacherHidden);
  std::vector<float> w2(static_cast<std::size_t>(kTeacherHidden) * classes);
  const double scale1 = 1.0 / std::sqrt(static_cast<double>(input));
  const double scale2 = 1.0 / std::sqrt(static_cast<double>(kTeacherHidden));
  for (float& w : w1) w = static_cast<float>(teacher_rng.normal() * scale1);
  for (float& w : w2) w = static_cast<float>(teacher_rng.normal() * scale2);

  // Inputs from (seed, rank): a different shard per rank.
  detail::SplitMix64 data_rng(
      detail::mix64(detail::mix64(seed ^ 0x64617461ULL) + static_cast<std::uint64_t>(rank)));
  const std::size_t n = static_cast<std::size_t>(samples);
  x_.resize(n * input);
  for (float& v : x_) v = static_cast<float>(data_rng.normal());

  // Labels = argmax teacher(x), all samples at once.
  const int all = static_cast<int>(samples);
  std::vector<float> hidden(n * kTeacherHidden);
  std::vector<float> logits(n * classes);
  layers::Ops<float>::linear_forward(hidden.data(), x_.data(), w1.data(), nullptr, all, input, kTeacherHidden);
  layers::Ops<float>::gelu_forward(hidden.data(), hidden.data(), static_cast<std::int64_t>(hidden.size()));
  layers::Ops<float>::linear_forward(logits.data(), hidden.data(), w2.data(), nullptr, all, kTeacherHidden,
                         classes);
  y_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * classes;
    y_[i] = static_cast<std::int32_t>(std::max_element(row, row + classes) - row);
  }
}

Batch SyntheticDataset::batch(int step) const {
  const int index = ((step % batches_) + batches_) % batches_;  // steps may start below 0
  const std::size_t first = static_cast<std::size_t>(index) * rows_;
  return Batch{
      .x = std::span<const float>(x_).subspan(first * input_,
                                              static_cast<std::size_t>(rows_) * input_),
      .y = std::span<const std::int32_t>(y_).subspan(first, rows_),
      .rows = rows_,
  };
}

}  // namespace tandem
