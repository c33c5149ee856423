// LinkModel parsing, printing and ring wire times; ReduceOp names.
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "core/error.h"

namespace tandem {
namespace {

TEST(LinkModel, ParsesBandwidthAndLatencyInEitherOrder) {
  const LinkModel a = LinkModel::parse("25GB/s,5us");
  EXPECT_DOUBLE_EQ(a.bandwidth_Bps, 25e9);
  EXPECT_EQ(a.latency_ns, 5000);
  EXPECT_TRUE(a.enabled());
  const LinkModel b = LinkModel::parse(" 2ms , 100Gb/s ");
  EXPECT_DOUBLE_EQ(b.bandwidth_Bps, 12.5e9);
  EXPECT_EQ(b.latency_ns, 2'000'000);
  EXPECT_FALSE(LinkModel{}.enabled());
}

TEST(LinkModel, RejectsMalformedTextWithTheExpectedForm) {
  for (const char* bad : {"x", "", "25GB/s", "5us", "25GB/s,5us,1us", "25GB/s,25GB/s", "5us,5us",
                          "25XB/s,5us", "25GB/s,5 parsecs", "0GB/s,5us"}) {
    try {
      LinkModel::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("expected BANDWIDTH,LATENCY like 25GB/s,5us, got '", 0), 0)
          << message;
      EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << message;
    }
  }
}

TEST(LinkModel, Describes) {
  EXPECT_EQ(LinkModel::parse("25GB/s,5us").describe(), "25.0 GB/s, 5 us (emulated)");
  EXPECT_EQ(LinkModel::parse("800MB/s,1.5ms").describe(), "800.0 MB/s, 1.5 ms (emulated)");
  EXPECT_EQ(LinkModel{}.describe(), "none");
}

TEST(LinkModel, WireTimesFollowTheRingSchedule) {
  const LinkModel link{.bandwidth_Bps = 1e9, .latency_ns = 1000};  // 1 byte per ns
  const std::int64_t bytes = 4'000'000;
  // allreduce: 2(n-1) steps of bytes/n.
  EXPECT_EQ(link.wire_time_ns(SpanKind::kAllreduce, bytes, 4), 6 * (1000 + 1'000'000));
  EXPECT_EQ(link.wire_time_ns(SpanKind::kReduceScatter, bytes, 4), 3 * (1000 + 1'000'000));
  EXPECT_EQ(link.wire_time_ns(SpanKind::kAllgather, bytes, 4), 3 * (1000 + 1'000'000));
  EXPECT_EQ(link.wire_time_ns(SpanKind::kBroadcast, bytes, 4), 1000 + 4'000'000);
  EXPECT_EQ(link.wire_time_ns(SpanKind::kSend, bytes, 4), 1000 + 4'000'000);
  EXPECT_EQ(link.wire_time_ns(SpanKind::kRecv, bytes, 2), 1000 + 4'000'000);
  EXPECT_EQ(link.wire_time_ns(SpanKind::kBarrier, 0, 4), 6 * 1000);
  // One rank has nobody to talk to; a disabled link costs nothing.
  EXPECT_EQ(link.wire_time_ns(SpanKind::kAllreduce, bytes, 1), 0);
  EXPECT_EQ(LinkModel{}.wire_time_ns(SpanKind::kAllreduce, bytes, 4), 0);
}

TEST(ReduceOp, Names) {
  EXPECT_EQ(to_string(ReduceOp::kSum), "sum");
  EXPECT_EQ(to_string(ReduceOp::kAverage), "average");
}

}  // namespace
}  // namespace tandem
