// `tandem train` as a user meets it: help, outputs, and one clear line for bad input.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "cli/cli_support.h"
#include "core/files.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

TEST(TrainCliTest, HelpExplainsEveryFlag) {
  const CliResult r = run_tandem("train --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--ranks", "--model", "--batch", "--steps", "--lr", "--strategy", "--bucket-mb",
        "--accumulate", "--link", "--seed", "--threads", "--out", "--device", "--precision",
        "--device-comm", "--pipeline", "--schedule", "--micro-batches", "--split"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(TrainCliTest, WritesStepsTraceAndSummary) {
  TempDir dir;
  const fs::path out = dir.path() / "run";
  const CliResult r = run_tandem(
      "train --ranks 2 --model mlp:3x64 --batch 8 --steps 4 "
      "--strategy layerwise --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("step    4/4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hidden share of communication"), std::string::npos);

  const std::string csv = slurp(out / "steps.csv");
  EXPECT_EQ(count_lines(csv), 1 + 2 * 4);  // header + a row per rank per step

  const auto trace = nlohmann::json::parse(slurp(out / "trace.json"));
  std::set<int> pids;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") pids.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));

  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(summary["schema"], 2);
  EXPECT_EQ(summary["tool"], "tandem");
  EXPECT_EQ(summary["command"], "train");
  EXPECT_EQ(summary["argv"][1], "train");
  EXPECT_TRUE(summary["machine"].is_object());
  EXPECT_EQ(summary["config"]["ranks"], 2);
  EXPECT_EQ(summary["config"]["link_emulated"], false);
  // Waiting explained over the 2 measured steps: 3 layers' all-reduces each, matched
  // across the 2 ranks on one clock; per rank skew + transfer + other = blocked.
  const auto& waiting = summary["waiting"];
  EXPECT_EQ(waiting["blocked_on"], "wait spans");
  EXPECT_EQ(waiting["collectives"], 2 * 3);
  EXPECT_NE(waiting["clocks"].get<std::string>().find("one clock"), std::string::npos);
  ASSERT_EQ(waiting["ranks"].size(), 2u);
  for (const auto& rank : waiting["ranks"]) {
    EXPECT_EQ(rank["steps"], 2);
    EXPECT_NEAR(rank["skew_ms"].get<double>() + rank["transfer_ms"].get<double>() +
                    rank["other_ms"].get<double>(),
                rank["blocked_ms"].get<double>(), 1e-9);
  }
  EXPECT_EQ(waiting["kinds"][0]["kind"], "allreduce");
  EXPECT_NE(r.out.find(" = skew "), std::string::npos) << r.out;
  for (const auto& entry : fs::directory_iterator(out)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

// Power is sampled through the run and summarized over the measured steps, per source:
// here one RAPL zone of a fixture whose counter stands still (0 J), and none at all.
TEST(TrainCliTest, PowerIsSummarizedPerSourceOrSaidToBeUnavailable) {
  TempDir dir;
  const std::string run = "train --ranks 1 --model mlp:2x16 --batch 4 --steps 3 --quiet ";
  const CliResult r =
      run_tandem(run + "--powercap-root " + still_rapl_fixture(dir.path()).string() + " --out " +
                 (dir.path() / "a").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  power: 1 RAPL zone(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  power            rapl package-0 (intel-rapl:0): average 0.0 W"),
            std::string::npos)
      << r.out;
  const auto summary = nlohmann::json::parse(slurp(dir.path() / "a" / "summary.json"));
  ASSERT_EQ(summary["power"].size(), 1u) << summary["power"];
  EXPECT_EQ(summary["power"][0]["source"], "rapl package-0 (intel-rapl:0)");
  EXPECT_EQ(summary["power"][0]["energy_per_step_joules"], 0.0);
  EXPECT_NE(slurp(dir.path() / "a" / "report.html").find("energy per step, rapl package-0"),
            std::string::npos);

  const CliResult none = run_tandem(run + "--powercap-root " + (dir.path() / "none").string() +
                                    " --out " + (dir.path() / "b").string());
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.out.find("  power: RAPL unavailable (no readable zone)"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.path() / "b" / "summary.json"))["power"],
            "unavailable");
}

// SIGINT, SIGTERM and SIGHUP mid-run: one line, nothing of the run left behind (no
// DIR.partial, no lock), exit 128 + the signal. A long run, interrupted once it is
// training (its first step line is out).
TEST(TrainCliTest, ASignalEndsTheRunWithOneLineAndNothingLeftBehind) {
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    TempDir dir;
    const fs::path log = dir.path() / "log";
    const fs::path err = dir.path() / "err";
    const pid_t run = start_shell("exec " + std::string(TANDEM_BINARY) +
                                  " train --model mlp:2x64 --batch 8 --steps 10000000 "
                                  "--no-timeline --out " +
                                  (dir.path() / "run").string() + " >" + log.string() + " 2>" +
                                  err.string() + " </dev/null");
    ASSERT_GT(run, 0);
    const std::string started = wait_for_text(log, "step    1/", std::chrono::seconds(120));
    ASSERT_NE(started.find("step    1/"), std::string::npos) << started;
    ASSERT_TRUE(fs::exists(dir.path() / "run.partial"));
    ::kill(run, signal);
    const int status = wait_for_exit(run, std::chrono::seconds(60));
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 128 + signal);
    const std::string message = slurp(err);
    EXPECT_EQ(count_lines(message), 1) << message;
    EXPECT_EQ(message.rfind("tandem: interrupted by SIG", 0), 0u) << message;
    EXPECT_FALSE(fs::exists(dir.path() / "run.partial"));
    EXPECT_FALSE(fs::exists(dir.path() / ".run.lock"));
    EXPECT_FALSE(fs::exists(dir.path() / "run"));
  }
}

// A file whose size is not what it holds (sysfs says 4096 bytes, and holds a line): a
// short read is said as such, not as "read failed (Success)".
TEST(TrainCliTest, ADataFileThatCannotBeReadWholeSaysSo) {
  const std::string sysfs = "/sys/kernel/mm/transparent_hugepage/enabled";
  if (!fs::exists(sysfs) || fs::file_size(sysfs) < 4096) {
    GTEST_SKIP() << sysfs << " is missing or not sized as a page here";
  }
  const CliResult r = run_tandem(
      "train --model gpt:layers=1,dim=8,heads=2,seq=8 --ranks 1 "
      "--batch 2 --steps 1 --data " +
      sysfs);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--data " + sysfs + ": could not be read whole"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("Success"), std::string::npos) << r.err;
}

// --data is read a sequence at a time as batches draw them: a 64 GiB (sparse) file trains
// in the address space a small one needs (it was read into every rank whole: bad_alloc or
// the OOM killer).
TEST(TrainCliTest, AHugeDataFileTrainsInTheMemoryOfASmallOne) {
  TempDir dir;
  const fs::path big = dir.path() / "big.txt";
  std::ofstream(big) << "a file of zeros, but for this line\n";
  std::error_code ec;
  fs::resize_file(big, std::uintmax_t{64} << 30, ec);  // sparse: no disk
  if (ec) GTEST_SKIP() << "no sparse 64 GiB file here: " << ec.message();
  const CliResult r =
      run_tandem_in_address_space(std::uint64_t{2} << 30,
                                  "train --model gpt:layers=1,dim=8,heads=2,seq=8 --ranks 2 "
                                  "--batch 2 --steps 3 --eval-every 3 --quiet --data " +
                                      big.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("val"), std::string::npos) << r.out;
}

// --data is sharded per replica: a pipeline's four stages are one replica, which a
// 27-byte file feeds (18 bytes besides the held-out tail, a 9-byte window each); with
// four replicas it is too small.
TEST(TrainCliTest, APipelinesDataIsCountedPerReplicaNotPerRank) {
  TempDir dir;
  const fs::path data = dir.path() / "d.txt";
  std::ofstream(data) << "abcdefghijklmnopqrstuvwxyz\n";
  const std::string run =
      "train --model gpt:layers=4,dim=8,heads=2,seq=8 --batch 2 --steps 1 "
      "--quiet --data " +
      data.string();
  const CliResult one = run_tandem(run + " --ranks 4 --pipeline 4");
  EXPECT_EQ(one.exit_code, 0) << one.err;
  const CliResult four = run_tandem(run + " --ranks 4");
  EXPECT_EQ(four.exit_code, 2);
  EXPECT_NE(four.err.find("too small for 4 rank(s)"), std::string::npos) << four.err;
}

// An error that quotes a huge value (90 KB of --model) stays one readable line: its
// start names the flag, and it says how much it cut.
TEST(TrainCliTest, AHugeQuotedValueIsCutToAReadableLine) {
  const CliResult r = run_tandem("train --model gpt:layers=2,dim=" + std::string(90000, '9'));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1);
  EXPECT_LT(r.err.size(), 600u) << r.err.size();
  EXPECT_EQ(r.err.rfind("tandem: error: --model", 0), 0u) << r.err.substr(0, 200);
  EXPECT_NE(r.err.find(" characters cut) ... "), std::string::npos) << r.err;
}

TEST(TrainCliTest, LinkEmulationIsReportedAsEmulated) {
  const CliResult r = run_tandem(
      "train --ranks 2 --model mlp:2x32 --batch 4 --steps 2 "
      "--link 10GB/s,5us --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("emulated"), std::string::npos) << r.out;
}

// A pipeline run as a user meets it (docs/PIPELINE.md): the header names the stages, the
// summary the bubble per rank, summary.json the pipeline, steps.csv leaves a middle stage's
// loss empty, and the report labels micro-batches and has a section per stage.
TEST(TrainCliTest, APipelineRunReportsItsStagesBubbleAndMicroBatches) {
  TempDir dir;
  const fs::path out = dir.path() / "run";
  const CliResult r = run_tandem(
      "train --model mlp:6x512 --ranks 3 --pipeline 3 --schedule gpipe --micro-batches 4 "
      "--batch 64 --steps 4 --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pipeline 3 stages x 1 replica, gpipe, 4 micro-batches; units"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pipeline bubble"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("micro-batches in flight"), std::string::npos) << r.out;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  const auto& p = summary["pipeline"];
  EXPECT_EQ(p["stages"], 3);
  EXPECT_EQ(p["schedule"], "gpipe");
  ASSERT_EQ(p["bubble"].size(), 3u);
  for (const auto& b : p["bubble"]) {
    EXPECT_GE(b.get<double>(), 0.0);
    EXPECT_LT(b.get<double>(), 1.0);
  }
  EXPECT_EQ(p["micro_batches_in_flight"], nlohmann::json({4, 4, 4}));
  EXPECT_NEAR(p["textbook_bubble"].get<double>(), 2.0 / 6.0, 1e-12);
  std::istringstream csv(slurp(out / "steps.csv"));
  std::string line;
  std::getline(csv, line);
  int rows = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_GE(f.size(), 3u) << line;
    EXPECT_EQ(f[2].empty(), f[1] == "1") << "only rank 1, the middle stage, has no loss: " << line;
    ++rows;
  }
  EXPECT_EQ(rows, 3 * 4);
  EXPECT_NE(slurp(out / "report.html").find("Pipeline stages"), std::string::npos);
  // Every forward and backward span names its micro-batch (the report's F3/B3 labels).
  const auto trace = nlohmann::json::parse(slurp(out / "trace.json"));
  std::set<int> micros;
  int passes = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X" || !e.contains("args") || !e["args"].contains("layer")) continue;
    ++passes;
    ASSERT_TRUE(e["args"].contains("micro")) << e.dump();
    micros.insert(e["args"]["micro"].get<int>());
  }
  EXPECT_GT(passes, 0);
  EXPECT_EQ(micros, (std::set<int>{0, 1, 2, 3}));
}

struct BadInput {
  std::string args;
  std::string flag;
};

class TrainBadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(TrainBadInputTest, OneLineNamingTheFlagExitTwoNoFiles) {
  TempDir dir;
  const fs::path out = dir.path() / "run";
  const CliResult r = run_tandem(std::string("train --model mlp:2x16 --batch 4 --steps 2 ") +
                                 GetParam().args + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().flag), std::string::npos) << r.err;
  if (fs::exists(out)) {
    EXPECT_TRUE(fs::is_empty(out)) << "partial output left behind";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Flags, TrainBadInputTest,
    ::testing::Values(
        BadInput{"--ranks 0", "--ranks"}, BadInput{"--batch -1", "--batch"},
        BadInput{"--batch abc", "--batch"}, BadInput{"--model foo", "--model"},
        BadInput{"--model mlp:0x8", "--model"}, BadInput{"--strategy ring", "--strategy"},
        BadInput{"--strategy chunked:0", "--strategy"}, BadInput{"--bucket-mb 0", "--bucket-mb"},
        BadInput{"--link fast", "--link"}, BadInput{"--link 10GB/s,-5us", "--link"},
        BadInput{"--accumulate 0", "--accumulate"}, BadInput{"--threads 0", "--threads"},
        BadInput{"--lr -1", "--lr"}, BadInput{"--steps 0", "--steps"},
        BadInput{"--precision bf16 --gemm openblas", "--precision"},
        BadInput{"--gemm mkl", "--gemm"}, BadInput{"--precision tf32", "--precision"},
        BadInput{"--precision fp16 --device cpu", "--precision"},
        BadInput{"--precision fp64", "--precision"}, BadInput{"--device tpu", "--device"},
        BadInput{"--device-comm gloo", "--device-comm"},
        // Seconds become nanoseconds in an int64: 9.3e9 s would overflow it.
        BadInput{"--timeout 9.3e9", "--timeout"}, BadInput{"--timeout inf", "--timeout"},
        BadInput{"--timeout nan", "--timeout"}, BadInput{"--timeout 0", "--timeout"},
        // Every float flag refuses what is not a finite number.
        BadInput{"--momentum nan", "--momentum"}, BadInput{"--weight-decay nan", "--weight-decay"},
        BadInput{"--mpi-poll-us nan", "--mpi-poll-us"}, BadInput{"--lr inf", "--lr"},
        BadInput{"--bucket-mb 1e13", "--bucket-mb"}, BadInput{"--seed -1", "--seed"},
        BadInput{"--seed 99999999999999999999", "--seed"}, BadInput{"--steps 010", "--steps"},
        BadInput{"--steps 3 --steps 4", "--steps"}, BadInput{"--link ''", "--link"},
        // A link slower than 1 B/s made a wire time beyond int64: it ran with no delay.
        BadInput{"--link 0.000001B/s,0us", "--link"}, BadInput{"--link 1001TB/s,0us", "--link"},
        BadInput{"--link 1GB/s,1001s", "--link"},
        // Pipelines (docs/PIPELINE.md); mlp:2x16 has two units, --batch 4.
        BadInput{"--ranks 3 --pipeline 3", "--pipeline 3"}, BadInput{"--pipeline 0", "--pipeline"},
        BadInput{"--ranks 3 --pipeline 2", "--pipeline 2"},
        BadInput{"--ranks 2 --pipeline 2 --schedule zigzag", "--schedule"},
        BadInput{"--ranks 2 --pipeline 2 --schedule interleaved:2", "--schedule interleaved:2"},
        BadInput{"--micro-batches 3", "--micro-batches"},
        BadInput{"--micro-batches 2 --accumulate 2", "--micro-batches"},
        BadInput{"--micro-batches 0", "--micro-batches"},
        BadInput{"--ranks 2 --pipeline 2 --split 1,2", "--split"},
        BadInput{"--ranks 2 --pipeline 2 --split 1,x", "--split"},
        BadInput{"--ranks 2 --pipeline 2 --verify", "--verify"},
        BadInput{"--ranks 2 --pipeline 2 --strategy fsdp", "--strategy"},
        BadInput{"--ranks 2 --pipeline 2 --device cuda", "--device"},
        BadInput{"--schedule gpipe --micro-batches 2", "--schedule"}));

// Range errors state the bounds as people write them: no 309-digit DBL_MAX, no "too
// small" for a value that is too large.
// Transformer specs, shape flags and --data: refused before anything runs or prints.
class TrainTransformerBadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(TrainTransformerBadInputTest, OneLineNamingTheFlagBeforeAnythingRuns) {
  const CliResult r = run_tandem(std::string("train --steps 1 ") + GetParam().args);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().flag), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "nothing may run or print before the checks";
}

