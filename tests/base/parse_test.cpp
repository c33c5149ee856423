// Parsers for sizes, durations, bandwidths and numbers, and the human-readable formats.
#include "core/parse.h"

#include <gtest/gtest.h>

#include "cli/cli_support.h"
#include "core/error.h"

namespace tandem {
namespace {

using testing::usage_error;

TEST(ParseBytes, DecimalAndBinaryUnits) {
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("0"), 0);
  EXPECT_EQ(parse_bytes("12B"), 12);
  EXPECT_EQ(parse_bytes("1KB"), 1000);
  EXPECT_EQ(parse_bytes("1KiB"), 1024);
  EXPECT_EQ(parse_bytes("25MB"), 25'000'000);
  EXPECT_EQ(parse_bytes("256MiB"), 256LL << 20);
  EXPECT_EQ(parse_bytes("1GiB"), 1LL << 30);
  EXPECT_EQ(parse_bytes("2GB"), 2'000'000'000);
  EXPECT_EQ(parse_bytes("1.5GB"), 1'500'000'000);
  EXPECT_EQ(parse_bytes("0.5KiB"), 512);
  EXPECT_EQ(parse_bytes(" 64 KiB "), 65536);
}

TEST(ParseBytes, RejectsWithAMessageQuotingTheText) {
  for (const char* bad :
       {"", "KiB", "12XB", "1.5", "0.3KB1", "-1KiB", "12kib", "1e400GB", "nanKB", "1.0001KiB"}) {
    const std::string message = usage_error([&] { parse_bytes(bad); });
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos)
        << bad << " -> " << message;
  }
  EXPECT_NE(usage_error([] { parse_bytes("12XB"); }).find("expected a size"), std::string::npos);
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(parse_duration_ns("200ns"), 200);
  EXPECT_EQ(parse_duration_ns("5us"), 5000);
  EXPECT_EQ(parse_duration_ns("350ms"), 350'000'000);
  EXPECT_EQ(parse_duration_ns("1.5s"), 1'500'000'000);
  EXPECT_EQ(parse_duration_ns("0.5us"), 500);
  EXPECT_EQ(parse_duration_ns("0s"), 0);
  for (const char* bad : {"5", "5 parsecs", "us", "-5us", "0.5ns", "5usec"}) {
    EXPECT_NE(usage_error([&] { parse_duration_ns(bad); }), "") << bad;
  }
}

TEST(ParseBandwidth, BytesAndBits) {
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("25GB/s"), 25e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("800MB/s"), 800e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("100Gb/s"), 12.5e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("1.5GiB/s"), 1.5 * (1 << 30));
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("10 Mb/s"), 1.25e6);
  for (const char* bad : {"25GB", "25", "0GB/s", "-1GB/s", "25GB/h", "fastGB/s"}) {
    EXPECT_NE(usage_error([&] { parse_bandwidth_Bps(bad); }), "") << bad;
  }
}

TEST(ParseInt, StrictFullString) {
  EXPECT_EQ(parse_int("42", "--iters"), 42);
  EXPECT_EQ(parse_int("-7", "--iters"), -7);
  EXPECT_EQ(parse_int("9223372036854775807", "--n"), 9223372036854775807LL);
  for (const char* bad : {"", "4x", "x4", " 4", "4 ", "4.0", "+4", "0x10"}) {
    const std::string message = usage_error([&] { parse_int(bad, "--iters"); });
    EXPECT_EQ(message, std::string("--iters: expected an integer, got '") + bad + "'");
  }
  EXPECT_EQ(usage_error([] { parse_int("99999999999999999999", "--n"); }),
            "--n: '99999999999999999999' is out of range");
}

TEST(ParseDouble, StrictFullString) {
  EXPECT_DOUBLE_EQ(parse_double("0.25", "--ratio"), 0.25);
  EXPECT_DOUBLE_EQ(parse_double("-3", "--ratio"), -3.0);
  EXPECT_DOUBLE_EQ(parse_double("1e-3", "--ratio"), 1e-3);
  for (const char* bad : {"", "0.25x", "abc", "nan", "inf", " 1"}) {
    const std::string message = usage_error([&] { parse_double(bad, "--ratio"); });
    EXPECT_EQ(message, std::string("--ratio: expected a number, got '") + bad + "'");
  }
  EXPECT_NE(usage_error([] { parse_double("1e999", "--ratio"); }).find("out of range"),
            std::string::npos);
}

// Bounded numbers: finite, within stated bounds, and the bounds printed as people write
// them (never DBL_MAX's 309 digits).
TEST(ParseNumberIn, RefusesNonFiniteAndOutOfBoundsReadably) {
  const Bounds timeout{.min = 0, .max = 1e6, .min_open = true};
  EXPECT_DOUBLE_EQ(parse_double_in("300", "--timeout", timeout), 300);
  EXPECT_DOUBLE_EQ(parse_double_in("1e6", "--timeout", timeout), 1e6);
  EXPECT_EQ(usage_error([&] { parse_double_in("9.3e9", "--timeout", timeout); }),
            "--timeout: must be > 0 and <= 1000000, got '9.3e9'");
  for (const char* bad : {"inf", "-inf", "nan", "1e999", "0", "-1", "", "5s"}) {
    const std::string message = usage_error([&] { parse_double_in(bad, "--timeout", timeout); });
    EXPECT_EQ(message.rfind("--timeout: ", 0), 0u) << bad << " -> " << message;
    EXPECT_NE(message.find("> 0 and <= 1000000"), std::string::npos) << bad << " -> " << message;
    EXPECT_LT(message.size(), 80u) << message;
  }
  EXPECT_EQ(describe(Bounds{.min = 0, .max = 1}), "0..1");
  EXPECT_EQ(describe(Bounds{.min = 0, .max = 1.5e20, .min_open = true}), "> 0 and <= 1.5e+20");
}

TEST(Split, KeepsEmptyFields) {
  EXPECT_EQ(split("2,4,8", ','), (std::vector<std::string>{"2", "4", "8"}));
  EXPECT_EQ(split("a,,b,", ','), (std::vector<std::string>{"a", "", "b", ""}));
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(split("one", ','), (std::vector<std::string>{"one"}));
}

TEST(Trim, Whitespace) {
  EXPECT_EQ(trim("  a b \t\n"), "a b");
  EXPECT_EQ(trim(""), "");
  EXPECT_EQ(trim(" \t "), "");
  EXPECT_EQ(trim("x"), "x");
}

TEST(Format, Bytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(25.0 * (1 << 20)), "25.0 MiB");
  EXPECT_EQ(format_bytes(1.5 * (1 << 30)), "1.5 GiB");
}

