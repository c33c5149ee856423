// PowerSGD's math (ddp/powersgd.h) on ranks simulated in one thread: the all-reduces are
// sums computed here, in rank order, and handed to every rank, as a real all-reduce's
// identical result would be.
#include "ddp/powersgd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"

namespace tandem {
namespace {

// A bucket [begin, end) of a flat gradient, replicated on `world` ranks.
class SimulatedRanks {
 public:
  SimulatedRanks(const std::vector<PowerSgdParam>& params, std::size_t begin, std::size_t end,
                 std::size_t flat_numel, int world, int rank, std::uint64_t seed)
      : begin_(begin), end_(end), grads_(static_cast<std::size_t>(world)) {
    for (int r = 0; r < world; ++r) {
      buckets_.emplace_back(params, begin, end, rank, seed);
      grads_[static_cast<std::size_t>(r)].assign(flat_numel, 0.0f);
    }
  }

  int world() const { return static_cast<int>(buckets_.size()); }
  std::vector<float>& grads(int r) { return grads_[static_cast<std::size_t>(r)]; }
  const PowerSgdBucket& bucket(int r) const { return buckets_[static_cast<std::size_t>(r)]; }

  // One step of every rank: the three phases around two emulated all-reduces.
  void step() {
    const int n = world();
    std::vector<std::vector<float>> p(buckets_.size()), q(buckets_.size());
    for (int r = 0; r < n; ++r) {
      p[r].assign(buckets_[r].p_numel(), 0.0f);
      q[r].assign(buckets_[r].q_numel(), 0.0f);
      buckets_[r].compute_p(range(r), p[r], n);
    }
    all_reduce(p);
    for (int r = 0; r < n; ++r) buckets_[r].compute_q(p[r], q[r]);
    all_reduce(q);
    for (int r = 0; r < n; ++r) buckets_[r].decompress(p[r], q[r], range(r), n);
  }

 private:
  std::span<float> range(int r) {
    return std::span<float>(grads(r)).subspan(begin_, end_ - begin_);
  }

  static void all_reduce(std::vector<std::vector<float>>& buffers) {
    std::vector<float> sum(buffers.front().size(), 0.0f);
    for (const auto& buffer : buffers) {
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += buffer[i];
    }
    for (auto& buffer : buffers) buffer = sum;
  }

