// `tandem analyze` as a user meets it: traces in, table and files out, one clear line
// for bad input, and tandem's own trace giving back the metrics its run reported.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/cli_support.h"
#include "import/kineto_builder.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

// Two steps per rank: compute [0,120) us, all-reduce [60,160) us, step windows 1000 us.
std::string rank_trace(std::optional<int> rank, const std::string& kernel = "sm80_gemm") {
  KinetoBuilder b(rank);
  for (int step = 0; step < 2; ++step) {
    const double t = 1000.0 * step;
    b.profiler_step(step, t, 1000).kernel(kernel, t, 120);
    b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 60, 100, 13);
  }
  return b.str();
}

// The line of `text` that contains `label` ("" if none).
std::string line_of(const std::string& text, const std::string& label) {
  const auto at = text.find(label);
  if (at == std::string::npos) return "";
  return text.substr(at, text.find('\n', at) - at);
}

void write_gzip(const fs::path& path, const std::string& text) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
}

TEST(AnalyzeCliTest, HelpExplainsEveryFlag) {
  const CliResult r = run_tandem("analyze --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--baseline", "--out", "--comm-regex", "--memory-regex", "--compute-regex", "--warmup",
        "--kernels"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(AnalyzeCliTest, DirectoryOfRankTracesGivesTableAndFiles) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  fs::create_directories(traces);
  std::ofstream(traces / "rank0.json") << rank_trace(0);
  write_gzip(traces / "rank1.json.gz", rank_trace(1));
  const fs::path out = dir.path() / "a";
  const CliResult r = run_tandem("analyze " + traces.string() + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 1 (from distributedInfo.rank)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hidden share of communication  60.0%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("summary over 2 iterations"), std::string::npos) << r.out;

  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(summary["schema"], 2);
  EXPECT_EQ(summary["tool"], "tandem");
  EXPECT_EQ(summary["command"], "analyze");
  EXPECT_EQ(summary["argv"][1], "analyze");
  EXPECT_EQ(summary["inputs"].size(), 2u);
  EXPECT_DOUBLE_EQ(summary["overlap_ms"]["median"].get<double>(), 0.06);
  EXPECT_EQ(count_lines(slurp(out / "iterations.csv")), 1 + 2 * 2);
  const auto trace = nlohmann::json::parse(slurp(out / "trace.json"));
  std::set<int> pids;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") pids.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));

  // The same report as tandem characterize's: a Gantt chart of both ranks, the
  // per-iteration breakdown and the metrics; `tandem report` rebuilds it identically.
  const std::string html = slurp(out / "report.html");
  for (const char* part : {"Timeline of one iteration", "Where each iteration goes",
                           "ncclDevKernel_AllReduce", "rank 0", "rank 1", "hidden share"}) {
    EXPECT_NE(html.find(part), std::string::npos) << part;
  }
  EXPECT_EQ(html.find("no analysed iteration"), std::string::npos);
  fs::remove(out / "report.html");
  const CliResult rebuilt = run_tandem("report " + out.string());
  ASSERT_EQ(rebuilt.exit_code, 0) << rebuilt.err;
  EXPECT_EQ(slurp(out / "report.html"), html);
}

TEST(AnalyzeCliTest, RankFromFileOrderIsSaid) {
  TempDir dir;
  std::ofstream(dir.path() / "x.json") << rank_trace(std::nullopt);
  const CliResult r = run_tandem("analyze " + (dir.path() / "x.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 0 (from file order)"), std::string::npos) << r.out;
}

TEST(AnalyzeCliTest, BaselineAddsSlowdownAndIdealTime) {
  TempDir dir;
  std::ofstream(dir.path() / "run.json") << rank_trace(0);
  KinetoBuilder b(0);
  for (int step = 0; step < 2; ++step)
    b.profiler_step(step, 1000.0 * step, 1000).kernel("sm80_gemm", 1000.0 * step, 100);
  std::ofstream(dir.path() / "iso.json") << b.str();
  const CliResult r = run_tandem("analyze " + (dir.path() / "run.json").string() + " --baseline " +
                                 (dir.path() / "iso.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The summary labels the baseline's metrics as the metrics table does.
  const std::string table_head = "metrics (as tandem characterize";
  const std::string summary = r.out.substr(0, r.out.find(table_head));
  EXPECT_NE(line_of(summary, "compute slowdown S (eq. 1)").find(" 20.0%"), std::string::npos)
      << r.out;  // (120 - 100) / 100
  EXPECT_NE(line_of(summary, "E2E_ideal (eq. 4)").find(" 0.100 ms"), std::string::npos)
      << r.out;  // 120 us - (120 - 100) us
  EXPECT_NE(line_of(summary, "T_comp_iso (compute-only)").find(" 0.100 ms"), std::string::npos)
      << r.out;
  // tandem characterize's table, with the same numbers.
  const std::string table = r.out.substr(r.out.find(table_head));
  EXPECT_NE(line_of(table, "compute slowdown S (eq. 1)").find("20.0%"), std::string::npos) << r.out;
  EXPECT_NE(line_of(table, "E2E_ideal (eq. 4)").find("0.100 ms"), std::string::npos) << r.out;
}

// A baseline that is not the same job without communication is refused in one line: other
// ranks (7 and 8 against 0 and 1), a tandem CPU trace for a Kineto GPU profile.
TEST(AnalyzeCliTest, ABaselineOfAnotherJobIsRefused) {
  TempDir dir;
  for (int r = 0; r < 2; ++r) {
    std::ofstream(dir.path() / ("run" + std::to_string(r) + ".json")) << rank_trace(r);
    std::ofstream(dir.path() / ("other" + std::to_string(r) + ".json")) << rank_trace(7 + r);
  }
  const std::string run =
      (dir.path() / "run0.json").string() + " " + (dir.path() / "run1.json").string();
  CliResult r =
      run_tandem("analyze " + run + " --baseline " + (dir.path() / "other0.json").string() + " " +
                 (dir.path() / "other1.json").string());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--baseline: its ranks (7, 8) are not the trace's (0, 1)"),
            std::string::npos)
      << r.err;
  // tandem's own trace of a CPU run as the baseline of a GPU profile.
  const fs::path own = dir.path() / "own";
  ASSERT_EQ(run_tandem("train --model mlp:2x16 --ranks 2 --steps 2 --quiet --out " + own.string())
                .exit_code,
            0);
  r = run_tandem("analyze " + run + " --baseline " + (own / "trace.json").string());
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--baseline: a tandem trace is not the baseline of a kineto trace"),
            std::string::npos)
      << r.err;
}

// Arguments that cannot mean what they say are said, not silently dropped: an
// args.device of -1 (the kernel stays on the file's device), nelems of 2^64-1 and 1.5e300
// (the collective's size is unknown).
TEST(AnalyzeCliTest, ArgumentsThatAreNoDeviceOrCountAreSaid) {
  TempDir dir;
  KinetoBuilder b(0);
  b.profiler_step(0, 0, 1000).kernel("sm80_gemm", 0, 120);
  nlohmann::json odd = {{"ph", "X"},
                        {"cat", "kernel"},
                        {"name", "sm80_gemm"},
                        {"pid", 0},
                        {"tid", 7},
                        {"ts", 200},
                        {"dur", 50},
                        {"args", {{"device", -1}, {"stream", 7}}}};
  b.event(odd);
  b.nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 60, 100, 13, "allreduce", 1024, 1024, 2);
  nlohmann::json huge = {{"ph", "X"},
                         {"cat", "kernel"},
                         {"name", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"},
                         {"pid", 0},
                         {"tid", 20},
                         {"ts", 400},
                         {"dur", 100},
                         {"args",
                          {{"device", 0},
                           {"stream", 20},
                           {"Collective name", "allreduce"},
                           {"In msg nelems", 18446744073709551615ull},
                           {"Out msg nelems", 1.5e300},
                           {"Group size", 2}}}};
  b.event(huge);
  std::ofstream(dir.path() / "odd.json") << b.str();
  const CliResult r = run_tandem("analyze " + (dir.path() / "odd.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 event with an args.device that is no device"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("2 nelems that are no count"), std::string::npos) << r.out;
}

// Waiting explained on Kineto traces: rank 1's all-reduce kernel starts 30 us after rank
// 0's, both end together, so rank 0 spends 30 of its 100 us waiting for rank 1 (skew) and
// 70 moving data (transfer); the report names rank 1 as the late one, on the traces' own
// clocks.
TEST(AnalyzeCliTest, WaitingIsSplitIntoSkewAndTransfer) {
  TempDir dir;
  KinetoBuilder r0(0), r1(1);
  for (int step = 1; step <= 3; ++step) {
    const double t = 1000.0 * step;
    for (KinetoBuilder* b : {&r0, &r1}) {
      b->profiler_step(step, t, 1000).launch(t + 1, 2 * step).launch(t + 2, 2 * step + 1);
      b->kernel("sm80_gemm", t, 120, 7, 2 * step);
    }
    r0.nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 60, 100, 2 * step + 1, "allreduce",
            1 << 20, 1 << 20, 2, "Float");
    r1.nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 90, 70, 2 * step + 1, "allreduce",
            1 << 20, 1 << 20, 2, "Float");
  }
  std::ofstream(dir.path() / "r0.json") << r0.str();
  std::ofstream(dir.path() / "r1.json") << r1.str();
  const fs::path out = dir.path() / "a";
  const CliResult r = run_tandem("analyze " + (dir.path() / "r0.json").string() + " " +
                                 (dir.path() / "r1.json").string() + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 1 arrived last at 3 of 3 collectives (100%), 30 us after"),
            std::string::npos)
      << r.out;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  const auto& w = summary["waiting"];
  EXPECT_EQ(w["blocked_on"], "collective spans");
  EXPECT_NE(w["clocks"].get<std::string>().find("Kineto"), std::string::npos);
  EXPECT_EQ(w["collectives"], 3);
  EXPECT_EQ(w["most_often_last"], 1);
  ASSERT_EQ(w["ranks"].size(), 2u);
  EXPECT_NEAR(w["ranks"][0]["skew_ms"].get<double>(), 0.030, 1e-9);
  EXPECT_NEAR(w["ranks"][0]["transfer_ms"].get<double>(), 0.070, 1e-9);
  EXPECT_NEAR(w["ranks"][1]["skew_ms"].get<double>(), 0.0, 1e-9);
  EXPECT_NEAR(w["ranks"][1]["late_by_ms"].get<double>(), 0.030, 1e-9);
  EXPECT_EQ(w["kinds"][0]["kind"], "allreduce");
  EXPECT_NE(slurp(out / "report.html").find("Waiting explained"), std::string::npos);
}

