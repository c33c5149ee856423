// Summary statistics: linear-interpolation percentiles, NaN skipping, warm-up dropping.
#include "analysis/statistics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace tandem {
namespace {

TEST(Statistics, PercentilesInterpolateLinearly) {
  const std::vector<double> sorted = {10, 20};
  EXPECT_DOUBLE_EQ(percentile_sorted(sorted, 0), 10);
  EXPECT_DOUBLE_EQ(percentile_sorted(sorted, 25), 12.5);
  EXPECT_DOUBLE_EQ(percentile_sorted(sorted, 100), 20);
  EXPECT_TRUE(std::isnan(percentile_sorted({}, 50)));
}

TEST(Statistics, SummaryOfUnsortedValues) {
  const std::vector<double> v = {7, 1, 10, 3, 5, 2, 9, 4, 8, 6};
  const Summary s = summarize(v);
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.median, 5.5);
  EXPECT_DOUBLE_EQ(s.p10, 1.9);  // rank 0.9 between 1 and 2
  EXPECT_DOUBLE_EQ(s.p90, 9.1);  // rank 8.1 between 9 and 10
  EXPECT_DOUBLE_EQ(s.mean, 5.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
}

TEST(Statistics, OddCountMedianIsTheMiddleSample) {
  const std::vector<double> v = {100, 3, 2};
  const Summary s = summarize(v);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.mean, 35);
}

TEST(Statistics, NaNSamplesAreSkippedAndEmptyIsUndefined) {
  const std::vector<double> v = {kUndefined, 4, kUndefined, 2};
  const Summary s = summarize(v);
  EXPECT_EQ(s.count, 2u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  const Summary none = summarize(std::vector<double>{kUndefined});
  EXPECT_EQ(none.count, 0u);
  EXPECT_TRUE(std::isnan(none.median));
  EXPECT_TRUE(std::isnan(none.p90));
  const nlohmann::json j = none;
  EXPECT_TRUE(j["median"].is_null());
  EXPECT_EQ(j["count"], 0);
  const nlohmann::json k = s;
  EXPECT_DOUBLE_EQ(k["median"].get<double>(), 3);
}

TEST(Statistics, SingleSampleSummary) {
  const Summary s = summarize(std::vector<double>{42});
  EXPECT_EQ(s.count, 1u);
  EXPECT_DOUBLE_EQ(s.p10, 42);
  EXPECT_DOUBLE_EQ(s.p90, 42);
}

TEST(Statistics, DropWarmup) {
  const std::vector<double> v = {100, 90, 1, 2, 3};
  EXPECT_EQ(drop_warmup(v, 2), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(drop_warmup(v, 0), v);
  EXPECT_TRUE(drop_warmup(v, 5).empty());
  EXPECT_TRUE(drop_warmup(v, 9).empty());
}

}  // namespace
}  // namespace tandem