  std::size_t begin_;
  std::size_t end_;
  std::vector<PowerSgdBucket> buckets_;
  std::vector<std::vector<float>> grads_;
};

void fill_normal(std::vector<float>& values, std::size_t begin, std::size_t end,
                 std::mt19937_64& engine) {
  std::normal_distribution<float> normal;
  for (std::size_t i = begin; i < end; ++i) values[i] = normal(engine);
}

// ||a - b|| / ||b|| over [begin, end).
double relative_error(const std::vector<float>& a, const std::vector<double>& b, std::size_t begin,
                      std::size_t end) {
  double difference = 0, norm = 0;
  for (std::size_t i = begin; i < end; ++i) {
    difference += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(difference / norm);
}

// The mixed bucket: a [8, 12] matrix (rank 2 compresses it: 2 * 20 < 96), a gap of two
// padding elements, a [12] bias and a [3, 2] matrix too small to compress (2 * 5 >= 6),
// starting at flat offset 10 and listed out of offset order.
constexpr std::size_t kBegin = 10;
constexpr std::size_t kMatrix = kBegin;          // 96 elements
constexpr std::size_t kBias = kMatrix + 96 + 2;  // after two padding elements
constexpr std::size_t kTiny = kBias + 12;        // 6 elements
constexpr std::size_t kEnd = kTiny + 6;
constexpr std::size_t kFlat = kEnd + 4;  // elements after the bucket, which it must not touch

std::vector<PowerSgdParam> mixed_params() {
  return {{kBias, 12, {12}}, {kTiny, 6, {3, 2}}, {kMatrix, 96, {8, 12}}};
}

TEST(PowerSgdTest, UncompressedPartsAreTheExactAverageAndRanksAgreeBitForBit) {
  constexpr int kWorld = 3;
  SimulatedRanks ranks(mixed_params(), kBegin, kEnd, kFlat, kWorld, /*rank=*/2, /*seed=*/7);
  ASSERT_EQ(ranks.bucket(0).compressed_params(), 1u);
  std::mt19937_64 engine(123);
  for (int step = 0; step < 3; ++step) {  // later steps start from the warm Q
    std::vector<double> average(kFlat, 0.0);
    for (int r = 0; r < kWorld; ++r) {
      fill_normal(ranks.grads(r), 0, kFlat, engine);
      for (std::size_t i = 0; i < kFlat; ++i) average[i] += ranks.grads(r)[i] / kWorld;
    }
    const std::vector<float> before = ranks.grads(0);
    ranks.step();

    // Padding, bias and the small matrix: the plain average.
    for (std::size_t i = kMatrix + 96; i < kEnd; ++i) {
      EXPECT_NEAR(ranks.grads(0)[i], average[i], 1e-6) << "element " << i << " step " << step;
    }
    // The matrix: an approximation, not the rank's own gradient left in place.
    EXPECT_GT(relative_error(ranks.grads(0), average, kMatrix, kMatrix + 96), 1e-3);
    // Outside the bucket: untouched.
    for (std::size_t i = 0; i < kBegin; ++i) EXPECT_EQ(ranks.grads(0)[i], before[i]);
    for (std::size_t i = kEnd; i < kFlat; ++i) EXPECT_EQ(ranks.grads(0)[i], before[i]);
    for (int r = 1; r < kWorld; ++r) {
      EXPECT_EQ(std::memcmp(ranks.grads(r).data() + kBegin, ranks.grads(0).data() + kBegin,
                            (kEnd - kBegin) * sizeof(float)),
                0)
          << "rank " << r << " step " << step;
    }
  }
}

// A gradient whose average has rank <= R is recovered exactly in one step: P spans its
// columns, so P P^T M is M.
TEST(PowerSgdTest, LowRankAverageIsRecoveredExactly) {
  constexpr int kWorld = 3;
  constexpr int kRows = 8, kCols = 12;
  for (const int rank : {1, 2}) {
    SimulatedRanks ranks({{0, kRows * kCols, {kRows, kCols}}}, 0, kRows * kCols, kRows * kCols,
                         kWorld, rank, /*seed=*/11);
    ASSERT_EQ(ranks.bucket(0).compressed_params(), 1u);
    // Rank r's gradient is U A_r, U [rows, rank] shared and A_r [rank, cols] its own: every
    // rank differs, and their average U mean(A_r) has rank `rank`.
    std::mt19937_64 engine(99 + rank);
    std::vector<float> u(kRows * rank);
    fill_normal(u, 0, u.size(), engine);
    std::vector<double> average(kRows * kCols, 0.0);
    for (int r = 0; r < kWorld; ++r) {
      std::vector<float> a(rank * kCols);
      fill_normal(a, 0, a.size(), engine);
      for (int i = 0; i < kRows; ++i) {
        for (int j = 0; j < kCols; ++j) {
          float value = 0;
          for (int k = 0; k < rank; ++k) value += u[i * rank + k] * a[k * kCols + j];
          ranks.grads(r)[i * kCols + j] = value;
          average[i * kCols + j] += static_cast<double>(value) / kWorld;
        }
      }
    }
    ranks.step();
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_LT(relative_error(ranks.grads(r), average, 0, kRows * kCols), 1e-5)
          << "rank " << r << " R " << rank;
    }
  }
}

// Error feedback: what one step's approximation leaves out is sent in the next steps, so
// with the same gradients every step the mean of the decompressed gradients converges to
// the true average, far below the error of one step.
TEST(PowerSgdTest, ErrorFeedbackMakesTheRunningMeanConverge) {
  constexpr int kWorld = 3;
  constexpr int kSteps = 50;
  constexpr std::size_t kNumel = 96;
  SimulatedRanks ranks({{0, kNumel, {8, 12}}}, 0, kNumel, kNumel, kWorld, /*rank=*/1,
                       /*seed=*/5);
  std::mt19937_64 engine(2024);
  std::vector<std::vector<float>> fixed(kWorld, std::vector<float>(kNumel));
  std::vector<double> average(kNumel, 0.0);
  for (int r = 0; r < kWorld; ++r) {
    fill_normal(fixed[r], 0, kNumel, engine);
    for (std::size_t i = 0; i < kNumel; ++i) average[i] += fixed[r][i] / kWorld;
  }
  std::vector<float> running_sum(kNumel, 0.0f);
  double one_step_error = 0;
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorld; ++r) ranks.grads(r) = fixed[r];
    ranks.step();
    if (step == 0) one_step_error = relative_error(ranks.grads(0), average, 0, kNumel);
    for (std::size_t i = 0; i < kNumel; ++i) running_sum[i] += ranks.grads(0)[i];
  }
  std::vector<float> running_mean(kNumel);
  for (std::size_t i = 0; i < kNumel; ++i) running_mean[i] = running_sum[i] / kSteps;
  const double mean_error = relative_error(running_mean, average, 0, kNumel);
  // A rank-1 approximation of a random 8 x 12 matrix misses most of it.
  EXPECT_GT(one_step_error, 0.3);
  EXPECT_LT(mean_error, 0.2 * one_step_error)
      << "one step " << one_step_error << ", mean of " << kSteps << " steps " << mean_error;
}