// Two tensor-parallel pairs, process groups "1" (ranks 0, 1) and "2" (ranks 2, 3), run
// the same all-reduce kernel in each iteration: matched by group, they are two
// collectives of two ranks, each pair's late rank 20 us behind its partner; matched by
// kernel name alone they would be one of four ranks.
TEST(AnalyzeCliTest, WaitingMatchesCollectivesWithinTheirProcessGroup) {
  TempDir dir;
  std::string files;
  for (int rank = 0; rank < 4; ++rank) {
    KinetoBuilder b(rank);
    const double late = rank % 2 == 1 ? 20 : 0;  // the second of each pair
    const double pair = rank < 2 ? 0 : 40;       // the second pair starts later still
    for (int step = 1; step <= 2; ++step) {
      const double t = 1000.0 * step;
      b.profiler_step(step, t, 1000).launch(t + 1, 2 * step).launch(t + 2, 2 * step + 1);
      b.kernel("sm80_gemm", t, 100, 7, 2 * step);
      b.nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 200 + pair + late, 100 - late - pair,
             2 * step + 1, "allreduce", 1024, 1024, 2, "Float", 0, rank < 2 ? "1" : "2");
    }
    const fs::path file = dir.path() / ("r" + std::to_string(rank) + ".json");
    std::ofstream(file) << b.str();
    files += " " + file.string();
  }
  const fs::path out = dir.path() / "a";
  const CliResult r = run_tandem("analyze" + files + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto w = nlohmann::json::parse(slurp(out / "summary.json"))["waiting"];
  EXPECT_EQ(w["collectives"], 2 * 2);  // 2 groups x 2 iterations
  ASSERT_EQ(w["ranks"].size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    // The first of each pair waits 20 us for its partner, not for the other pair.
    EXPECT_NEAR(w["ranks"][rank]["skew_ms"].get<double>(), rank % 2 == 0 ? 0.020 : 0.0, 1e-9)
        << rank;
    EXPECT_EQ(w["ranks"][rank]["last_arrivals"], rank % 2 == 1 ? 2 : 0) << rank;
  }
}

