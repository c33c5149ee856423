// The hostile-trace corpus (docs/RELIABILITY.md, "Limits on input sizes"): small .json.gz
// files that inflate to traces built to exhaust memory, each analyzed by the CLI in an
// address space of 128 MiB, less than the 160 MiB string, number or nesting each holds.
// A reader that materialized any of them would fail to allocate (exit 1) instead of
// giving the answer asserted here: a valid trace is analyzed, an invalid one is one line
// naming the file and the byte offset, exit 2. ctest also runs them, with the CLI's other
// hostile-input tests, as one entry under a time limit (label "hostile", tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli_support.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

// What analyze may allocate beyond what the binary needs to start.
constexpr std::uint64_t kAddressSpace = 128 << 20;
constexpr std::size_t kHuge = 160 << 20;

const std::string kKernel =
    R"({"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":20,"dur":10})";

struct Hostile {
  const char* name;
  std::string head;  // then `fill` repeated to kHuge bytes, then `tail`
  std::string fill;
  std::string tail;
  int exit_code;
  const char* expected;  // in stdout (exit 0) or in the one line on stderr (exit 2)
};

// Streams head + fill * kHuge + tail through gzip (the file stays a few hundred KiB).
void write_gzip(const fs::path& path, const Hostile& h) {
  gzFile gz = gzopen(path.c_str(), "wb1");
  ASSERT_NE(gz, nullptr);
  std::string chunk;
  while (chunk.size() < (1 << 20)) chunk += h.fill;
  gzwrite(gz, h.head.data(), static_cast<unsigned>(h.head.size()));
  for (std::size_t done = 0; done + chunk.size() <= kHuge; done += chunk.size()) {
    ASSERT_EQ(gzwrite(gz, chunk.data(), static_cast<unsigned>(chunk.size())),
              static_cast<int>(chunk.size()));
  }
  gzwrite(gz, h.tail.data(), static_cast<unsigned>(h.tail.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

class HostileTraceTest : public ::testing::TestWithParam<Hostile> {};

TEST_P(HostileTraceTest, AnalyzedInBoundedMemoryOrOneLineExitTwo) {
  const Hostile& h = GetParam();
  // Sanitizer builds run without the address-space limit (cli_support.h), and a trace
  // refused only because memory runs out is then analyzed whole.
  if (kSanitized && std::string_view(h.name) == "ManyEvents") {
    GTEST_SKIP() << "refused only under the address-space limit, which sanitizer builds lift";
  }
  TempDir dir;
  const fs::path trace = dir.path() / "hostile.json.gz";
  write_gzip(trace, h);
  ASSERT_LT(fs::file_size(trace), kHuge / 100) << "the corpus is small files";
  const CliResult r =
      run_tandem_in_address_space(kAddressSpace, "analyze --quiet " + trace.string());
  EXPECT_EQ(r.exit_code, h.exit_code) << r.out << r.err;
  if (h.exit_code == 0) {
    EXPECT_EQ(r.err, "");
    EXPECT_NE(r.out.find(h.expected), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_LT(r.err.size(), 300u) << "one short line, not the token quoted whole";
    EXPECT_TRUE(r.err.starts_with("tandem: error: " + trace.string() + ": ")) << r.err;
    EXPECT_NE(r.err.find(h.expected), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" at byte "), std::string::npos) << r.err;
  }
}

const std::string kEvents = R"({"traceEvents":[)" + kKernel + ",";

INSTANTIATE_TEST_SUITE_P(
    Corpus, HostileTraceTest,
    ::testing::Values(
        // Valid traces: the long strings are not kept, or kept cut to 64 KiB.
        Hostile{"SkippedString",
                kEvents + R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":0,)"
                          R"("dur":10,"args":{"junk":")",
                "a", R"("}}]})", 0, "2 compute / 0 comm"},
        Hostile{"KernelName", kEvents + R"({"ph":"X","cat":"kernel","name":")", "n",
                R"(","pid":0,"tid":7,"ts":0,"dur":10}]})", 0,
                "1 event name longer than 64 KiB, cut to the first 64 KiB"},
        Hostile{"Key", R"({")", "k", R"(":1,"traceEvents":[)" + kKernel + "]}", 0,
                "1 compute / 0 comm"},
        Hostile{"Whitespace", "", " \n\t\r", R"({"traceEvents":[)" + kKernel + "]}", 0,
                "1 compute / 0 comm"},
        // Valid, but millions of events, each of which is kept: refused before the memory
        // left (here the address-space limit) runs out.
        Hostile{"ManyEvents", kEvents, kKernel + ",", kKernel + "]}", 2,
                "its events do not fit in the memory left"},
        // Invalid ones: refused at the offending byte, never held whole.
        Hostile{"Number", kEvents + R"({"x":)", "1", "}]}", 2,
                "a number longer than 4096 characters"},
        Hostile{"Nesting", kEvents + R"({"x":)", "[", "", 2, "nested deeper than 1000 levels"},
        Hostile{"UnterminatedString", kEvents + R"({"x":")", "a", "", 2, "not valid JSON"},
        Hostile{"BadUtf8AtTheEndOfALongString", kEvents + R"({"x":")", "a", "\xFF\"}]}", 2,
                "invalid UTF-8 in a string"},
        Hostile{"EmptyArrays", kEvents + R"({"x":[)", "[],", "[]]}]}", 2,
                "more than 1 MiB of brackets, commas and literals"},
        Hostile{"Literals", kEvents + R"({"x":[)", "true,null,false,", "true]}]}", 2,
                "more than 1 MiB of brackets, commas and literals"}),
    [](const ::testing::TestParamInfo<Hostile>& p) { return std::string(p.param.name); });

// The fuzz target's seeds (fuzz/corpus), cut short at every eighth of their length: each
// cut is one line naming the file and the byte, exit 2, in the same address space. (The
// byte-level mutations of the same seeds run in-process: ImportFuzzTest.)
TEST(HostileTraceSeeds, EveryCutOfAFuzzSeedIsOneLineExitTwo) {
  TempDir dir;
  for (const char* seed : {"kineto_small.json", "tandem_small.json"}) {
    const std::string text = slurp(fs::path(TANDEM_SOURCE_DIR) / "fuzz" / "corpus" / seed);
    ASSERT_GT(text.size(), 100u) << seed;
    for (int eighth = 1; eighth < 8; ++eighth) {
      const fs::path cut = dir.path() / (std::to_string(eighth) + "-" + seed);
      std::ofstream(cut) << text.substr(0, text.size() * eighth / 8);
      const CliResult r =
          run_tandem_in_address_space(kAddressSpace, "analyze --quiet " + cut.string());
      EXPECT_EQ(r.exit_code, 2) << cut << ": " << r.out << r.err;
      EXPECT_EQ(count_lines(r.err), 1) << cut << ": " << r.err;
      EXPECT_TRUE(r.err.starts_with("tandem: error: " + cut.string() + ": ")) << r.err;
    }
  }
}

}  // namespace
}  // namespace tandem::testing
