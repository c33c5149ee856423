// Clock alignment of process ranks onto rank 0's clock; where in-process ranks run.
#include "engine/launch.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/affinity.h"

namespace tandem {
namespace {

TEST(ToRank0Clock, ConstantOffsetIsSubtracted) {
  const ClockOffset o{.offset_ns = 500, .uncertainty_ns = 10, .at_ns = 1000};
  EXPECT_EQ(to_rank0_clock(1500, o, o), 1000);
  EXPECT_EQ(to_rank0_clock(99'500, o, o), 99'000);
}

TEST(ToRank0Clock, DriftIsInterpolatedBetweenTheEstimatesAndHeldOutside) {
  // Rank 0 times 0 and 1'000'000; the rank's clock is 100 ahead, then 300 ahead.
  const ClockOffset before{.offset_ns = 100, .at_ns = 0};
  const ClockOffset after{.offset_ns = 300, .at_ns = 1'000'000};
  EXPECT_EQ(to_rank0_clock(100, before, after), 0);
  EXPECT_EQ(to_rank0_clock(1'000'300, before, after), 1'000'000);
  // Halfway on the rank's clock: offset 200.
  EXPECT_EQ(to_rank0_clock(500'200, before, after), 500'000);
  EXPECT_EQ(to_rank0_clock(50, before, after), -50);               // before: offset 100
  EXPECT_EQ(to_rank0_clock(2'000'300, before, after), 2'000'000);  // after: offset 300
}

// Each thread of this process by name: its "Cpus_allowed_list" from /proc.
std::map<std::string, std::vector<std::string>> cpus_by_thread_name() {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string name, line;
    std::getline(std::ifstream(task.path() / "comm"), name);
    std::ifstream status(task.path() / "status");
    while (std::getline(status, line)) {
      if (line.starts_with("Cpus_allowed_list:")) {
        out[name].push_back(line.substr(line.find_first_not_of(" \t", 18)));
      }
    }
  }
  return out;
}

// Two ranks on a machine with two CPUs for them: each rank's training thread and its
// communication thread on one CPU of its own, the same for both threads of a rank.
TEST(RunInProcess, EachRankAndItsCommunicationThreadRunOnCpusOfTheirOwn) {
  const std::vector<int> allowed = allowed_cpus();
  if (allowed.size() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << allowed.size();
  Job job("local", {});
  std::mutex mutex;
  std::vector<std::vector<int>> rank_cpus(2);
  std::map<std::string, std::vector<std::string>> threads;
  const RunResult result = job.run({.ranks = 2, .record = false}, [&](RankEnv& env) {
    std::vector<float> data(8, 1.0f);
    env.comm.allreduce(data, ReduceOp::kSum)->wait();  // both communication threads ran
    std::lock_guard lock(mutex);
    rank_cpus[static_cast<std::size_t>(env.comm.rank())] = allowed_cpus();
    if (env.comm.rank() == 0) threads = cpus_by_thread_name();  // while every thread lives
    return std::string();
  });
  EXPECT_EQ(rank_cpus[0], (std::vector<int>{allowed[0]}));
  EXPECT_EQ(rank_cpus[1], (std::vector<int>{allowed[1]}));
  EXPECT_EQ(result.binding, "2 ranks x 1 thread, bound: rank 0 on CPU " +
                                std::to_string(allowed[0]) + ", rank 1 on CPU " +
                                std::to_string(allowed[1]));
  EXPECT_EQ(threads["tandem r0 comm"], (std::vector<std::string>{std::to_string(allowed[0])}));
  EXPECT_EQ(threads["tandem r1 comm"], (std::vector<std::string>{std::to_string(allowed[1])}));
  EXPECT_EQ(allowed_cpus(), allowed);  // the caller keeps its own

  // --bind none: every rank may run anywhere the process may.
  const RunResult unbound =
      job.run({.ranks = 2, .record = false, .bind = false}, [&](RankEnv& env) {
        std::lock_guard lock(mutex);
        rank_cpus[static_cast<std::size_t>(env.comm.rank())] = allowed_cpus();
        return std::string();
      });
  EXPECT_EQ(rank_cpus[0], allowed);
  EXPECT_EQ(rank_cpus[1], allowed);
  EXPECT_EQ(unbound.binding, "not bound (--bind none)");
}

}  // namespace
}  // namespace tandem