// Round two as a user meets it: HTA's per-rank number, the collectives with their sizes
// and bandwidths, and the kernels contention slows, on the terminal and in the files.
TEST(AnalyzeCliTest, RanksCollectivesAndSlowedKernels) {
  TempDir dir;
  // Three steps; per step a gemm [t, t+120) and a 4 MiB all-reduce of 8 ranks [t+60, t+160).
  KinetoBuilder run(0), iso(0);
  for (int step = 1; step <= 3; ++step) {
    const double t = 1000.0 * step;
    run.profiler_step(step, t, 1000).launch(t + 1, 2 * step).launch(t + 2, 2 * step + 1);
    run.kernel("sm80_gemm", t, 120, 7, 2 * step);
    run.nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t + 60, 100, 2 * step + 1, "allreduce",
             1 << 20, 1 << 20, 8, "Float");
    iso.profiler_step(step, t, 1000).kernel("sm80_gemm", t, 100);
  }
  std::ofstream(dir.path() / "run.json") << run.str();
  std::ofstream(dir.path() / "iso.json") << iso.str();
  const fs::path out = dir.path() / "a";
  const CliResult r = run_tandem("analyze " + (dir.path() / "run.json").string() + " --baseline " +
                                 (dir.path() / "iso.json").string() + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // HTA: steps 1 and 2 (the last left out): overlap 60 of 100 each -> 60.00%; all: 60.00%.
  EXPECT_NE(r.out.find("per rank, as HTA"), std::string::npos) << r.out;
  EXPECT_NE(line_of(r.out, "   0       -").find("60.00%       60.00%"), std::string::npos) << r.out;
  // 4 MiB in 100 us: algbw 41.94 GB/s, busbw x 1.75 = 73.40.
  const std::string row = line_of(r.out, "AllReduce ");
  EXPECT_NE(row.find("4.0 MiB"), std::string::npos) << r.out;
  EXPECT_NE(row.find("41.94"), std::string::npos) << r.out;
  EXPECT_NE(row.find("73.40"), std::string::npos) << r.out;
  EXPECT_NE(line_of(r.out, "sm80_gemm").find("+20.0%"), std::string::npos) << r.out;
  EXPECT_NE(line_of(r.out, "sm80_gemm").find("AllReduce 4.0 MiB"), std::string::npos) << r.out;

  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  ASSERT_EQ(summary["ranks"].size(), 1u);
  EXPECT_DOUBLE_EQ(summary["ranks"][0]["hidden_share_pct"].get<double>(), 60.0);
  EXPECT_TRUE(summary["hta_last_step_filter"].get<bool>());
  EXPECT_EQ(summary["collectives"][0]["bytes"], 4 << 20);
  EXPECT_EQ(summary["collectives"][0]["count"], 3);
  EXPECT_DOUBLE_EQ(summary["kernel_slowdown"]["kernels"][0]["slowdown"].get<double>(), 0.2);
  EXPECT_EQ(count_lines(slurp(out / "collectives.csv")), 2);
  EXPECT_EQ(count_lines(slurp(out / "kernels.csv")), 2);
  EXPECT_NE(slurp(out / "kernels.csv").find("\"sm80_gemm\",3,"), std::string::npos);
  const std::string html = slurp(out / "report.html");
  for (const char* part : {"Per rank, as HTA", "60.00%", "Collectives", "73.40",
                           "Kernels slowed by overlap", "+20.0%"}) {
    EXPECT_NE(html.find(part), std::string::npos) << part;
  }
}

