#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "model/mlp.h"
#include "model/sgd.h"
#include "model/dataset.h"

namespace tandem {
namespace {

TEST(SgdTest, MatchesHandComputationOverTwoSteps) {
  Sgd sgd({.lr = 0.1f, .momentum = 0.5f, .weight_decay = 0.01f}, 2);
  std::vector<float> w = {1.0f, -2.0f};
  const std::vector<float> g = {0.5f, 0.25f};
  // Step 1, grad_scale 0.5: g' = [0.25 + 0.01, 0.125 - 0.02] = [0.26, 0.105]; v = g';
  // w = [1 - 0.026, -2 - 0.0105].
  sgd.step(w, g, 0.5f);
  EXPECT_FLOAT_EQ(w[0], 0.974f);
  EXPECT_FLOAT_EQ(w[1], -2.0105f);
  // Step 2, grad_scale 1: g' = [0.5 + 0.00974, 0.25 - 0.020105];
  // v = 0.5 * [0.26, 0.105] + g' = [0.63974, 0.282395].
  sgd.step(w, g);
  EXPECT_NEAR(w[0], 0.974 - 0.063974, 1e-6);
  EXPECT_NEAR(w[1], -2.0105 - 0.0282395, 1e-6);
}

TEST(SgdTest, PlainSgdWithoutMomentum) {
  Sgd sgd({.lr = 0.5f, .momentum = 0.0f}, 3);
  std::vector<float> w = {1, 2, 3};
  sgd.step(w, std::vector<float>{2, 0, -2});
  sgd.step(w, std::vector<float>{2, 0, -2});
  EXPECT_EQ(w, (std::vector<float>{-1, 2, 5}));
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.rows == b.rows && std::equal(a.x.begin(), a.x.end(), b.x.begin(), b.x.end()) &&
         std::equal(a.y.begin(), a.y.end(), b.y.begin(), b.y.end());
}

TEST(DatasetTest, DeterministicPerSeedAndRank) {
  const SyntheticDataset a(16, 5, 32, 3, 77, 0), b(16, 5, 32, 3, 77, 0);
  const SyntheticDataset other_rank(16, 5, 32, 3, 77, 1), other_seed(16, 5, 32, 3, 78, 0);
  EXPECT_EQ(a.rows(), 32);
  for (int step = 0; step < 3; ++step) {
    EXPECT_TRUE(same_batch(a.batch(step), b.batch(step)));
    EXPECT_FALSE(same_batch(a.batch(step), other_rank.batch(step)));
    EXPECT_FALSE(same_batch(a.batch(step), other_seed.batch(step)));
  }
  EXPECT_FALSE(same_batch(a.batch(0), a.batch(1)));
  // Batches cycle over steps.
  EXPECT_TRUE(same_batch(a.batch(4), a.batch(1)));
  EXPECT_TRUE(same_batch(a.batch(-1), a.batch(2)));
}

TEST(DatasetTest, ShapesLabelsAndInputs) {
  const int classes = 6, rows = 64, batches = 8, input = 24;
  const SyntheticDataset data(input, classes, rows, batches, 5, 2);
  std::vector<int> counts(classes, 0);
  double sum = 0, sum_sq = 0;
  for (int step = 0; step < batches; ++step) {
    const Batch batch = data.batch(step);
    ASSERT_EQ(batch.rows, rows);
    ASSERT_EQ(batch.x.size(), static_cast<std::size_t>(rows) * input);
    ASSERT_EQ(batch.y.size(), static_cast<std::size_t>(rows));
    for (std::int32_t label : batch.y) {
      ASSERT_GE(label, 0);
      ASSERT_LT(label, classes);
      ++counts[label];
    }
    for (float v : batch.x) {
      sum += v;
      sum_sq += double{v} * v;
    }
  }
  const int total = rows * batches;
  // Not degenerate: no class takes more than half, at least half the classes appear.
  EXPECT_LT(*std::max_element(counts.begin(), counts.end()), total / 2);
  EXPECT_GE(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; }), classes / 2);
  // x ~ N(0, 1).
  const double n = double{total} * input;
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.05);
}

TEST(DatasetTest, RejectsBadArguments) {
  EXPECT_THROW(SyntheticDataset(0, 4, 8, 1, 1, 0), UsageError);
  EXPECT_THROW(SyntheticDataset(8, 4, 0, 1, 1, 0), UsageError);
  EXPECT_THROW(SyntheticDataset(8, 4, 8, 0, 1, 0), UsageError);
  EXPECT_THROW(SyntheticDataset(65536, 4, 65536, 1000, 1, 0), UsageError);
}

}  // namespace
}  // namespace tandem
