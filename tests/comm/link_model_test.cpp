// LinkModel parsing, printing and ring wire times; ReduceOp names.
#include "comm/link_model.h"

#include <gtest/gtest.h>

#include <limits>

#include "comm/communicator.h"
#include "core/error.h"

namespace tandem {
namespace {

// The UsageError message of LinkModel::parse(text), or "" if it accepted it.
std::string parse_error_of(const char* text) {
  try {
    LinkModel::parse(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

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

// Outside 1 B/s..1000 TB/s or beyond 1000 s of latency: refused, saying the bounds.
TEST(LinkModel, RefusesValuesOutsideTheStatedBounds) {
  for (const char* bad : {"0.000001B/s,0us", "0.5B/s,1us", "7b/s,1us", "1001TB/s,1us"}) {
    EXPECT_EQ(parse_error_of(bad),
              std::string("bandwidth must be >= 1 B/s and <= 1000 TB/s, got '") + bad + "'");
  }
  EXPECT_EQ(parse_error_of("1GB/s,1001s"), "latency must be <= 1000 s, got '1GB/s,1001s'");
  // The bounds themselves are accepted.
  EXPECT_DOUBLE_EQ(LinkModel::parse("1B/s,1000s").bandwidth_Bps, 1);
  EXPECT_EQ(LinkModel::parse("1B/s,1000s").latency_ns, 1'000'000'000'000);
  EXPECT_DOUBLE_EQ(LinkModel::parse("1000TB/s,0us").bandwidth_Bps, 1e15);
}

TEST(LinkModel, Describes) {
  EXPECT_EQ(LinkModel::parse("25GB/s,5us").describe(), "25.0 GB/s, 5 us (emulated)");
  EXPECT_EQ(LinkModel::parse("800MB/s,1.5ms").describe(), "800.0 MB/s, 1.5 ms (emulated)");
  // A slow link is not "0.0 MB/s".
  EXPECT_EQ(LinkModel::parse("1B/s,1us").describe(), "1.0 B/s, 1 us (emulated)");
  EXPECT_EQ(LinkModel::parse("1.5KB/s,0us").describe(), "1.5 KB/s, 0 ns (emulated)");
  EXPECT_EQ(LinkModel::parse("1000TB/s,0us").describe(), "1000.0 TB/s, 0 ns (emulated)");
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

// At the slowest link accepted the times are still exact; where they would exceed an
// int64 they saturate at kMaxWireNs, never wrapping to a negative time (no wait at all).
TEST(LinkModel, WireTimesAreExactAtOneBytePerSecondAndSaturateBeyondInt64) {
  const LinkModel slow{.bandwidth_Bps = 1, .latency_ns = 1000};
  // 2 ranks, 20 KB: 2 steps of 10 KB at 1e9 ns per byte.
  EXPECT_EQ(slow.wire_time_ns(SpanKind::kAllreduce, 20'000, 2), 2 * (1000 + 10'000'000'000'000));
  EXPECT_EQ(slow.wire_time_ns(SpanKind::kSend, 1, 2), 1000 + 1'000'000'000);
  // 8 GiB over 1024 ranks at 1 B/s: 2 * 1023 steps of 8 MiB, about 1.7e19 ns.
  EXPECT_EQ(slow.wire_time_ns(SpanKind::kAllreduce, std::int64_t{8} << 30, 1024),
            LinkModel::kMaxWireNs);
  EXPECT_EQ(slow.wire_time_ns(SpanKind::kSend, std::numeric_limits<std::int64_t>::max(), 2),
            LinkModel::kMaxWireNs);
  // Below the bound parse() sets (a LinkModel built in code): saturates too.
  const LinkModel crawl{.bandwidth_Bps = 1e-6, .latency_ns = 0};
  EXPECT_EQ(crawl.wire_time_ns(SpanKind::kAllreduce, 20'000, 2), LinkModel::kMaxWireNs);
  // The largest latency accepted, on the most steps: exact.
  const LinkModel far{.bandwidth_Bps = 1e15, .latency_ns = LinkModel::kMaxLatencyNs};
  EXPECT_EQ(far.wire_time_ns(SpanKind::kBarrier, 0, 1024), 2046 * LinkModel::kMaxLatencyNs);
}

TEST(ReduceOp, Names) {
  EXPECT_EQ(to_string(ReduceOp::kSum), "sum");
  EXPECT_EQ(to_string(ReduceOp::kAverage), "average");
}

}  // namespace
}  // namespace tandem
