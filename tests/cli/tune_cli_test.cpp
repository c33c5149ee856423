// `tandem tune` as a user runs it: an answer whose command line runs, never slower than
// the default, a directory a cut-off search resumes from, the simulator alone on a
// cluster, and one line with exit code 2 for bad input.
#include <gtest/gtest.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "cli/cli_support.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

// A small space, so that the test measures a handful of configurations.
const std::string kSmallSettings =
    "tune --model mlp:2x64 --ranks 2 --batch 8 --steps 4 --warmup 1 --baseline-iterations 3 "
    "--budget 2m --space bucket-mb=1,25 --space micro-batches=1,2 --space schedule=1f1b ";
const std::string kSmall = kSmallSettings + "--space strategy=bucketed,layerwise,zero2 ";
// The same with the default's strategy alone.
const std::string kSmallBucketed = kSmallSettings + "--space strategy=bucketed ";

int count_measurements(const std::string& out) {
  const std::regex line(R"(\n  \[\d+/\d+\] round )");
  return static_cast<int>(
      std::distance(std::sregex_iterator(out.begin(), out.end(), line), std::sregex_iterator()));
}

TEST(TuneCliTest, AnswersWithACommandThatRunsAndIsNeverSlowerThanTheDefault) {
  TempDir dir;
  const fs::path out = dir.path() / "tune";
  const CliResult r = run_tandem(kSmall + "--out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("characterizing the default"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nbest: "), std::string::npos) << r.out;
  for (const char* file : {"summary.json", "candidates.csv", "report.html", "settings.json"}) {
    EXPECT_TRUE(fs::exists(out / file)) << file;
  }
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(summary["command"], "tune");
  const auto& t = summary["tune"];
  EXPECT_EQ(t["mode"], "measured");
  const auto& a = t["answer"];
  ASSERT_TRUE(a["best"].is_string()) << a;
  EXPECT_LE(a["best_ms"].get<double>(), a["default_ms"].get<double>()) << a;
  EXPECT_GT(a["sequential_ms"].get<double>(), 0) << a;
  // Every measured configuration keeps its prediction beside what it measured; the
  // default was measured in every round, so as often as the most measured.
  int most = 0, default_rounds = -1, measurements = 0;
  for (const auto& c : t["candidates"]) {
    most = std::max(most, c["rounds"].get<int>());
    measurements += c["measurements"].get<int>();
    if (c["default"].get<bool>()) default_rounds = c["rounds"].get<int>();
    if (c["rounds"].get<int>() > 0) {
      EXPECT_GT(c["predicted_ms"].get<double>(), 0) << c;
      EXPECT_GT(c["measured_ms"]["median"].get<double>(), 0) << c;
      EXPECT_FALSE(c["samples_ms"].empty()) << c;
    }
  }
  EXPECT_EQ(default_rounds, most);
  EXPECT_EQ(most, static_cast<int>(t["plan"]["steps"].size()));
  EXPECT_EQ(measurements, t["measurements"].get<int>());
  EXPECT_EQ(measurements, count_measurements(r.out));
  // The grid's predicted cost is kept beside the plan's (Note [a quarter of the grid]).
  EXPECT_GT(t["plan"]["predicted_grid_cost_s"].get<double>(), 0) << t["plan"];
  EXPECT_NE(slurp(out / "report.html").find("tandem tune report"), std::string::npos);
  EXPECT_EQ(slurp(out / "candidates.csv").rfind("id,configuration,default,refused,", 0), 0u);

  // The recommended command line trains as it is.
  std::string command = a["command"].get<std::string>();
  ASSERT_EQ(command.rfind("tandem train ", 0), 0u) << command;
  EXPECT_NE(command.find("--model mlp:2x64"), std::string::npos) << command;
  command.replace(0, std::string("tandem").size(), TANDEM_BINARY);
  const CliResult train = run_shell(command + " --steps 2 --quiet");
  EXPECT_EQ(train.exit_code, 0) << command << "\n" << train.err;
}

