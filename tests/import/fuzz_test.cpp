// A bounded, deterministic fuzz run for CI: thousands of corrupted variants of two seed
// traces (byte flips, JSON-significant bytes, truncations, duplicated ranges). Each must
// import cleanly or throw UsageError; a crash, a hang or another exception fails.
// (fuzz/kineto_fuzz.cpp is the open-ended libFuzzer version.)
#include <gtest/gtest.h>

#include <random>

#include "import/import_support.h"
#include "import/kineto_builder.h"
#include "timeline/chrome_trace.h"

namespace tandem::testing {
namespace {

std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string s = seed;
  static constexpr char kSignificant[] = "{}[]\":,.-0123456789eE\\ \x00\xff";
  const auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  };
  const int edits = 1 + static_cast<int>(pick(4));
  for (int e = 0; e < edits && !s.empty(); ++e) {
    switch (pick(5)) {
      case 0:
        s[pick(s.size())] = static_cast<char>(pick(256));
        break;
      case 1:
        s[pick(s.size())] = kSignificant[pick(sizeof kSignificant - 1)];
        break;
      case 2:
        s.resize(pick(s.size()));
        break;
      case 3: {
        const std::size_t at = pick(s.size());
        s.insert(at, s.substr(pick(s.size()), pick(64)));
        break;
      }
      default:
        s.erase(pick(s.size()), pick(16));
        break;
    }
  }
  return s;
}

TEST(ImportFuzzTest, CorruptedTracesImportOrFailCleanly) {
  Timeline own;
  own.ranks = 1;
  own.spans = {{.rank = 0,
                .lane = Lane::kCompute,
                .kind = SpanKind::kForward,
                .name = kNoName,
                .step = 0,
                .tag = 1,
                .start_ns = 10,
                .end_ns = 20,
                .bytes = 0,
                .flops = 0},
               {.rank = 0,
                .lane = Lane::kComm,
                .kind = SpanKind::kAllreduce,
                .name = kNoName,
                .step = 0,
                .tag = 0,
                .start_ns = 15,
                .end_ns = 30,
                .bytes = 64,
                .flops = 0}};
  const std::vector<std::string> seeds = {
      seed_kineto_trace(),
      to_chrome_trace(own).dump(),
  };
  std::mt19937_64 rng(20250101);  // fixed: the same variants on every run
  int imported = 0, rejected = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string text = mutate(seeds[i % seeds.size()], rng);
    try {
      const ImportResult r = import_text(text);
      // Whatever was accepted must be analyzable without tripping an internal check.
      (void)compute_iteration_metrics(r.timeline);
      ++imported;
    } catch (const UsageError&) {
      ++rejected;
    }
  }
  // Both outcomes occur, so the run exercised the error paths and the success path.
  EXPECT_GT(imported, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace tandem::testing
