// Clock alignment of process ranks onto rank 0's clock.
#include "engine/launch.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tandem