const std::string kReadme = TANDEM_SOURCE_DIR "/README.md";
const std::string kTinyGpt = "--model gpt:layers=1,dim=8,heads=2,seq=8 ";

INSTANTIATE_TEST_SUITE_P(
    Flags, TrainTransformerBadInputTest,
    ::testing::Values(
        BadInput{"--model gpt:layers=2,dim=30,heads=4,seq=8", "heads=4"},
        BadInput{"--model llama:layers=2,dim=12,heads=4,seq=8", "--model"},
        BadInput{"--model gpt3-13b", "--model"},        // 2^31 floats
        BadInput{"--model gpt3-xl", "needs at least"},  // memory, before allocating
        BadInput{"--model mlp:2x8 --layers 2", "--layers"},
        BadInput{"--model gpt3-xl --dim 100", "--dim 100"},
        BadInput{"--eval-every -1", "--eval-every"},
        // Every integer flag speaks alike: what it expects, and the value it got.
        BadInput{"--eval-every 1.5", "--eval-every: expected an integer 0..10000000, got '1.5'"},
        BadInput{"--layers ''", "--layers: expected an integer 1..1024, got ''"},
        BadInput{"--model mlp:2x8 --data README.md", "--data"},
        BadInput{kTinyGpt + "--data /nonexistent/file", "--data /nonexistent/file"},
        BadInput{kTinyGpt + "--data /tmp", "not a regular file"},
        BadInput{kTinyGpt + "--data " + kReadme + " --seq 100000", "--seq"},
        BadInput{"--model gpt:layers=1,dim=8,heads=2,seq=8,vocab=50 --data /etc/hostname",
                 "vocab=50"},
        BadInput{"--model gpt:layers=1,dim=8,heads=2,seq=4000 --data /etc/hostname", "too small"},
        // Flags that cannot apply to the run: refused naming both, never silently accepted.
        BadInput{kTinyGpt + "--prefetch 2", "--prefetch: applies to --strategy fsdp only"},
        BadInput{kTinyGpt + "--strategy zero2 --prefetch 2", "not to --strategy zero2"},
        BadInput{kTinyGpt + "--no-reshard-after-forward",
                 "--no-reshard-after-forward: applies to --strategy fsdp only"},
        BadInput{kTinyGpt + "--eval-every 5", "--eval-every: measures the held-out loss of --data"},
        BadInput{"--model mlp:2x8 --eval-every 5", "this run has no --data"},
        BadInput{kTinyGpt + "--data " + kReadme + " --eval-every 5 --pipeline 2 --ranks 2",
                 "--eval-every: not with --pipeline"},
        // The techniques (docs/FINDINGS.md): what they cannot apply to.
        BadInput{kTinyGpt + "--recompute some", "--recompute"},
        BadInput{"--model mlp:2x8 --recompute full", "--recompute: transformer models only"},
        BadInput{kTinyGpt + "--overlap-optimizer --pipeline 2 --ranks 2", "not a --pipeline run"},
        BadInput{kTinyGpt + "--double-buffer --strategy zero2", "--double-buffer"},
        BadInput{kTinyGpt + "--double-buffer --overlap-optimizer",
                 "--double-buffer: not with --overlap-optimizer"},
        BadInput{"--model mlp:2x8 --layer-drop 0.5", "--layer-drop: skips transformer blocks"},
        BadInput{kTinyGpt + "--layer-drop 1.5", "--layer-drop"},
        BadInput{kTinyGpt + "--find-unused --strategy fsdp", "--find-unused: DDP strategies only"},
        BadInput{kTinyGpt + "--compress fp8", "--compress: unknown compression 'fp8'"},
        BadInput{kTinyGpt + "--compress powersgd:0", "--compress"},
        BadInput{kTinyGpt + "--compress powersgd:2 --strategy zero2",
                 "--compress powersgd:2: needs DDP buckets of whole parameters"},
        BadInput{kTinyGpt + "--compress powersgd:2 --strategy chunked:4", "--strategy chunked:4"},
        BadInput{kTinyGpt + "--compress fp16 --pipeline 2 --ranks 2", "not a --pipeline run"},
        // Tensor parallelism (docs/TENSOR.md).
        BadInput{kTinyGpt + "--tensor 3 --ranks 3", "--tensor 3: gpt, 1 layers"},
        BadInput{kTinyGpt + "--tensor 2 --ranks 3", "--tensor 2 does not divide --ranks 3"},
        BadInput{kTinyGpt + "--tensor 0", "--tensor"},
        BadInput{"--model mlp:2x8 --tensor 2", "--tensor 2: splits transformer blocks"},
        BadInput{kTinyGpt + "--tensor 2 --device cuda", "--device"},
        BadInput{kTinyGpt + "--tensor 2 --pipeline 2 --ranks 4 --split auto",
                 "--split auto measures an unsplit model"},
        BadInput{kTinyGpt + "--sequence-parallel", "--sequence-parallel"},
        BadInput{kTinyGpt + "--tensor 2 --ranks 2 --tp-overlap", "needs --sequence-parallel"}));