// --exhaustive: every configuration that can run, measured once for --steps steps (the
// grid tune's pick is judged against); what it costs is the grid's cost.
TEST(TuneCliTest, ExhaustiveMeasuresEveryConfigurationOnce) {
  TempDir dir;
  const fs::path out = dir.path() / "grid";
  const CliResult r = run_tandem(kSmallBucketed + "--exhaustive --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto t = nlohmann::json::parse(slurp(out / "summary.json"))["tune"];
  EXPECT_EQ(t["mode"], "exhaustive");
  int runnable = 0;
  for (const auto& c : t["candidates"]) {
    if (!c["refused"].is_null()) {
      EXPECT_EQ(c["measurements"].get<int>(), 0) << c;
      continue;
    }
    ++runnable;
    EXPECT_EQ(c["measurements"].get<int>(), 1) << c;
    EXPECT_EQ(c["samples_ms"].size(), 4u) << c;  // --steps 4
  }
  EXPECT_GT(runnable, 2);
  EXPECT_EQ(t["measurements"].get<int>(), runnable);
  EXPECT_EQ(count_measurements(r.out), runnable);
  EXPECT_EQ(t["plan"]["candidates"], nlohmann::json::array({runnable}));
  EXPECT_EQ(t["plan"]["predicted_grid_cost_s"], t["plan"]["predicted_cost_s"]);
}

TEST(TuneCliTest, ResumeMeasuresOnlyWhatACutOffSearchLeft) {
  TempDir dir;
  const fs::path out = dir.path() / "tune";
  const CliResult first = run_tandem(kSmall + "--out " + out.string());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const int all = count_measurements(first.out);
  ASSERT_GT(all, 3) << first.out;
  const auto before = nlohmann::json::parse(slurp(out / "summary.json"));
  // Cut off: the last round's measurements and the summary never written, as a search
  // killed before them leaves the directory.
  int removed = 0;
  for (const auto& e : fs::directory_iterator(out / "points")) {
    const std::string name = e.path().filename().string();
    const int round = name[0] == 'r' ? std::stoi(name.substr(1)) : -1;
    if (round == static_cast<int>(before["tune"]["plan"]["steps"].size()) - 1) {
      fs::remove_all(e.path());
      ++removed;
    }
  }
  ASSERT_GT(removed, 0);
  fs::remove(out / "summary.json");
  const CliResult resumed = run_tandem(kSmall + "--out " + out.string() + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resuming"), std::string::npos) << resumed.out;
  EXPECT_EQ(resumed.out.find("characterizing the default ("), std::string::npos) << resumed.out;
  EXPECT_EQ(count_measurements(resumed.out), removed) << resumed.out;
  const auto after = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(after["tune"]["measurements"], before["tune"]["measurements"]);
  // The rounds before the cut were read back as they were measured.
  EXPECT_EQ(after["tune"]["plan"], before["tune"]["plan"]);

  // A resume with other settings would mix two searches: refused, naming the setting.
  const CliResult other =
      run_tandem(kSmall + "--out " + out.string() + " --resume --model mlp:2x32");
  EXPECT_EQ(other.exit_code, 2) << other.out;
  EXPECT_NE(other.err.find("--model"), std::string::npos) << other.err;
}

// --objective energy samples power through every measurement, as train does; a RAPL zone
// that never advances makes every step cost 0 J, which the answer says as measured.
TEST(TuneCliTest, EnergyObjectiveMeasuresEveryMeasurementsPower) {
  TempDir dir;
  const fs::path out = dir.path() / "tune";
  const CliResult r =
      run_tandem(kSmallBucketed + "--space pipeline=1 " + "--objective energy --powercap-root " +
                 still_rapl_fixture(dir.path()).string() + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("J per step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best for energy: "), std::string::npos) << r.out;
  // 0 J everywhere: said once, and no ratio of zeros (NaN) printed.
  EXPECT_NE(r.out.find("did not advance"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
  const auto t = nlohmann::json::parse(slurp(out / "summary.json"))["tune"];
  EXPECT_EQ(t["answer"]["objective"], "energy");
  EXPECT_EQ(t["answer"]["best_j_per_step"], 0.0) << t["answer"];
  EXPECT_EQ(t["baseline"]["sequential_j_per_step"], 0.0) << t["baseline"];
  for (const auto& c : t["candidates"]) {
    if (c["rounds"].get<int>() == 0) continue;
    ASSERT_TRUE(c["energy_j_per_step"].is_object()) << c;
    EXPECT_EQ(c["energy_j_per_step"]["samples"].size(), c["measurements"].get<std::size_t>()) << c;
  }
  // No power source here: one line naming the flag, nothing measured or written.
  const CliResult none =
      run_tandem(kSmall + "--objective energy --powercap-root " + (dir.path() / "none").string() +
                 " --out " + (dir.path() / "never").string());
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_NE(none.err.find("--objective energy"), std::string::npos) << none.err;
  EXPECT_FALSE(fs::exists(dir.path() / "never"));
}

// SIGTERM mid-search: one line, the measurements made kept for --resume (the rest of
// the partial directory and the lock gone), and the resumed search measures only the rest.
TEST(TuneCliTest, ATerminatedSearchResumesWithTheMeasurementsItMade) {
  TempDir dir;
  const fs::path out = dir.path() / "t";
  const fs::path log = dir.path() / "log";
  std::string run = kSmall + "--out " + out.string();
  run.replace(run.find("--steps 4"), 9, "--steps 400");
  const pid_t tune = start_shell("exec " + std::string(TANDEM_BINARY) + " " + run + " >" +
                                 log.string() + " 2>&1 </dev/null");
  ASSERT_GT(tune, 0);
  const std::string seen = wait_for_text(log, "[2/", std::chrono::seconds(120));
  ::kill(tune, SIGTERM);
  const int status = wait_for_exit(tune, std::chrono::seconds(60));
  ASSERT_NE(seen.find("[2/"), std::string::npos) << seen;
  const std::string said = slurp(log);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  if (WEXITSTATUS(status) == 0) GTEST_SKIP() << "the search ended before the signal";
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << said;
  EXPECT_NE(said.find("tandem: interrupted by SIGTERM"), std::string::npos) << said;
  const fs::path left = dir.path() / "t.partial";
  ASSERT_TRUE(fs::exists(left / "points" / "baseline" / "result.json")) << said;
  EXPECT_FALSE(fs::exists(dir.path() / ".t.lock"));
  int made = 0;
  for (const auto& e : fs::directory_iterator(left / "points")) {
    made += e.path().filename().string()[0] == 'r' && fs::exists(e.path() / "result.json");
  }
  EXPECT_GE(made, 1);

  const CliResult resumed = run_tandem(run + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  // The measurements made; the default's characterization said apart.
  EXPECT_NE(resumed.out.find("resuming " + out.string() + ": " + std::to_string(made) +
                             " measurements done, the default characterized"),
            std::string::npos)
      << resumed.out;
  const auto t = nlohmann::json::parse(slurp(out / "summary.json"))["tune"];
  EXPECT_EQ(count_measurements(resumed.out), t["measurements"].get<int>() - made);
  EXPECT_FALSE(fs::exists(left));
}

// A bf16 run calibrates from its own passes and an fp32 compute-only run besides (the fit
// needs fp32 passes), where this CPU runs bf16 at all.
TEST(TuneCliTest, ABf16RunIsCalibratedAndTuned) {
  if (run_tandem("train --model mlp:2x64 --ranks 1 --batch 8 --steps 1 --quiet --precision bf16")
          .exit_code != 0) {
    GTEST_SKIP() << "this CPU runs no bf16 GEMM";
  }
  const CliResult r = run_tandem(kSmallBucketed + "--precision bf16");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("--precision bf16"), std::string::npos) << r.out;
}

TEST(TuneCliTest, SimulateRanksAClustersSpaceAndRefusesWhatDoesNotFit) {
  TempDir dir;
  const fs::path out = dir.path() / "sim";
  const CliResult r = run_tandem(
      "tune --simulate --cluster 1x8xh100 --model gpt:layers=4,dim=256,heads=4,seq=64 --batch 8 "
      "--out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("8 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted best: "), std::string::npos) << r.out;
  EXPECT_EQ(count_measurements(r.out), 0);
  const auto t = nlohmann::json::parse(slurp(out / "summary.json"))["tune"];
  EXPECT_EQ(t["mode"], "simulated");
  // The answer is the fastest predicted of the configurations not refused.
  double fastest = 1e300;
  for (const auto& c : t["candidates"]) {
    if (c["refused"].is_null()) fastest = std::min(fastest, c["predicted_ms"].get<double>());
    EXPECT_EQ(c["rounds"], 0) << c;
  }
  EXPECT_DOUBLE_EQ(t["answer"]["best_predicted_ms"].get<double>(), fastest);

  // A model too large for the device: every configuration refused, said so.
  const CliResult big = run_tandem("tune --simulate --cluster 1x2xh100 --model gpt3-13b --batch 8");
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_NE(big.out.find("no configuration fits"), std::string::npos) << big.out;
}

// The answer is a command line train takes as it is: the run's switches by their names
// alone (CLI11 reads a switch's value as "true", which train would refuse as an argument).
TEST(TuneCliTest, TheAnswersCommandRunsWithTheRunsSwitches) {
  TempDir dir;
  const CliResult r = run_tandem(
      "tune --model mlp:2x64 --ranks 2 --batch 8 --steps 4 --warmup 1 --baseline-iterations 3 "
      "--budget 2m --space strategy=bucketed --space pipeline=1 --space micro-batches=1 "
      "--space bucket-mb=25 --double-buffer --verify --out " +
      (dir.path() / "tune").string());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto summary = nlohmann::json::parse(slurp(dir.path() / "tune" / "summary.json"));
  std::string command = summary["tune"]["answer"]["command"].get<std::string>();
  EXPECT_NE(command.find("--double-buffer --verify"), std::string::npos) << command;
  EXPECT_EQ(command.find("true"), std::string::npos) << command;
  ASSERT_EQ(command.rfind("tandem ", 0), 0U) << command;
  const CliResult train = run_tandem(command.substr(7) + " --steps 2 --quiet");
  EXPECT_EQ(train.exit_code, 0) << command << "\n" << train.out << train.err;
}

// --resume continues what --out holds: without --out there is nothing to continue.
TEST(TuneCliTest, ResumeWithoutOutIsRefused) {
  const CliResult r = run_tandem("tune --model mlp:2x64 --ranks 2 --batch 8 --resume");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;
}

TEST(TuneCliTest, BadInputIsOneLineAndExitCode2) {
  TempDir dir;
  const struct {
    std::string args;
    std::string names;
  } cases[] = {
      {"--space colour=red", "--space"},
      {"--space strategy=zero9", "--space"},
      {"--strategy zero2", "--space strategy"},
      {"--bucket-mb 5", "--space bucket-mb"},
      {"--ranks 1", "--ranks"},
      {"--budget 0s", "--budget"},
      {"--budget 200ns", "--budget"},
      {"--budget soon", "--budget"},
      {"--cluster 1x8xh100", "--simulate"},
      {"--simulate", "--cluster"},
      {"--simulate --cluster 1x8xh100 --resume", "--resume"},
      {"--no-timeline", "--no-timeline"},
      {"--objective speed", "--objective"},
      {"--simulate --cluster 1x8xh100 --objective energy", "--objective"},
      {"--tensor 2", "--space tensor"},
      {"--space tp-overlap=maybe", "--space"},
      // One --space per axis, each value once: a repeat would be overridden in silence,
      // or measured twice.
      {"--space strategy=zero1 --space strategy=zero2", "--space strategy"},
      {"--space strategy=zero1,zero1", "'zero1' given twice"},
      // The flags tune chooses point at the axis that holds them.
      {"--no-reshard-after-forward", "--space reshard"},
      {"--accumulate 2", "--space micro-batches"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_tandem("tune --model mlp:2x64 --ranks 2 --batch 8 " + c.args +
                                   " --out " + (dir.path() / "never").string());
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir.path() / "never")) << c.args;
    EXPECT_FALSE(fs::exists(dir.path() / "never.partial")) << c.args;
  }
}

}  // namespace
}  // namespace tandem::testing