TEST(PowerSgdTest, BufferSizesAndWireBytes) {
  // [64, 32] (R 4: 4 * 96 < 2048), [32], [16, 3, 3, 3] as [16, 27] (4 * 43 < 432), [2, 2]
  // (4 * 4 >= 4, uncompressed) and [10], back to back from offset 100.
  const std::vector<PowerSgdParam> params = {{100, 2048, {64, 32}},
                                             {2148, 32, {32}},
                                             {2180, 432, {16, 3, 3, 3}},
                                             {2612, 4, {2, 2}},
                                             {2616, 10, {10}}};
  const PowerSgdBucket bucket(params, 100, 2626, /*rank=*/4, /*seed=*/1);
  EXPECT_EQ(bucket.compressed_params(), 2u);
  EXPECT_EQ(bucket.p_numel(), 64u * 4 + 16 * 4 + 32 + 4 + 10);
  EXPECT_EQ(bucket.q_numel(), 32u * 4 + 27 * 4);
  EXPECT_EQ(bucket.wire_bytes(), (366 + 236) * 4);
  EXPECT_LT(bucket.wire_bytes(), (2626 - 100) * 4);
  EXPECT_EQ(bucket.state_bytes(), (2 * (2048 + 432) + 236) * 4);
}

TEST(PowerSgdTest, WhichParametersCompress) {
  EXPECT_TRUE(powersgd_compresses({5, 40}, 200, 4));     // 4 * 45 < 200
  EXPECT_FALSE(powersgd_compresses({4, 40}, 160, 4));    // 4 * 44 >= 160
  EXPECT_TRUE(powersgd_compresses({4, 2, 20}, 160, 1));  // [4, 40]: 44 < 160
  EXPECT_FALSE(powersgd_compresses({1000}, 1000, 1));    // 1-D
  EXPECT_FALSE(powersgd_compresses({8, 12}, 96, 0));
  EXPECT_THROW(PowerSgdBucket({}, 0, 0, 0, 1), UsageError);
  // A bucket of nothing compressible: only the P buffer, carrying every element.
  const PowerSgdBucket biases({{0, 12, {12}}}, 0, 12, 2, 1);
  EXPECT_EQ(biases.compressed_params(), 0u);
  EXPECT_EQ(biases.p_numel(), 12u);
  EXPECT_EQ(biases.q_numel(), 0u);
}

}  // namespace
}  // namespace tandem