// A small GPT on a text file: the loss falls from ln(256), and --eval-every prints the
// held-out loss on its steps, into the step lines, steps.csv and summary.json.
TEST(TrainCliTest, TrainsAGptOnTextWithAValidationLoss) {
  TempDir dir;
  const fs::path out = dir.path() / "run";
  const CliResult r = run_tandem(
      "train --ranks 2 --model gpt:layers=1,dim=32,heads=2,seq=32 "
      "--batch 4 --steps 60 --lr 0.1 --eval-every 30 --data " +
      kReadme + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("step   30/60  loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("validation loss"), std::string::npos) << r.out;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(summary["val_step"], 60);
  EXPECT_LT(summary["val_loss"].get<double>(), std::log(256.0));
  EXPECT_LT(summary["last_loss"].get<double>(), summary["first_loss"].get<double>() - 1.0);
  EXPECT_GT(summary["tokens_per_s"].get<double>(), 0.0);
  const std::string csv = slurp(out / "steps.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "step,rank,loss,start_ns,end_ns,step_ms,param_hash,val_loss");
  int with_val = 0;
  std::istringstream rows(csv);
  for (std::string row; std::getline(rows, row);)
    with_val += !row.ends_with(",") && row.starts_with("29,");
  EXPECT_EQ(with_val, 2) << "step 30 on both ranks:\n" << csv;
}

TEST(TrainCliTest, RangeErrorsAreShortAndSayWhichWay) {
  for (const char* args : {"--lr 0", "--bucket-mb 1e13", "--warmup -1", "--momentum 2"}) {
    const CliResult r = run_tandem(std::string("train ") + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_LT(r.err.size(), 100u) << r.err;
    EXPECT_EQ(r.err.find("too small"), std::string::npos) << r.err;
  }
  EXPECT_NE(run_tandem("train --lr 0").err.find("> 0"), std::string::npos);
  EXPECT_NE(run_tandem("train --bucket-mb 1e13").err.find("<= 1048576"), std::string::npos);
}

// The slowest link accepted: the first collective's wire time (hours) is cut short by
// --timeout, which names it; the run fails with one line and exit 1.
TEST(TrainCliTest, ASlowLinkIsEndedByTheTimeoutNamingTheCollective) {
  const CliResult r =
      run_tandem("train --model mlp:2x16 --batch 4 --steps 3 --link 1B/s,1us --timeout 0.2");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_TRUE(r.err.starts_with("tandem: failed: rank ")) << r.err;
  EXPECT_NE(r.err.find("broadcast"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not complete after"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("link 1.0 B/s, 1 us (emulated)"), std::string::npos) << r.out;
}

TEST(TrainCliTest, RepeatedAndEmptyValuesNameTheFlag) {
  CliResult r = run_tandem("train --steps 3 --steps 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "tandem: error: --steps: given 2 times ('3', '4'); give it once\n");
  r = run_tandem("train --model mlp:2x16 --batch 4 --steps 1 --out ''");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "tandem: error: --out: empty value\n");
  EXPECT_EQ(r.out, "");
}

// The memory check counts parameters, gradients, momentum, activations and data on every
// rank, and says how many bytes it would need: about 11 TiB here, refused before anything
// is allocated, whatever the machine.
TEST(TrainCliTest, TooLargeForMemoryIsRefusedWithTheBytesNeeded) {
  const CliResult r = run_tandem("train --ranks 1024 --model mlp:16x8192 --steps 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("needs at least"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" bytes"), std::string::npos) << r.err;
  // The parts add up to the total: 1024 x (state + activations) + the final parameters.
  EXPECT_NE(r.err.find("bytes: 1024 x ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" for the final parameters)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "nothing may run before the check";

  // The timeline's span buffers are sized by --steps before the first step: counted too
  // (64 ranks x 10^7 steps of a tiny model is terabytes of spans), and --no-timeline
  // leaves them out.
  const std::string tiny = "train --ranks 64 --model mlp:2x8 --batch 1 --steps 10000000";
  const CliResult spans = run_tandem(tiny);
  EXPECT_EQ(spans.exit_code, 2) << spans.err;
  EXPECT_EQ(count_lines(spans.err), 1) << spans.err;
  EXPECT_NE(spans.err.find("of timeline spans for 10000000 steps"), std::string::npos) << spans.err;
  EXPECT_EQ(spans.out, "");
}

// --device cuda where it cannot run (a build without CUDA, or no GPU: this machine's
// case in CI) is one line naming --device and exit 2; where a GPU is present it trains.
TEST(TrainCliTest, CudaDeviceWithoutAGpuIsOneLineAndExitTwo) {
  const CliResult r = run_tandem(
      "train --device cuda --ranks 1 --model mlp:2x16 --batch 4 "
      "--steps 1 --quiet");
  if (r.exit_code == 0) GTEST_SKIP() << "a CUDA device is present: the run trained";
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "") << "nothing may be printed before the error";
}

TEST(TrainCliTest, UnwritableOutIsOneLineAndExitTwo) {
  // A path under a regular file cannot be created, even by root.
  const CliResult r =
      run_tandem("train --model mlp:2x16 --batch 4 --steps 1 --out /etc/passwd/run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--out"), std::string::npos) << r.err;
}

// One output policy (report/results_dir.h): a directory holding results is refused unless
// --force, which replaces it whole; a directory another run holds is refused at once.
TEST(TrainCliTest, ResultsAreNotOverwrittenUnlessForced) {
  TempDir dir;
  const fs::path out = dir.path() / "run";
  const std::string run =
      "train --model mlp:2x16 --batch 4 --steps 2 --quiet --out " + out.string();
  ASSERT_EQ(run_tandem(run).exit_code, 0);
  const std::string summary = slurp(out / "summary.json");
  const CliResult refused = run_tandem(run);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("--out: '" + out.string() + "' already holds results; add --force"),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.out, "") << "nothing may run";
  EXPECT_EQ(slurp(out / "summary.json"), summary);

  const CliResult forced = run_tandem(run + " --force");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_NE(slurp(out / "summary.json"), summary);  // a new run: another "created"
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1)
      << "no .partial, .lock or old results left beside it";
}

TEST(TrainCliTest, ASecondRunIntoTheSameDirectoryIsRefused) {
  TempDir dir;
  const fs::path out = dir.path() / "run";
  // What a first run holds while it trains: the lock beside DIR (report/results_dir.h).
  const FileLock first(dir.path() / ".run.lock", "first");
  const CliResult r =
      run_tandem("train --model mlp:2x16 --batch 4 --steps 2 --quiet --out " + out.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("'" + out.string() + "' is in use by another tandem run (pid "),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(dir.path() / "run.partial"));
}

TEST(TrainCliTest, UnknownFlagAndMissingSubcommandAreUsageErrors) {
  EXPECT_EQ(run_tandem("train --rank 2").exit_code, 2);
  EXPECT_EQ(run_tandem("").exit_code, 2);
  const CliResult fly = run_tandem("fly");
  EXPECT_EQ(fly.exit_code, 2);
  EXPECT_NE(fly.err.find("unknown subcommand 'fly'"), std::string::npos) << fly.err;
  const CliResult typo = run_tandem("trian --steps 1");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_EQ(typo.err, "tandem: error: unknown subcommand 'trian' (did you mean 'train'?)\n");
}

// The header's GEMM line names what the library really runs. In bf16, oneDNN's own log
// of every product it executes (ONEDNN_VERBOSE) names the kernel the header names; in
// fp32, with oneDNN held below the CPU's ISA, the header follows and warns in one line.
TEST(TrainCliTest, TheGemmKernelReportIsWhatRuns) {
  const std::string run = std::string(TANDEM_BINARY) +
                          " train --model gpt:layers=1,dim=32,heads=2,seq=8,vocab=32 --ranks 1 "
                          "--batch 2 --steps 1 --quiet --gemm onednn";
  // "kernel NAME;" of the header's GEMM line.
  auto header_kernel = [](const std::string& out) {
    const auto line = out.find("  GEMM: ");
    const auto at = out.find("kernel ", line);
    if (line == std::string::npos || at == std::string::npos) return std::string();
    return out.substr(at + 7, out.find(';', at) - at - 7);
  };
  auto warnings = [](const std::string& out) {
    int n = 0;
    for (auto at = out.find("warning: "); at != std::string::npos;
         at = out.find("warning: ", at + 1)) {
      ++n;
    }
    return n;
  };
  TempDir dir;
  const CliResult bf16 = run_shell("ONEDNN_VERBOSE=1 " + run + " --precision bf16 --out " +
                                   (dir.path() / "bf16").string());
  if (bf16.exit_code == 0) {
    // After the run, summary.json lists the kernels of the products that ran.
    const auto summary = nlohmann::json::parse(slurp(dir.path() / "bf16" / "summary.json"));
    const std::string blas = summary["config"]["blas"].get<std::string>();
    const auto at = blas.find("kernel ");
    ASSERT_NE(at, std::string::npos) << blas;
    std::set<std::string> reported;
    std::istringstream names(blas.substr(at + 7, blas.find(';', at) - at - 7));
    for (std::string name; std::getline(names, name, ',');) {
      reported.insert(name.substr(name.find_first_not_of(' ')));
    }
    std::set<std::string> executed;
    std::istringstream lines(bf16.out);
    for (std::string line; std::getline(lines, line);) {
      const std::string prefix = "onednn_verbose,exec,cpu,matmul,";
      if (line.starts_with(prefix)) {
        executed.insert(line.substr(prefix.size(), line.find(',', prefix.size()) - prefix.size()));
      }
    }
    EXPECT_FALSE(executed.empty()) << "oneDNN logged the products it ran";
    EXPECT_EQ(reported, executed) << blas;
  } else {
    EXPECT_EQ(bf16.exit_code, 2);
    EXPECT_NE(bf16.err.find("--precision bf16"), std::string::npos) << bf16.err;
  }

  const CliResult fp32 = run_shell(run);
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512) {
    EXPECT_EQ(header_kernel(fp32.out), "jit sgemm avx512_core") << fp32.out;
    EXPECT_EQ(warnings(fp32.out), 0) << fp32.out;
  }
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2: nothing to hold back";
  if (!avx512) {
    // oneDNN's AVX2 kernels, and OpenBLAS's for the shapes routed there where it knows
    // the CPU (BlasTest.ShapesRoutedToOpenBlasAreOpenBlasProductsAndReported).
    EXPECT_TRUE(header_kernel(fp32.out).starts_with("jit sgemm avx2")) << fp32.out;
    EXPECT_EQ(warnings(fp32.out), 0) << fp32.out;
  }
  // Held back to SSE4.1, oneDNN runs below the CPU, and nothing goes to OpenBLAS (the
  // routing was measured against oneDNN's AVX2 kernels).
  const CliResult held = run_shell("ONEDNN_MAX_CPU_ISA=SSE41 " + run);
  ASSERT_EQ(held.exit_code, 0) << held.err;
  EXPECT_EQ(header_kernel(held.out), "jit sgemm sse41") << held.out;
  EXPECT_EQ(warnings(held.out), 1) << held.out;
}

}  // namespace
}  // namespace tandem::testing
