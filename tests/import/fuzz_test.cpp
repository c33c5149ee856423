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
