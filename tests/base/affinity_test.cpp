// Where in-process ranks run (core/affinity.h): each rank on CPUs of its own when all
// fit, none bound otherwise, and the description says which.
#include "core/affinity.h"

#include <gtest/gtest.h>

#include <thread>

namespace tandem {
namespace {

TEST(Affinity, RanksTakeConsecutiveCpusOfThoseAllowed) {
  // A process allowed CPUs 2, 3, 5 and 8 (a cpuset, or taskset): two ranks of two threads.
  const RankCpus placed = place_ranks(2, 2, true, {2, 3, 5, 8});
  ASSERT_EQ(placed.per_rank.size(), 2u);
  EXPECT_EQ(placed.per_rank[0], (std::vector<int>{2, 3}));
  EXPECT_EQ(placed.per_rank[1], (std::vector<int>{5, 8}));
  EXPECT_EQ(placed.description,
            "2 ranks x 2 threads, bound: rank 0 on CPUs 2-3, rank 1 on CPUs 5,8");
}

TEST(Affinity, RanksThatDoNotFitAreNotBoundAndSaySo) {
  EXPECT_TRUE(place_ranks(3, 1, true, {0, 1}).per_rank.empty());
  EXPECT_EQ(place_ranks(3, 1, true, {0, 1}).description,
            "not bound: 3 ranks x 1 thread need 3 CPUs, this process may use 2");
  EXPECT_TRUE(place_ranks(1, 4, true, {0, 1}).per_rank.empty());
  const RankCpus off = place_ranks(2, 1, false, {0, 1});
  EXPECT_TRUE(off.per_rank.empty());
  EXPECT_EQ(off.description, "not bound (--bind none)");
}

TEST(Affinity, ManyRanksAreOneLine) {
  std::vector<int> cpus(64);
  for (int i = 0; i < 64; ++i) cpus[static_cast<std::size_t>(i)] = i;
  const RankCpus placed = place_ranks(32, 2, true, cpus);
  ASSERT_EQ(placed.per_rank.size(), 32u);
  EXPECT_EQ(placed.per_rank[31], (std::vector<int>{62, 63}));  // every rank placed
  EXPECT_NE(placed.description.find("rank 7 on CPUs 14-15, ..., rank 31 on CPUs 62-63"),
            std::string::npos)
      << placed.description;
  EXPECT_EQ(placed.description.find("rank 8 "), std::string::npos) << placed.description;
}

TEST(Affinity, CpuListsAreWrittenAsLinuxWritesThem) {
  EXPECT_EQ(format_cpu_list(std::vector<int>{0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
  EXPECT_EQ(format_cpu_list(std::vector<int>{5}), "5");
  EXPECT_EQ(format_cpu_list(std::vector<int>{}), "");
}

TEST(Affinity, ABoundThreadRunsOnlyWhereItWasBound) {
  const std::vector<int> allowed = allowed_cpus();
  if (allowed.empty()) GTEST_SKIP() << "the CPUs this process may use cannot be read here";
  std::vector<int> seen;
  std::thread([&] {
    ASSERT_TRUE(bind_this_thread(std::vector<int>{allowed.back()}));
    seen = allowed_cpus();
  }).join();
  EXPECT_EQ(seen, (std::vector<int>{allowed.back()}));
  EXPECT_EQ(allowed_cpus(), allowed);  // the caller's own CPUs are untouched
}

}  // namespace
}  // namespace tandem
