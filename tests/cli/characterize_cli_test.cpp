// `tandem characterize` as a user meets it: results directory, sweep resume, bad input.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/cli_support.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

const std::string kTiny =
    "characterize --synthetic compute=4ms,comm=2ms,chunks=2 --ranks 1 --warmup 0 "
    "--iterations 2 --no-progress ";

TEST(CharacterizeCliTest, WritesSummaryIterationsAndTraces) {
  TempDir dir;
  const fs::path out = dir.path() / "r";
  const CliResult r = run_tandem(kTiny + "--out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("compute slowdown S (eq. 1)"), std::string::npos) << r.out;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  // Where the ranks ran: one header line, and the point's binding says the same.
  const std::string binding = summary["points"][0]["config"]["binding"].get<std::string>();
  EXPECT_NE(r.out.find("\n  CPUs: " + binding + "\n"), std::string::npos) << r.out;
  EXPECT_EQ(summary["schema"], 2);
  EXPECT_EQ(summary["tool"], "tandem");
  EXPECT_EQ(summary["command"], "characterize");
  EXPECT_EQ(summary["argv"].back(), out.string());
  EXPECT_TRUE(summary["machine"].is_object());
  ASSERT_EQ(summary["points"].size(), 1u);
  const auto& point = summary["points"][0];
  for (const char* s : {"compute-only", "comm-only", "sequential", "overlapped"}) {
    EXPECT_EQ(point["scenarios"][s]["steps"].size(), 2u) << s;
    EXPECT_TRUE(fs::exists(out / "points" / "default" / (std::string(s) + ".trace.json"))) << s;
  }
  EXPECT_EQ(point["scenarios"]["overlapped"]["power"], "unavailable");
  EXPECT_TRUE(point["metrics"].contains("compute_slowdown"));
  // Header + 4 scenarios x 2 iterations.
  EXPECT_EQ(count_lines(slurp(out / "iterations.csv")), 1 + 8);
  EXPECT_TRUE(nlohmann::json::parse(slurp(out / "trace.json")).contains("traceEvents"));
}

// Power per scenario over the measured iterations, and what overlap does to it: a RAPL
// fixture whose counter stands still reads 0 W, so the ratios are undefined (null).
TEST(CharacterizeCliTest, PowerIsTabledPerScenarioWithOverlapsExtraPeak) {
  TempDir dir;
  const fs::path out = dir.path() / "r";
  const CliResult r =
      run_tandem(kTiny + "--powercap-root " + still_rapl_fixture(dir.path()).string() + " --out " +
                 out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("power over the measured iterations"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rapl package-0 (intel-rapl:0): overlapped vs compute-only peak n/a"),
            std::string::npos)
      << r.out;
  const auto point = nlohmann::json::parse(slurp(out / "summary.json"))["points"][0];
  const auto& power = point["scenarios"]["overlapped"]["power"];
  ASSERT_EQ(power.size(), 1u) << power;
  EXPECT_EQ(power[0]["energy_per_iteration_joules"], 0.0);
  ASSERT_EQ(point["power_overlap"].size(), 1u);
  EXPECT_TRUE(point["power_overlap"][0]["extra_peak"].is_null());
}

TEST(CharacterizeCliTest, TrainWorkloadScenariosDoWhatTheySay) {
  TempDir dir;
  const fs::path out = dir.path() / "t";
  const CliResult r = run_tandem(
      "characterize --model mlp:3x32 --batch 4 --ranks 2 --strategy layerwise --warmup 0 "
      "--iterations 2 --no-progress --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto point = nlohmann::json::parse(slurp(out / "summary.json"))["points"][0];
  EXPECT_EQ(point["config"]["strategy"], "layerwise");
  for (const auto& step : point["scenarios"]["compute-only"]["steps"]) {
    EXPECT_GT(step["t_comp_ns"].get<double>(), 0);
    EXPECT_EQ(step["t_comm_ns"].get<double>(), 0);
  }
  for (const auto& step : point["scenarios"]["comm-only"]["steps"]) {
    EXPECT_EQ(step["t_comp_ns"].get<double>(), 0);
    EXPECT_GT(step["t_comm_ns"].get<double>(), 0);
  }
  for (const auto& step : point["scenarios"]["sequential"]["steps"]) {
    EXPECT_EQ(step["t_ovl_ns"].get<double>(), 0);  // nothing launched during backward
    EXPECT_GT(step["t_comm_ns"].get<double>(), 0);
  }
  // 3 layers: 3 all-reduces of every rank's gradient per step in every scenario with comm.
  const double gradient_bytes = 4.0 * (3 * 32 * 32 + 2 * 32 + 32 * 16 - 32 * 32 + 16);
  for (const char* s : {"comm-only", "sequential", "overlapped"}) {
    for (const auto& step : point["scenarios"][s]["steps"]) {
      EXPECT_EQ(step["bytes"].get<double>(), gradient_bytes) << s;
    }
  }
  // The story in words, on the terminal and in the point; the overlapped scenario's
  // waiting: 3 all-reduces per iteration matched across both ranks, and each rank's
  // blocked time split without remainder.
  EXPECT_NE(r.out.find("Overlap hid "), std::string::npos) << r.out;
  EXPECT_NE(point["story"].get<std::string>().find("Overlap hid "), std::string::npos);
  const auto& waiting = point["waiting"];
  EXPECT_EQ(waiting["collectives"], 3 * 2);
  ASSERT_EQ(waiting["ranks"].size(), 2u);
  for (const auto& rank : waiting["ranks"]) {
    EXPECT_NEAR(rank["skew_ms"].get<double>() + rank["transfer_ms"].get<double>() +
                    rank["other_ms"].get<double>(),
                rank["blocked_ms"].get<double>(), 1e-9);
  }
}

// A shrunk preset through characterize, a sweep over the shape flag included: each point
// trains the transformer (the spans of its sub-operations reach the point's trace) and
// the summary names the model as reshaped.
TEST(CharacterizeCliTest, TransformerPresetsShrinkAndSweep) {
  TempDir dir;
  const fs::path out = dir.path() / "llama";
  const CliResult r = run_tandem(
      "characterize --model llama2-13b:vocab=64 --layers 1 --dim 256 --seq 8 --ranks 2 --batch 2 "
      "--warmup 0 --iterations 2 --no-progress --sweep strategy=sequential,bucketed --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  ASSERT_EQ(summary["points"].size(), 2u);
  EXPECT_EQ(summary["points"][0]["config"]["model"], "llama2-13b:layers=1,dim=256,seq=8,vocab=64");
  const std::string trace = slurp(out / "points" / "strategy-bucketed" / "overlapped.trace.json");
  for (const char* name : {"\"embedding\"", "\"attention\"", "\"mlp\"", "\"head\"", "\"loss\""}) {
    EXPECT_NE(trace.find(name), std::string::npos) << name;
  }
}

// The techniques (docs/FINDINGS.md, "Overlap techniques") as sweep keys: each point runs
// the four scenarios with the technique, and its config says which.
TEST(CharacterizeCliTest, TechniquesSweep) {
  TempDir dir;
  const fs::path out = dir.path() / "techniques";
  const CliResult r = run_tandem(
      "characterize --model gpt:layers=2,dim=16,heads=2,seq=8,vocab=32 --ranks 2 --batch 2 "
      "--warmup 0 --iterations 2 --no-progress --sweep recompute=none,full,selective "
      "--sweep overlap-optimizer=no,yes --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  ASSERT_EQ(summary["points"].size(), 6u);
  std::vector<std::string> seen;
  for (const auto& point : summary["points"]) {
    EXPECT_TRUE(point["metrics"].contains("e2e_ovl_ns")) << point.dump();
    seen.push_back(point["config"]["recompute"].get<std::string>() +
                   (point["config"]["overlap_optimizer"].get<bool>() ? "+overlap" : ""));
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"none", "none+overlap", "full", "full+overlap",
                                            "selective", "selective+overlap"}));
  const fs::path point = out / "points" / "recompute-full.overlap-optimizer-yes";
  ASSERT_TRUE(fs::exists(point / "overlapped.trace.json")) << point;
  const std::string trace = slurp(point / "overlapped.trace.json");
  EXPECT_NE(trace.find("\"name\":\"recompute\""), std::string::npos);
  for (const char* bad : {"--sweep double-buffer=maybe", "--sweep recompute=most"}) {
    const CliResult refused =
        run_tandem(std::string("characterize --model gpt:layers=1,dim=16,heads=2,seq=8 ") + bad);
    EXPECT_EQ(refused.exit_code, 2) << bad;
    EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
  }
}

// Tensor parallelism's flags as sweep keys (docs/TENSOR.md): each point runs the four
// scenarios split, its config says how, and the overlapped point's collectives are ring
// sends and receives named tp.
TEST(CharacterizeCliTest, TensorParallelSweep) {
  TempDir dir;
  const fs::path out = dir.path() / "tensor";
  const CliResult r = run_tandem(
      "characterize --model gpt:layers=2,dim=16,heads=2,seq=8,vocab=32 --ranks 2 --batch 2 "
      "--tensor 2 --sequence-parallel --warmup 0 --iterations 2 --no-progress "
      "--sweep tp-overlap=off,on --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  ASSERT_EQ(summary["points"].size(), 2u);
  for (const auto& point : summary["points"]) {
    EXPECT_EQ(point["config"]["tensor"], 2) << point.dump();
    EXPECT_EQ(point["config"]["sequence_parallel"], true) << point.dump();
  }
  EXPECT_EQ(summary["points"][0]["config"]["tp_overlap"], false);
  EXPECT_EQ(summary["points"][1]["config"]["tp_overlap"], true);
  const std::string on = slurp(out / "points" / "tp-overlap-on" / "overlapped.trace.json");
  const std::string off = slurp(out / "points" / "tp-overlap-off" / "overlapped.trace.json");
  EXPECT_NE(on.find("\"cat\":\"send\""), std::string::npos);
  EXPECT_EQ(off.find("\"cat\":\"send\""), std::string::npos);
  EXPECT_NE(off.find("\"cat\":\"allgather\""), std::string::npos);
  const CliResult refused =
      run_tandem("characterize --model gpt:layers=1,dim=16,heads=2,seq=8 --sweep tp-overlap=maybe");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
}

// Gradient compression (docs/REDUCER.md): each point runs the four scenarios, and the
// compressed points move fewer bytes, with the casts or factors as compress spans.
TEST(CharacterizeCliTest, CompressSweep) {
  TempDir dir;
  const fs::path out = dir.path() / "compress";
  const CliResult r = run_tandem(
      "characterize --model gpt:layers=2,dim=16,heads=2,seq=8,vocab=32 --ranks 2 --batch 2 "
      "--warmup 0 --iterations 2 --no-progress --sweep compress=none,bf16,powersgd:1 --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  ASSERT_EQ(summary["points"].size(), 3u);
  std::vector<std::string> seen;
  std::vector<double> bytes;  // per point: the overlapped scenario's first step
  for (const auto& point : summary["points"]) {
    EXPECT_TRUE(point["metrics"].contains("e2e_ovl_ns")) << point.dump();
    seen.push_back(point["config"]["compress"].get<std::string>());
    bytes.push_back(point["scenarios"]["overlapped"]["steps"][0]["bytes"].get<double>());
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"none", "bf16", "powersgd:1"}));
  EXPECT_EQ(bytes[1], bytes[0] / 2);
  EXPECT_LT(bytes[2], bytes[0] / 2);
  for (const fs::path& point : fs::directory_iterator(out / "points")) {
    if (point.filename().string().find("none") != std::string::npos) continue;
    // Compute-only computes the compression too: its compute is the overlapped one's.
    for (const char* scenario : {"overlapped.trace.json", "compute-only.trace.json"}) {
      ASSERT_TRUE(fs::exists(point / scenario)) << point;
      EXPECT_NE(slurp(point / scenario).find("\"name\":\"compress\""), std::string::npos)
          << point / scenario;
    }
  }
  const CliResult refused =
      run_tandem("characterize --model gpt:layers=1,dim=16,heads=2,seq=8 --sweep compress=fp8");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
}

// Pipelines (docs/PIPELINE.md): one point per schedule, each run in all four scenarios.
TEST(CharacterizeCliTest, PipelineSchedulesSweep) {
  TempDir dir;
  const fs::path out = dir.path() / "pipe";
  const CliResult r = run_tandem(
      "characterize --model mlp:4x64 --ranks 2 --pipeline 2 --micro-batches 4 --batch 8 "
      "--warmup 0 --iterations 2 --no-progress --sweep schedule=gpipe,1f1b,interleaved:2 --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  ASSERT_EQ(summary["points"].size(), 3u);
  std::vector<std::string> schedules;
  for (const auto& point : summary["points"]) {
    EXPECT_EQ(point["config"]["pipeline_stages"], 2);
    EXPECT_EQ(point["config"]["micro_batches"], 4);
    schedules.push_back(point["config"]["schedule"].get<std::string>());
    EXPECT_TRUE(point["metrics"].contains("e2e_ovl_ns")) << point.dump();
  }
  EXPECT_EQ(schedules, (std::vector<std::string>{"gpipe", "1f1b", "interleaved:2"}));
  const CliResult bad = run_tandem(
      "characterize --model mlp:4x64 --ranks 2 --pipeline 2 "
      "--micro-batches 4 --sweep schedule=zigzag");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--sweep schedule"), std::string::npos) << bad.err;
}

TEST(CharacterizeCliTest, ResumeRunsExactlyTheConfigurationsNotDone) {
  TempDir dir;
  const fs::path out = dir.path() / "sweep";
  std::string base = kTiny;
  base.erase(base.find("--ranks 1 "), 10);  // swept below: the flag and the axis are refused
  const std::string sweep = base + "--sweep chunks=1,2,3 --sweep ranks=1,2 --out " + out.string();
  ASSERT_EQ(run_tandem(sweep).exit_code, 0);
  const fs::path points = out / "points";
  // An interrupted run: one point never started, one was cut before its result was
  // committed (traces written, result.json not).
  fs::remove_all(points / "chunks-2.ranks-1");
  fs::remove(points / "chunks-3.ranks-2" / "result.json");
  const std::string kept = slurp(points / "chunks-1.ranks-2" / "result.json");

  // Without --resume the directory is refused, and nothing is touched.
  const CliResult refused = run_tandem(sweep);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--resume"), std::string::npos) << refused.err;

  const CliResult resumed = run_tandem(sweep + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("4 of 6 configurations already done"), std::string::npos)
      << resumed.out;
  EXPECT_EQ(finished_lines(resumed.out),
            (std::vector<std::string>{"[3/6] chunks=2 ranks=1", "[6/6] chunks=3 ranks=2"}));
  EXPECT_EQ(slurp(points / "chunks-1.ranks-2" / "result.json"), kept);
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  ASSERT_EQ(summary["points"].size(), 6u);
  EXPECT_EQ(summary["points"][2]["id"], "chunks-2.ranks-1");  // grid order kept
  EXPECT_EQ(summary["argv"].back(), "--resume");              // the header names the last run
  EXPECT_EQ(count_lines(slurp(out / "iterations.csv")), 1 + 6 * 8);
}

// A first run cut off midway (killed: its DIR.partial holds the points it finished) is
// refused without --resume, continued with it, and then appears as DIR.
TEST(CharacterizeCliTest, ResumeContinuesAnInterruptedFirstRun) {
  TempDir dir;
  const fs::path out = dir.path() / "s";
  const fs::path partial = dir.path() / "s.partial";
  const std::string run = kTiny + "--sweep chunks=1,2 --out " + out.string();
  ASSERT_EQ(run_tandem(run).exit_code, 0);
  // What a kill after the first point leaves (no report, no summary of the second).
  fs::rename(out, partial);
  fs::remove_all(partial / "points" / "chunks-2");
  fs::remove(partial / "report.html");

  const CliResult refused = run_tandem(run);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("1 finished point(s); add --resume"), std::string::npos)
      << refused.err;

  const CliResult resumed = run_tandem(run + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(finished_lines(resumed.out), (std::vector<std::string>{"[2/2] chunks=2"}));
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_EQ(nlohmann::json::parse(slurp(out / "summary.json"))["points"].size(), 2u);
  EXPECT_TRUE(fs::exists(out / "report.html"));
}

// --resume reuses points only of the same run: another rank count or workload is refused,
// naming the setting, and leaves the directory as it was.
TEST(CharacterizeCliTest, ResumeRefusesOtherSettings) {
  TempDir dir;
  const fs::path out = dir.path() / "s";
  const std::string args = "--sweep chunks=1,2 --out " + out.string();
  ASSERT_EQ(run_tandem(kTiny + args).exit_code, 0);
  fs::remove(out / "points" / "chunks-2" / "result.json");  // cut off before the last point
  const std::string summary = slurp(out / "summary.json");

  std::string ranks2 = kTiny;
  ranks2.replace(ranks2.find("--ranks 1"), 9, "--ranks 2");
  CliResult r = run_tandem(ranks2 + args + " --resume");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--resume: --ranks was '1'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is '2' now"), std::string::npos) << r.err;

  std::string other = kTiny;
  other.replace(other.find("compute=4ms"), 11, "compute=5ms");
  r = run_tandem(other + args + " --resume");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--synthetic"), std::string::npos) << r.err;

  r = run_tandem(kTiny + "--threads 2 " + args + " --resume");  // a default, now given
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--threads was '1'"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(out / "summary.json"), summary);
  EXPECT_FALSE(fs::exists(out / "points" / "chunks-2" / "result.json"));

  // The same settings, however the terminal is set up, resume.
  r = run_tandem(kTiny + args + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 of 2 configurations already done"), std::string::npos) << r.out;
}

// Issue 16: a sweep killed (SIGKILL: no cleanup runs) after its first point keeps every
// point it finished. A resume with other settings is refused and changes nothing; one
// with the same settings runs exactly the points not done, and the sweep appears whole.
// The kill waits for the first point's progress line (an event, with a deadline); how
// many points finished before it landed does not matter to what is checked.
TEST(CharacterizeCliTest, AKilledSweepResumesExactlyThePointsItHadNotFinished) {
  TempDir dir;
  const fs::path out = dir.path() / "s";
  const fs::path log = dir.path() / "log";
  std::string run = kTiny + "--sweep chunks=1,2,4 --out " + out.string();
  run.replace(run.find("--iterations 2"), 14, "--iterations 40");
  const pid_t sweep = start_shell("exec " + std::string(TANDEM_BINARY) + " " + run + " >" +
                                  log.string() + " 2>&1 </dev/null");
  ASSERT_GT(sweep, 0);
  const std::string first = wait_for_text(log, "[1/3]", std::chrono::seconds(120));
  ::kill(sweep, SIGKILL);
  ASSERT_NE(wait_for_exit(sweep, std::chrono::seconds(60)), -1);
  ASSERT_NE(first.find("[1/3]"), std::string::npos) << first;

  // What the kill left: a first run's DIR.partial (or DIR, had it finished first).
  const fs::path left = fs::exists(dir.path() / "s.partial") ? dir.path() / "s.partial" : out;
  const std::vector<std::string> values{"1", "2", "4"};
  std::vector<std::string> not_done;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!fs::exists(left / "points" / ("chunks-" + values[i]) / "result.json")) {
      not_done.push_back("[" + std::to_string(i + 1) + "/3] chunks=" + values[i]);
    }
  }
  EXPECT_TRUE(fs::exists(left / "points" / "chunks-1" / "result.json"));

  std::string ranks2 = run;
  ranks2.replace(ranks2.find("--ranks 1"), 9, "--ranks 2");
  const CliResult refused = run_tandem(ranks2 + " --resume");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("--ranks was '1'"), std::string::npos) << refused.err;
  EXPECT_EQ(fs::exists(left / "points" / "chunks-4" / "result.json"),
            not_done.empty() || not_done.back() != "[3/3] chunks=4");

  const CliResult resumed = run_tandem(run + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(finished_lines(resumed.out), not_done) << resumed.out;
  EXPECT_FALSE(fs::exists(dir.path() / "s.partial"));
  EXPECT_EQ(nlohmann::json::parse(slurp(out / "summary.json"))["points"].size(), 3u);
  EXPECT_TRUE(fs::exists(out / "report.html"));
}

// A sweep written before the summary header (schema 1) is refused by the report, and the
// same command with --resume rewrites its summary without measuring anything again.
TEST(CharacterizeCliTest, ResumeUpgradesASchemaOneSummary) {
  TempDir dir;
  const fs::path out = dir.path() / "old";
  const std::string run = kTiny + "--sweep chunks=1,2 --out " + out.string();
  ASSERT_EQ(run_tandem(run).exit_code, 0);
  nlohmann::json summary = nlohmann::json::parse(slurp(out / "summary.json"));
  for (const char* key : {"schema", "tool", "version", "command", "argv"}) summary.erase(key);
  summary["version"] = 1;
  summary["tool"] = "tandem characterize";
  std::ofstream(out / "summary.json") << summary.dump();

  const CliResult refused = run_tandem("report " + out.string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("summary.json: schema 1"), std::string::npos) << refused.err;

  const CliResult resumed = run_tandem(run + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("2 of 2 configurations already done"), std::string::npos);
  EXPECT_TRUE(finished_lines(resumed.out).empty()) << resumed.out;
  summary = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(summary["schema"], 2);
  EXPECT_EQ(summary["points"].size(), 2u);
  EXPECT_EQ(run_tandem("report " + out.string()).exit_code, 0);
}

struct BadInput {
  const char* args;
  const char* names;
};

class CharacterizeBadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(CharacterizeBadInputTest, OneLineExitTwo) {
  TempDir dir;
  const CliResult r = run_tandem(std::string("characterize ") + GetParam().args + " --out " +
                                 (dir.path() / "o").string());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().names), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.path() / "o" / "summary.json"));
}

