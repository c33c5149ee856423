// Results directories for the report tests: a real characterize sweep, a hand-made train
// directory with a hostile span name, and a RAPL fixture so power gets sampled.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_support.h"
#include "timeline/chrome_trace.h"

namespace tandem::testing {

inline const std::string kHostileName = "<script>alert(1)</script>";

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A powercap tree with one zone: the sampler reads it, so traces get power counters.
inline std::filesystem::path make_powercap_fixture(const std::filesystem::path& root) {
  write_text(root / "intel-rapl:0" / "name", "package-0");
  write_text(root / "intel-rapl:0" / "energy_uj", "5000000");
  write_text(root / "intel-rapl:0" / "max_energy_range_uj", "1000000000");
  return root;
}

// `tandem characterize` over a chunk sweep, with power sampled from the fixture.
inline std::filesystem::path make_characterize_results(const std::filesystem::path& base) {
  const auto out = base / "sweep";
  const auto powercap = make_powercap_fixture(base / "powercap");
  const CliResult r = run_tandem(
      "characterize --synthetic compute=6ms,comm=3ms,chunks=2 --ranks 2 --warmup 0 "
      "--iterations 2 --no-progress --sweep chunks=2,4 --power-interval-ms 1 "
      "--powercap-root " +
      powercap.string() + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

// The layout of `tandem train --out`, with a span whose name is markup.
inline std::filesystem::path make_hostile_train_results(const std::filesystem::path& base) {
  const auto out = base / "hostile";
  std::filesystem::create_directories(out);
  Timeline t;
  t.ranks = 1;
  Span fwd;
  fwd.lane = Lane::kCompute;
  fwd.kind = SpanKind::kForward;
  fwd.step = 0;
  fwd.start_ns = 1000;
  fwd.end_ns = 50000;
  fwd.name = t.names->intern(kHostileName);
  Span ar;
  ar.lane = Lane::kComm;
  ar.kind = SpanKind::kAllreduce;
  ar.step = 0;
  ar.tag = 0;
  ar.start_ns = 30000;
  ar.end_ns = 70000;
  ar.issue_ns = 20000;
  ar.bytes = 4096;
  t.spans = {fwd, ar};
  write_chrome_trace(t, (out / "trace.json").string());
  const nlohmann::json summary = {
      {"schema", 2},
      {"tool", "tandem"},
      {"command", "train"},
      {"config", {{"model", kHostileName}, {"ranks", 1}, {"steps", 1}, {"strategy", "bucketed"}}},
      {"measured_steps", 1},
      {"step_ms", {{"median", 0.07}, {"p10", 0.07}, {"p90", 0.07}, {"mean", 0.07}}}};
  write_text(out / "summary.json", summary.dump());
  return out;
}

}  // namespace tandem::testing