TEST(Format, Durations) {
  EXPECT_EQ(format_duration_ns(0), "0 ns");
  EXPECT_EQ(format_duration_ns(850), "850 ns");
  EXPECT_EQ(format_duration_ns(5000), "5 us");
  EXPECT_EQ(format_duration_ns(1'234'567), "1.23 ms");
  EXPECT_EQ(format_duration_ns(12'345'678), "12.3 ms");
  EXPECT_EQ(format_duration_ns(999'999), "1 ms");
  EXPECT_EQ(format_duration_ns(2.5e9), "2.5 s");
  EXPECT_EQ(format_duration_ns(7.2e12), "7200 s");
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(ParseFactorTest, TakesAnOptionalXAndItsBounds) {
  const Bounds bounds{.min = 0, .max = 1, .min_open = true};
  EXPECT_EQ(parse_factor("0.5x", "--f", bounds), 0.5);
  EXPECT_EQ(parse_factor("1", "--f", bounds), 1.0);
  for (const char* bad : {"0", "0x", "2x", "x", "", "fastx", "0.5xx", "nanx"}) {
    EXPECT_THROW(parse_factor(bad, "--f", bounds), UsageError) << bad;
  }
  try {
    (void)parse_factor("3x", "--what-if network", bounds);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("--what-if network: ")) << e.what();
  }
}

}  // namespace
}  // namespace tandem