// Round trip: tandem's own trace.json gives exactly the metrics `tandem train` reported:
// the same spans at whole nanoseconds (ts/dur are written with every ns and parsed
// exactly), through the same metric functions, so the tolerance is only for the
// printing of doubles in JSON.
TEST(AnalyzeCliTest, OwnTraceGivesTheMetricsTheRunReported) {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  const CliResult train = run_tandem(
      "train --ranks 2 --model mlp:3x64 --batch 8 --steps 6 "
      "--strategy layerwise --quiet --out " +
      run.string());
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const fs::path out = dir.path() / "analysis";
  const CliResult r =
      run_tandem("analyze " + (run / "trace.json").string() + " --warmup 2 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto reported = nlohmann::json::parse(slurp(run / "summary.json"));
  const auto analyzed = nlohmann::json::parse(slurp(out / "summary.json"));
  for (const char* key : {"compute_ms", "comm_ms", "overlap_ms", "exposed_comm_ms"}) {
    for (const char* stat : {"median", "p10", "p90", "mean"}) {
      const double a = reported[key][stat].get<double>();
      const double b = analyzed[key][stat].get<double>();
      EXPECT_NEAR(a, b, 1e-12 * std::max(1.0, std::fabs(a))) << key << " " << stat;
    }
  }
  EXPECT_EQ(reported["hidden_share"].is_null(), analyzed["hidden_share"].is_null());
  if (!reported["hidden_share"].is_null()) {
    EXPECT_NEAR(reported["hidden_share"].get<double>(), analyzed["hidden_share"].get<double>(),
                1e-12);
  }
  EXPECT_EQ(analyzed["measured_iterations"], reported["measured_steps"]);
}

TEST(AnalyzeCliTest, NamesWithMarkupSurviveEscaped) {
  TempDir dir;
  const std::string name = "<script>alert(\"x\")</script>&amp;";
  std::ofstream(dir.path() / "r.json") << rank_trace(0, name);
  const fs::path out = dir.path() / "a";
  const CliResult r =
      run_tandem("analyze " + (dir.path() / "r.json").string() + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto trace = nlohmann::json::parse(slurp(out / "trace.json"));  // still valid JSON
  bool found = false;
  for (const auto& e : trace["traceEvents"]) found = found || e.value("name", "") == name;
  EXPECT_TRUE(found);
  const std::string html = slurp(out / "report.html");
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert("), std::string::npos);
}

// A NUL and a terminal escape in a kernel name: valid JSON still, and in the report as
// visible \xNN text, never as raw bytes.
TEST(AnalyzeCliTest, ControlCharactersInNamesAreEscaped) {
  TempDir dir;
  const std::string name = std::string("k\0", 2) + "\x1b[31mred\x7f";
  std::ofstream(dir.path() / "r.json") << rank_trace(0, name);  // written as \u0000 ...
  const fs::path out = dir.path() / "a";
  const CliResult r =
      run_tandem("analyze " + (dir.path() / "r.json").string() + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string raw = slurp(out / "trace.json");
  EXPECT_EQ(raw.find('\x1b'), std::string::npos);
  EXPECT_EQ(raw.find('\0'), std::string::npos);
  const auto parsed = nlohmann::json::parse(raw);
  bool found = false;
  for (const auto& e : parsed["traceEvents"]) found = found || e.value("name", "") == name;
  EXPECT_TRUE(found);
  const std::string html = slurp(out / "report.html");
  EXPECT_EQ(html.find('\x1b'), std::string::npos);
  EXPECT_EQ(html.find('\0'), std::string::npos);
  EXPECT_EQ(html.find('\x7f'), std::string::npos);
  EXPECT_NE(html.find("k\\x00\\x1b[31mred\\x7f"), std::string::npos);
}

// A dtype (or kernel name) with control characters reaches collectives.csv as \xNN, as
// in the report: never a raw NUL or escape in a CSV line.
TEST(AnalyzeCliTest, ControlCharactersInCsvFieldsAreEscaped) {
  TempDir dir;
  KinetoBuilder run(0);
  run.profiler_step(1, 1000, 1000).launch(1001, 2);
  run.nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1060, 100, 2, "allreduce", 1 << 10,
           1 << 10, 2, std::string("Fl\0\x1b" "at", 6));
  std::ofstream(dir.path() / "r.json") << run.str();
  const fs::path out = dir.path() / "a";
  const CliResult r =
      run_tandem("analyze " + (dir.path() / "r.json").string() + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string csv = slurp(out / "collectives.csv");
  EXPECT_EQ(csv.find('\0'), std::string::npos);
  EXPECT_EQ(csv.find('\x1b'), std::string::npos);
  EXPECT_NE(csv.find("\"Fl\\x00\\x1bat\""), std::string::npos) << csv;
}

// A failure after --out was opened (a corrupt trace is found only when read) leaves no
// directory behind: results appear whole or not at all.
TEST(AnalyzeCliTest, AFailedAnalysisLeavesNoOutputDirectory) {
  TempDir dir;
  std::ofstream(dir.path() / "bad.json") << rank_trace(0).substr(0, 300);
  const fs::path out = dir.path() / "a";
  const CliResult r =
      run_tandem("analyze " + (dir.path() / "bad.json").string() + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(dir.path() / "a.partial"));
  EXPECT_FALSE(fs::exists(dir.path() / ".a.lock"));
}

// Rank numbers can be sparse: one Kineto trace of rank 1000000, or a tandem trace whose
// spans say pid 999999, is one rank, and what --out writes grows with the ranks present
// (it wrote metadata for a million ranks, 150 MB).
TEST(AnalyzeCliTest, OutputGrowsWithTheRanksPresentNotTheLargestNumber) {
  TempDir dir;
  std::string kineto = rank_trace(0);
  kineto.replace(kineto.find("\"rank\":0"), 8, "\"rank\":1000000");
  std::ofstream(dir.path() / "k.json") << kineto;
  std::ofstream(dir.path() / "t.json") << R"({"traceEvents":[
      {"ph":"X","cat":"forward","name":"f","pid":999999,"tid":0,"ts":0,"dur":10,"args":{"step":0}},
      {"ph":"X","cat":"allreduce","name":"a","pid":999999,"tid":1,"ts":5,"dur":10,"args":{"step":0}}],
      "otherData":{"tandem_trace":{"format":1,"t0_ns":0,"ranks":1}}})";
  for (const char* file : {"k.json", "t.json"}) {
    const fs::path out = dir.path() / (std::string(file) + ".out");
    const CliResult r =
        run_tandem("analyze " + (dir.path() / file).string() + " --quiet --out " + out.string());
    ASSERT_EQ(r.exit_code, 0) << file << ": " << r.err;
    EXPECT_LT(fs::file_size(out / "trace.json"), 100'000u) << file;
    const auto trace = nlohmann::json::parse(slurp(out / "trace.json"));
    int process_names = 0;
    for (const auto& e : trace["traceEvents"]) process_names += e["name"] == "process_name";
    EXPECT_EQ(process_names, 1) << file;
  }
}

// std::regex recursed once per character: '.*x' on a 50 KB kernel name overflowed the
// stack. RE2 matches in time linear in the name.
TEST(AnalyzeCliTest, UserRegexesOnA100KBNameDoNotCrash) {
  TempDir dir;
  const std::string name(100'000, 'a');
  std::ofstream(dir.path() / "r.json") << rank_trace(0, name);
  const CliResult r = run_tandem("analyze " + (dir.path() / "r.json").string() +
                                 " --quiet --compute-regex '.*x' --memory-regex '(a|aa)*b'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Nothing matches '.*x': the long kernels are ignored, and counted.
  EXPECT_NE(r.out.find("2 GPU events matched no rule (ignored)"), std::string::npos) << r.out;
  const CliResult matched = run_tandem("analyze " + (dir.path() / "r.json").string() +
                                       " --quiet --compute-regex '.*A$'");  // case-insensitive
  ASSERT_EQ(matched.exit_code, 0) << matched.err;
  EXPECT_EQ(matched.out.find("matched no rule"), std::string::npos) << matched.out;
}

struct BadInput {
  const char* what;
  std::string file_content;  // written to bad.json; empty: use `args` alone
  std::string args;
  const char* expected;
};

TEST(AnalyzeCliTest, BadInputIsOneLineAndExitTwo) {
  TempDir dir;
  const std::string bad = (dir.path() / "bad.json").string();
  const std::vector<BadInput> cases = {
      {"missing file", "", (dir.path() / "nope.json").string(), "no such file"},
      {"not JSON", "hello", bad, "bad.json: not valid JSON at byte"},
      {"empty file", " ", bad, "bad.json: empty file"},
      {"truncated", rank_trace(0).substr(0, 300), bad, "bad.json: not valid JSON at byte"},
      {"wrong type", R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":"0","dur":1}]})",
       bad, "bad.json: event 0: \"ts\" is not a number"},
      {"absurd timestamp",
       R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":1e19,"dur":1}]})", bad,
       "bad.json: event 0: \"ts\" out of range"},
      {"no kernels", R"({"traceEvents":[]})", bad, "nothing to analyze"},
      {"bad regex", rank_trace(0), bad + " --comm-regex '('", "--comm-regex"},
      {"empty dir", "", dir.path().string() + "/empty", "no *.json"},
      // A loop of symbolic links, named or found in a directory, is one line (it was a
      // filesystem exception's text and exit code 1).
      {"link loop", "", dir.path().string() + "/loop.json", "loop.json: a loop of symbolic links"},
      {"link loop in a directory", "", dir.path().string() + "/loops",
       ".json: a loop of symbolic links"},
      // One file named twice, however it is spelled, is refused the same way.
      {"same name twice", rank_trace(0), bad + " " + bad, "the same file as"},
      {"same file, two spellings", rank_trace(0),
       bad + " " + (dir.path() / "." / "bad.json").string(), "the same file as"},
      {"a file and its directory", rank_trace(0),
       dir.path().string() + "/traces " + (dir.path() / "traces" / "r.json").string(),
       "the same file as"},
  };
  fs::create_directories(dir.path() / "empty");
  fs::create_symlink("loop.json", dir.path() / "loop.json");
  fs::create_directories(dir.path() / "loops");
  fs::create_symlink("y.json", dir.path() / "loops" / "x.json");
  fs::create_symlink("x.json", dir.path() / "loops" / "y.json");
  fs::create_directories(dir.path() / "traces");
  std::ofstream(dir.path() / "traces" / "r.json") << rank_trace(0);
  for (const BadInput& c : cases) {
    if (!c.file_content.empty()) std::ofstream(bad) << c.file_content;
    const CliResult r = run_tandem("analyze " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.what << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.what << ": " << r.err;
  }
}

}  // namespace
}  // namespace tandem::testing
