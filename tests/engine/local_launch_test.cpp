#include <gtest/gtest.h>

#include <stdexcept>

#include "core/error.h"
#include "engine/local_launch.h"

namespace tandem {
namespace {

TEST(LocalLaunchTest, AFailingRankAbortsItsPeersAndItsErrorIsRethrown) {
  // Rank 1 fails before issuing the all-reduce rank 0 waits for: without the abort,
  // rank 0 would wait forever.
  std::vector<float> data(16, 1.0f);
  bool rank0_saw_error = false;
  try {
    run_local_ranks({.ranks = 2}, [&](Communicator& comm, RankRecorder&) {
      if (comm.rank() == 1) throw std::logic_error("rank 1 broke");
      try {
        comm.allreduce(data, ReduceOp::kSum)->wait();
      } catch (const RuntimeError&) {
        rank0_saw_error = true;
        throw;
      }
    });
    FAIL() << "expected the failure to propagate";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "rank 1 broke");
  }
  EXPECT_TRUE(rank0_saw_error);
}

TEST(LocalLaunchTest, CollectsEveryRanksSpans) {
  const auto run = run_local_ranks({.ranks = 3}, [](Communicator& comm, RankRecorder& recorder) {
    recorder.record({.lane = Lane::kCompute, .kind = SpanKind::kForward, .step = 0,
                     .tag = comm.rank(), .start_ns = 1, .end_ns = 2});
  });
  EXPECT_EQ(run.timeline.ranks, 3);
  ASSERT_EQ(run.timeline.spans.size(), 3u);
  for (const Span& s : run.timeline.spans) EXPECT_EQ(s.rank, s.tag);
}

}  // namespace
}  // namespace tandem
