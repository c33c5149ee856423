// Work: completion, errors, timeouts and timestamps; OpInfo descriptions.
#include "comm/work.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;

TEST(OpInfo, Describes) {
  EXPECT_EQ(
      (OpInfo{.kind = SpanKind::kAllreduce, .bytes = 25 << 20, .step = 7, .tag = 3}).describe(),
      "allreduce bucket 3 (25.0 MiB, step 7)");
  EXPECT_EQ(OpInfo{.kind = SpanKind::kBarrier}.describe(), "barrier");
  EXPECT_EQ((OpInfo{.kind = SpanKind::kSend, .bytes = 512}).describe(), "send (512 B)");
  EXPECT_EQ((OpInfo{.kind = SpanKind::kBroadcast, .step = 2}).describe(), "broadcast (step 2)");
}

TEST(Work, CompletesOnceWithTimestamps) {
  Work work(OpInfo{.kind = SpanKind::kAllreduce});
  EXPECT_FALSE(work.test());
  EXPECT_FALSE(work.wait_for(0ns));
  work.mark_started(100);
  work.finish(250);
  EXPECT_TRUE(work.test());
  EXPECT_TRUE(work.wait_for(0ns));
  work.wait();
  EXPECT_EQ(work.exception(), nullptr);
  EXPECT_EQ(work.start_ns(), 100);
  EXPECT_EQ(work.end_ns(), 250);
}

TEST(Work, StoresAndRethrowsItsError) {
  Work work(OpInfo{});
  work.fail(std::make_exception_ptr(RuntimeError("peer failed")), 42);
  EXPECT_TRUE(work.test());
  EXPECT_NE(work.exception(), nullptr);
  EXPECT_THROW(work.wait(), RuntimeError);
  EXPECT_THROW(work.wait_for(1s), RuntimeError);
  EXPECT_EQ(work.start_ns(), 42);  // failed before starting: an empty interval
  EXPECT_EQ(work.end_ns(), 42);
}

TEST(Work, WaitWakesWhenAnotherThreadFinishes) {
  auto work = std::make_shared<Work>(OpInfo{});
  std::thread finisher([work] {
    work->mark_started(1);
    work->finish(2);
  });
  work->wait();
  EXPECT_TRUE(work->test());
  finisher.join();
}

}  // namespace
}  // namespace tandem
