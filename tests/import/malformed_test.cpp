// Bad input of every kind ends in one UsageError that names the file and, where the
// reader knows it, the byte offset; never a crash, never a silent wrong answer.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>

#include "cli/cli_support.h"
#include "import/import_support.h"
#include "import/kineto_builder.h"
#include "trace_import/trace_reader.h"

namespace tandem::testing {
namespace {

// The message of the UsageError that importing `text` throws ("" if none).
std::string error_of(const std::string& text) {
  try {
    import_text(text, {}, "bad.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

struct Case {
  const char* what;
  std::string text;
  const char* expected;  // a substring of the message
  bool has_offset;
};

std::string kernel_with(const std::string& fields) {
  return R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,)" + fields + "}]}";
}

TEST(MalformedTraceTest, EveryKindOfBadInputIsOneClearError) {
  const std::string good = KinetoBuilder(0).kernel("gemm", 0, 10).kernel("gemm", 20, 10).str();
  const std::vector<Case> cases = {
      {"empty", "", "empty file", false},
      {"whitespace only", "  \n", "empty file", false},
      {"not JSON", "PK\x03\x04 this is a zip", "not valid JSON at byte", true},
      {"truncated", good.substr(0, good.size() / 2), "not valid JSON at byte", true},
      {"trailing garbage", good + "}", "not valid JSON at byte", true},
      {"invalid UTF-8", kernel_with("\"ts\":0,\"dur\":1,\"args\":{\"x\":\"\xff\"}"),
       "not valid JSON", true},
      {"no traceEvents", R"({"schemaVersion":1})", "no \"traceEvents\" array", true},
      {"scalar document", "42", "single value", true},
      {"traceEvents object", R"({"traceEvents":{}})", "expected an array", true},
      {"traceEvents string", R"({"traceEvents":"x"})", "not an array", true},
      {"event not object", R"({"traceEvents":[1]})", "event 0 is not an object", true},
      {"ts string", kernel_with(R"("ts":"abc","dur":1)"), "\"ts\" is not a number", true},
      {"ts object", kernel_with(R"("ts":{},"dur":1)"), "\"ts\" has the wrong type", true},
      {"name number", R"({"traceEvents":[{"ph":"X","cat":"kernel","name":5}]})",
       "\"name\" is not a string", true},
      {"ts absurd", kernel_with(R"("ts":1e300,"dur":1)"), "\"ts\" out of range", true},
      {"ts huge integer", kernel_with(R"("ts":18446744073709551615,"dur":1)"), "out of range",
       true},
      {"dur negative", kernel_with(R"("ts":0,"dur":-5)"), "negative \"dur\"", true},
      {"dur absurd", kernel_with(R"("ts":0,"dur":1e15)"), "\"dur\" out of range", true},
      {"ts missing", kernel_with(R"("dur":1)"), "missing \"ts\"", true},
      {"dur missing", kernel_with(R"("ts":1)"), "missing \"dur\"", true},
      {"rank string", R"({"distributedInfo":{"rank":"zero"},"traceEvents":[]})",
       "distributedInfo.rank", true},
      {"rank negative", R"({"distributedInfo":{"rank":-1},"traceEvents":[]})",
       "distributedInfo.rank", true},
      {"base time string", R"({"traceEvents":[],"baseTimeNanoseconds":"now"})",
       "baseTimeNanoseconds", true},
      {"tandem bad lane",
       R"({"traceEvents":[{"ph":"X","cat":"forward","name":"f","pid":0,"tid":9,"ts":0,"dur":1}],
          "otherData":{"tandem_trace":{"format":1,"t0_ns":0,"ranks":1}}})",
       "not a tandem rank and lane", false},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(c.text);
    EXPECT_TRUE(message.starts_with("bad.json: ")) << c.what << ": '" << message << "'";
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.what << ": '" << message << "'";
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.what;
    if (c.has_offset) {
      EXPECT_NE(message.find("byte"), std::string::npos) << c.what << ": '" << message << "'";
    }
  }
}

TEST(MalformedTraceTest, OffsetPointsAtTheProblem) {
  // The bad value sits after a long, valid prefix: the offset must be past that prefix.
  const std::string prefix = KinetoBuilder().kernel("gemm", 0, 10).str();
  const std::string text = prefix.substr(0, prefix.size() - 2) +  // strip "]}"
                           R"(,{"ph":"X","cat":"kernel","name":"k","ts":true,"dur":1}]})";
  const std::string message = error_of(text);
  const auto at = message.find("at byte ");
  ASSERT_NE(at, std::string::npos) << message;
  const long offset = std::stol(message.substr(at + 8));
  EXPECT_GT(offset, static_cast<long>(prefix.size()) - 2);
  EXPECT_LE(offset, static_cast<long>(text.size()));
}

TEST(MalformedTraceTest, EmptyTraceIsNotAnError) {
  // A well-formed trace without kernels imports as nothing; `analyze` says so later.
  EXPECT_EQ(error_of(R"({"traceEvents":[]})"), "");
  EXPECT_EQ(error_of("[]"), "");
}

TEST(MalformedTraceTest, UnreadableAndTruncatedGzipFilesAreNamed) {
  TempDir dir;
  const auto missing = dir.path() / "missing.json";
  EXPECT_THROW(import_traces({missing.string()}), UsageError);

  const std::string text = KinetoBuilder().kernel("gemm", 0, 10).str();
  const auto whole = dir.path() / "whole.json.gz";
  gzFile gz = gzopen(whole.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  const std::string packed = slurp(whole);
  const auto cut = dir.path() / "cut.json.gz";
  std::ofstream(cut, std::ios::binary) << packed.substr(0, packed.size() / 2);
  try {
    import_traces({cut.string()});
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(cut.string() + ": ")) << e.what();
  }
}

TEST(DecimalMicrosecondsTest, ExactNanoseconds) {
  EXPECT_EQ(decimal_us_to_ns("0"), 0);
  EXPECT_EQ(decimal_us_to_ns("12"), 12000);
  EXPECT_EQ(decimal_us_to_ns("12.3"), 12300);
  EXPECT_EQ(decimal_us_to_ns("12.345"), 12345);
  EXPECT_EQ(decimal_us_to_ns("12.3454999"), 12345);
  EXPECT_EQ(decimal_us_to_ns("12.3455"), 12346);
  EXPECT_EQ(decimal_us_to_ns("-1.5"), -1500);
  // The epoch in microseconds with a fraction: a double would lose the nanoseconds.
  EXPECT_EQ(decimal_us_to_ns("1700000000123456.789"), 1700000000123456789);
  EXPECT_EQ(decimal_us_to_ns("1e3"), std::nullopt);
  EXPECT_EQ(decimal_us_to_ns("."), std::nullopt);
  EXPECT_EQ(decimal_us_to_ns("99999999999999999999"), std::nullopt);
}

}  // namespace
}  // namespace tandem::testing