INSTANTIATE_TEST_SUITE_P(
    Flags, CharacterizeBadInputTest,
    ::testing::Values(
        BadInput{"--sweep colour=red,blue", "--sweep"}, BadInput{"--sweep strategy=", "--sweep"},
        BadInput{"--sweep batch=1,,2", "--sweep"},
        BadInput{"--sweep batch=1,2 --sweep batch=3", "--sweep"},
        BadInput{"--batch 8 --sweep batch=4,8", "--sweep batch: --batch is given too"},
        BadInput{"--sweep batch=1,2,1", "'1' given twice"},
        BadInput{"--sweep 'link=10GB/s,5us;10GB_s,5us'", "share the point id"},
        BadInput{"--sweep bucket-mb=1,1e13", "--sweep bucket-mb"},
        BadInput{"--sweep 'link=1GB/s,1us;0.5B/s,1us'", "--sweep link: bandwidth must be >= 1 B/s"},
        BadInput{"--sweep 'link=1GB/s,1us;1GB/s,1001s'", "--sweep link: latency must be <= 1000 s"},
        BadInput{"--sweep batch=1,010", "--sweep batch"},
        BadInput{"--sweep strategy=bucketed,ring", "--strategy"},
        BadInput{"--microbench gemm=0,allreduce=1MiB", "--microbench"},
        BadInput{"--microbench gemm=64,allreduce=1TiB", "--microbench"},
        BadInput{"--microbench gemm=64,allreduce=1MiB --sweep batch=1,2", "--sweep"},
        BadInput{"--synthetic compute=1ms", "--synthetic"},
        BadInput{"--iterations 0", "--iterations"},
        BadInput{"--synthetic compute=1ms,comm=1ms,chunks=1 --timeout 1e10", "--timeout"},
        BadInput{"--synthetic compute=1ms,comm=1ms,chunks=1 --timeout nan", "--timeout"},
        BadInput{"--device tpu --microbench gemm=64,allreduce=1MiB", "--device"},
        BadInput{"--device cuda --synthetic compute=1ms,comm=1ms,chunks=1", "--synthetic"},
        BadInput{"--device cuda --microbench gemm=64,allreduce=1MiB --link 1GB/s,1us", "--link"},
        BadInput{"--device cuda --microbench gemm=64,allreduce=1MiB --precision fp8",
                 "--precision"},
        // OpenBLAS has no bf16 GEMM on any CPU: refused, never run in fp32 instead.
        BadInput{"--microbench gemm=64,allreduce=1MiB --gemm openblas --precision bf16",
                 "--precision bf16: bf16 GEMMs on the CPU run on oneDNN"},
        BadInput{"--microbench gemm=64,allreduce=1MiB --precision tf32",
                 "--precision tf32: tf32 runs on GPUs only"},
        // Power caps: a GPU's, opt-in, refused before anything runs.
        BadInput{"--model mlp:2x16 --sweep power-cap=300W",
                 "--sweep power-cap: sets a GPU's power limit; it needs --device cuda"},
        BadInput{"--model mlp:2x16 --device cuda --sweep power-cap=loud,300W",
                 "--sweep power-cap: must be a power above 0 W"},
        BadInput{"--synthetic compute=1ms,comm=1ms,chunks=1 --sweep power-cap=0W",
                 "--sweep power-cap: must be a power"},
        // Span buffers sized by the iterations, 1.4 TiB of them: refused, never OOM-killed.
        BadInput{"--synthetic compute=1ms,comm=1ms,chunks=2 --ranks 1024 --iterations 1000000",
                 "the timeline of 1024 rank(s) needs"}));

// Without a GPU (or without CUDA in the build) --device cuda is one clear line; with one,
// the microbenchmark runs and says which all-reduce it used.
TEST(CharacterizeCliTest, GpuMicrobenchRunsOrSaysWhyNot) {
  TempDir dir;
  const CliResult r = run_tandem(
      "characterize --device cuda --microbench gemm=256,allreduce=4MiB --warmup 1 --iterations 2 "
      "--no-progress --out " +
      (dir.path() / "g").string());
  if (r.exit_code == 2) {
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto summary = nlohmann::json::parse(slurp(dir.path() / "g" / "summary.json"));
  const auto& config = summary["points"][0]["config"];
  EXPECT_EQ(config["device"], "cuda");
  EXPECT_TRUE(config["backend"] == "emulated" || config["backend"] == "nccl") << config;
  EXPECT_EQ(config["emulated"], config["backend"] == "emulated");
  EXPECT_FALSE(config["kernel_timing"].empty());
  EXPECT_NE(r.out.find("NVML"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tandem::testing
