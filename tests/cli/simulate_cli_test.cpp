// `tandem simulate` as a user runs it: the same files as train, marked simulated, and one
// line with exit code 2 for what it cannot do.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_support.h"
#include "import/kineto_builder.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

TEST(SimulateCliTest, WritesWhatTrainWritesMarkedSimulated) {
  TempDir dir;
  const fs::path out = dir.path() / "sim";
  const CliResult r = run_tandem(
      "simulate --cluster 2x4xh100 --model mlp:4x1024 --batch 16 "
      "--straggler rank=5,compute=1.5x --degraded-link node=1,network=0.5x --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tandem simulate: 8 ranks on 2 x 4 h100-80gb"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("  loss "), std::string::npos) << r.out;  // nothing was learned
  for (const char* file : {"summary.json", "trace.json", "report.html", "steps.csv"}) {
    EXPECT_TRUE(fs::exists(out / file)) << file;
  }
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(summary["command"], "train");
  EXPECT_EQ(summary["simulated"]["device"], "h100-80gb");
  EXPECT_EQ(summary["simulated"]["nodes"], 2);
  EXPECT_EQ(summary["simulated"]["stragglers"][0]["rank"], 5);
  EXPECT_EQ(summary["simulated"]["degraded_links"][0]["network"], 0.5);
  // The straggler makes every rank wait: the others' blocked time is not zero.
  const auto trace = nlohmann::json::parse(slurp(out / "trace.json"));
  EXPECT_FALSE(trace["traceEvents"].empty());
}

// Sharded strategies take train's flags; the summary names the strategy as it ran and the
// memory is the shards'.
TEST(SimulateCliTest, FsdpWithPrefetchShardsTheStateAcrossTheCluster) {
  TempDir dir;
  const fs::path out = dir.path() / "fsdp";
  const CliResult r = run_tandem(
      "simulate --cluster 2x4xh100 --model gpt:layers=4,dim=512,heads=8,seq=128 --batch 4 "
      "--strategy fsdp --prefetch 2 --precision bf16 --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("strategy fsdp, prefetch 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("units sharded over 8 ranks, prefetch 2"), std::string::npos) << r.out;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  const auto& rank0 = summary["memory"][0];
  EXPECT_GT(rank0["gathered_peak_bytes"].get<double>(), 0) << rank0;
  // Every unit padded to a multiple of 8 ranks: the shard is an eighth of a padded replica.
  EXPECT_LT(rank0["params_bytes"].get<double>() * 8,
            1.01 * 4 * summary["config"]["parameters"].get<double>())
      << rank0;
  EXPECT_EQ(summary["config"]["device"], "simulated");
}

TEST(SimulateCliTest, BadInputIsOneLineAndExitCodeTwo) {
  for (const std::string args :
       {"simulate --cluster 8xh900", "simulate --cluster 2xh100 --pipeline 3",
        "simulate --cluster 2xh100 --ranks 4", "simulate --cluster 2xmi250 --precision tf32",
        "simulate --cluster 1xa100 --model gpt3-13b",
        "simulate --cluster 2xh100 --straggler rank=9,compute=2x",
        "simulate --cluster 2xh100 --model gpt:nope", "simulate --cluster /no/such.json",
        "simulate --cluster 2xh100 --bucket-mb nan", "simulate --cluster 2xh100 --bucket-mb 1e300",
        "simulate --cluster 2xh100 --prefetch 2",          // bucketed has nothing to prefetch
        "simulate --cluster 2xh100 --data /etc/hostname",  // a run here's flag
        "simulate --cluster 2xh100 --pipeline 2 --strategy fsdp",
        "simulate --cluster 2x2xh100 --degraded-link node=2,network=0.5x",
        "simulate --cluster 2x2xh100 --degraded-link node=1,network=3x",
        "simulate --cluster 2xh100 --model mlp:2x64 --tensor 2",  // the engine's rule
        "simulate --cluster 2xh100 --model gpt:layers=2,dim=64,heads=4,seq=16 --tensor 4"}) {
    const CliResult r = run_tandem(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find("--"), std::string::npos) << args << ": " << r.err;
  }
}

// The calibration round trip a user runs: measure here, fit, simulate `here`, check the
// fit against a run it did not see.
TEST(SimulateCliTest, CalibratesFromMeasuredRunsAndPredictsHere) {
  TempDir dir;
  const auto path = [&](const char* name) { return (dir.path() / name).string(); };
  for (const std::string& args :
       {"train --ranks 2 --model mlp:3x256 --batch 64 --steps 6 --out " + path("train"),
        "characterize --ranks 2 --model mlp:3x256 --batch 64 --strategy layerwise "
        "--iterations 3 --warmup 1 --no-progress --out " +
            path("chr"),
        "train --ranks 2 --model mlp:2x384 --batch 32 --steps 6 --out " + path("other"),
        "characterize --microbench gemm=128,allreduce=1MiB --ranks 2 --iterations 3 --warmup 1 "
        "--no-progress --out " +
            path("micro")}) {
    const CliResult measured = run_tandem(args);
    ASSERT_EQ(measured.exit_code, 0) << args << ": " << measured.err;
  }
  CliResult r = run_tandem("simulate --calibrate " + path("train") + " " + path("chr") + " " +
                           path("micro") + " --out " + path("cal"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GFLOP/s fp32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured  predicted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chr point default overlapped"), std::string::npos) << r.out;
  const auto cal = nlohmann::json::parse(slurp(dir.path() / "cal" / "calibration.json"));
  EXPECT_GT(cal["calibration"]["gemm_flops_per_s"][0].get<double>(), 0);
  EXPECT_GT(cal["calibration"]["compute_error"]["samples"].get<int>(), 0);
  // Every sample, compute and collectives, one row each after the header.
  const std::string samples = slurp(dir.path() / "cal" / "samples.csv");
  EXPECT_EQ(std::count(samples.begin(), samples.end(), '\n'),
            1 + cal["calibration"]["compute_error"]["samples"].get<int>() +
                cal["calibration"]["comm_error"]["samples"].get<int>());
  EXPECT_NE(samples.find("\ncompute,\"" + path("train") + ": forward unit 0\",fp32,"),
            std::string::npos)
      << samples;
  // The training point and the microbenchmark both offered their scenarios.
  EXPECT_EQ(cal["calibration"]["contention_candidates"], 2);
  // The layerwise point's all-reduces move during the backward pass: the last issuer's
  // hold is measured (Note [the last issuer's core]), a share of the transfers.
  EXPECT_GT(cal["calibration"]["issuer_samples"].get<int>(), 0);
  const double held = cal["device"]["issuer_held"].get<double>();
  EXPECT_EQ(held, cal["calibration"]["issuer_held"].get<double>());
  EXPECT_GE(held, 0);
  EXPECT_LE(held, 1);
  EXPECT_NE(r.out.find("last issuer: the rank that issued a collective last computed again"),
            std::string::npos)
      << r.out;

  r = run_tandem("simulate --cluster here --calibration " + path("cal") +
                 " --model mlp:4x512 --ranks 3 --out " + path("sim"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(calibrated)"), std::string::npos) << r.out;
  const auto summary = nlohmann::json::parse(slurp(dir.path() / "sim" / "summary.json"));
  EXPECT_EQ(summary["simulated"]["calibration"], path("cal"));
  EXPECT_EQ(summary["config"]["ranks"], 3);

  r = run_tandem("characterize --simulate here --calibration " + path("cal") +
                 " --ranks 2 --model mlp:3x256 --iterations 2 --warmup 0 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("simulated on 1 x 2 here"), std::string::npos) << r.out;

  r = run_tandem("simulate --calibration " + path("cal") + " --against " + path("other"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(path("other")), std::string::npos) << r.out;

  for (const std::string& args : std::vector<std::string>{
           "simulate --calibrate " + path("train"),                            // no --out
           "simulate --calibrate " + path("train") + " --out " + path("cal"),  // exists
           "simulate --calibrate " + path("nope") + " --out " + path("x"),
           "simulate --calibrate " + path("sim") + " --out " + path("x"),  // a simulation
           "simulate --calibrate " + path("train") + " --model mlp:2x8 --out " + path("x"),
           std::string("simulate --cluster here --model mlp:2x8"),  // no calibration
           "simulate --cluster 2xh100 --calibration " + path("cal"),
           "simulate --against " + path("other"),
           "characterize --calibration " + path("cal") + " --ranks 2 --iterations 1"}) {
    const CliResult bad = run_tandem(args);
    EXPECT_EQ(bad.exit_code, 2) << args << ": " << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << args << ": " << bad.err;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "x"));
}

// The E2E after `label` in a replay's output ("  measured", "  replayed", "  what-if": the
// two spaces tell the E2E lines from a note's words).
double replay_ms(const std::string& out, const char* label) {
  const auto at = out.find(label);
  EXPECT_NE(at, std::string::npos) << out;
  return at == std::string::npos ? -1.0 : std::stod(out.substr(at + std::string(label).size()));
}

// A tensor-parallel run replays with each piece of its passes between the group's
// collectives as measured, and the collectives as long as its ranks stood blocked on them:
// a simulation's own trace is reproduced (plain, with a pipeline, and overlapped in ring
// steps); a measured run replays and takes what-ifs. It is predicted against a calibration
// from the other runs (--against), and simulated on a cluster with its split.
TEST(SimulateCliTest, ATensorParallelRunIsReplayedAndPredicted) {
  TempDir dir;
  for (const char* split : {"--tensor 2 --ranks 4", "--tensor 2 --pipeline 2 --micro-batches 2",
                            "--tensor 2 --sequence-parallel --tp-overlap --ranks 4",
                            "--tensor 2 --ranks 4 --strategy fsdp"}) {
    const std::string sim = (dir.path() / "tpsim").string();
    ASSERT_EQ(run_tandem(std::string("simulate --cluster 1x4xh100 --model "
                                     "gpt:layers=2,dim=256,heads=4,seq=64 --batch 4 --steps 4 ") +
                         split + " --force --out " + sim)
                  .exit_code,
              0)
        << split;
    const CliResult r = run_tandem("simulate --from-trace " + sim);
    ASSERT_EQ(r.exit_code, 0) << split << r.err;
    const double measured = replay_ms(r.out, "  measured");
    // Each ring step of --tp-overlap is a point-to-point transfer, replayed by its bytes'
    // median: within 2%. fsdp's gathers, measured while the tensor group's collectives
    // shared their link, replay as measured without sharing it again (Transfer::measured:
    // +9.9% when they did): within 3%. The rest within 1%.
    const std::string s(split);
    const double within = s.find("overlap") != std::string::npos ? 0.02
                          : s.find("fsdp") != std::string::npos  ? 0.03
                                                                 : 0.01;
    EXPECT_NEAR(replay_ms(r.out, "  replayed"), measured, within * measured) << split << r.out;
  }

  const fs::path run = dir.path() / "tp";
  ASSERT_EQ(run_tandem("train --model gpt:layers=1,dim=16,heads=2,seq=8,vocab=32 --ranks 2 "
                       "--tensor 2 --batch 2 --steps 3 --quiet --out " +
                       run.string())
                .exit_code,
            0);
  const CliResult r = run_tandem("simulate --from-trace " + run.string() + " --what-if network=4x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(replay_ms(r.out, "  what-if"), replay_ms(r.out, "  replayed")) << r.out;

  const fs::path ddp = dir.path() / "ddp";
  const fs::path cal = dir.path() / "cal";
  ASSERT_EQ(run_tandem("train --model gpt:layers=1,dim=16,heads=2,seq=8,vocab=32 --ranks 2 "
                       "--batch 2 --steps 3 --quiet --out " +
                       ddp.string())
                .exit_code,
            0);
  CliResult c = run_tandem("simulate --calibrate " + ddp.string() + " --out " + cal.string());
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  c = run_tandem("simulate --calibration " + cal.string() + " --against " + run.string());
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find(run.string()), std::string::npos) << c.out;  // its row
  // A calibration fitted only on tensor-parallel runs has nothing to fit: one line.
  c = run_tandem("simulate --calibrate " + run.string() + " --out " + (dir.path() / "x").string());
  EXPECT_EQ(c.exit_code, 2) << c.out << c.err;
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;

  c = run_tandem(
      "simulate --cluster 1x4xh100 --model gpt:layers=2,dim=64,heads=4,seq=16 --tensor 2 "
      "--sequence-parallel --tp-overlap --ranks 4 --batch 2 --out " +
      (dir.path() / "sim").string());
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_NE(c.out.find("tensor parallel 2 x pipeline 1 x data 2"), std::string::npos) << c.out;
  EXPECT_TRUE(fs::exists(dir.path() / "sim" / "summary.json"));
}

TEST(SimulateCliTest, ReplayReproducesASimulationAndAppliesWhatIfs) {
  TempDir dir;
  const std::string sim = (dir.path() / "sim").string();
  ASSERT_EQ(run_tandem("simulate --cluster 2x2xh100 --model mlp:4x1024 --strategy layerwise "
                       "--steps 4 --out " +
                       sim)
                .exit_code,
            0);
  const auto step = [](const std::string& out, const char* label) {
    const auto at = out.find(label);
    EXPECT_NE(at, std::string::npos) << out;
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + std::string(label).size()));
  };
  CliResult r = run_tandem("simulate --from-trace " + sim);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double measured = step(r.out, "measured");
  EXPECT_NEAR(step(r.out, "replayed"), measured, 0.01 * measured) << r.out;
  // A rank that computed slower replays at its own pace.
  const std::string slow = (dir.path() / "slow").string();
  ASSERT_EQ(run_tandem("simulate --cluster 2x2xh100 --model mlp:4x1024 --strategy fsdp "
                       "--straggler rank=1,compute=1.5x --steps 4 --out " +
                       slow)
                .exit_code,
            0);
  r = run_tandem("simulate --from-trace " + slow);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(step(r.out, "replayed"), step(r.out, "measured"), 0.01 * step(r.out, "measured"))
      << r.out;
  r = run_tandem("simulate --from-trace " + sim + " --what-if network=4x --out " +
                 (dir.path() / "fast").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(step(r.out, "what-if"), step(r.out, "replayed")) << r.out;
  const auto summary = nlohmann::json::parse(slurp(dir.path() / "fast" / "summary.json"));
  EXPECT_EQ(summary["simulated"]["what_if"], "network 4x");
  // Per replayed step (the middle half of the run's 4 by E2E): the run's step number, its
  // three E2Es; printed as a table too.
  const auto& steps = summary["simulated"]["steps"];
  ASSERT_EQ(steps.size(), 2u) << summary["simulated"];
  for (const auto& s : steps) {
    const double m = s["measured_ms"].get<double>();
    EXPECT_NEAR(s["replayed_ms"].get<double>(), m, 0.01 * m) << s;
    EXPECT_LT(s["what_if_ms"].get<double>(), s["replayed_ms"].get<double>()) << s;
    EXPECT_GE(s["step"].get<int>(), 0);
    EXPECT_LT(s["step"].get<int>(), 4);
  }
  EXPECT_NE(r.out.find("what-if: network 4x)"), std::string::npos) << r.out;
  // Both timelines: the what-if's trace.json and the replay's, each drawn in report.html.
  ASSERT_TRUE(fs::exists(dir.path() / "fast" / "replayed.trace.json"));
  const std::string report = slurp(dir.path() / "fast" / "report.html");
  EXPECT_NE(report.find("The run as replayed, before the what-if"), std::string::npos);
  const std::string plain_report = slurp(fs::path(sim) / "report.html");
  EXPECT_EQ(count_occurrences(report, "<svg"), count_occurrences(plain_report, "<svg") + 1)
      << "the replay's Gantt beside the what-if's";
  r = run_tandem("simulate --from-trace " + sim + " --what-if overlap=off");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(step(r.out, "what-if"), step(r.out, "replayed")) << r.out;
  // Twice the ranks: every rank's passes as measured, each all-reduce over 8 ranks (more
  // of them across the 2 nodes' network) instead of 4: slower, never faster.
  r = run_tandem("simulate --from-trace " + sim + " --what-if ranks=8 --out " +
                 (dir.path() / "eight").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(step(r.out, "what-if"), step(r.out, "replayed")) << r.out;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir.path() / "eight" / "summary.json"))["config"]["ranks"],
            8);
  // Another bucket size: the what-if's plan has the buckets of that cap.
  const std::string bucketed = (dir.path() / "bucketed").string();
  ASSERT_EQ(run_tandem("simulate --cluster 2x2xh100 --model mlp:4x1024 --strategy bucketed "
                       "--steps 4 --out " +
                       bucketed)
                .exit_code,
            0);
  r = run_tandem("simulate --from-trace " + bucketed + " --what-if bucket-mb=2 --out " +
                 (dir.path() / "small").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bucket-mb 2"), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(
                slurp(dir.path() / "small" / "summary.json"))["config"]["bucket_cap_bytes"],
            2 << 20);
  // 12 MiB of gradients: 1 MiB first, then 2 MiB buckets (a parameter never split) where the
  // run had 25 MiB ones.
  const auto buckets = [](const std::string& out) {  // the summary's "strategy bucketed, N buckets"
    const std::string label = "strategy bucketed, ";
    const auto at = out.rfind(label);
    return at == std::string::npos ? -1 : std::stoi(out.substr(at + label.size()));
  };
  const CliResult replay =
      run_tandem("simulate --from-trace " + bucketed + " --what-if network=1x");
  EXPECT_GT(buckets(r.out), buckets(replay.out) + 3) << r.out << replay.out;
  // A pipeline of one replica measured no collective to price more replicas' by.
  const std::string pipeline = (dir.path() / "pipeline").string();
  ASSERT_EQ(run_tandem("simulate --cluster 2xh100 --model mlp:4x1024 --pipeline 2 --ranks 2 "
                       "--steps 4 --out " +
                       pipeline)
                .exit_code,
            0);
  const CliResult unpriced = run_tandem("simulate --from-trace " + pipeline + " --what-if ranks=4");
  EXPECT_EQ(unpriced.exit_code, 2) << unpriced.out;
  EXPECT_NE(unpriced.err.find("--what-if ranks=4"), std::string::npos) << unpriced.err;
  EXPECT_NE(unpriced.err.find("measured no collective"), std::string::npos) << unpriced.err;
  for (const std::string& args :
       std::vector<std::string>{"simulate --from-trace " + (dir.path() / "nope").string(),
                                "simulate --from-trace " + sim + " --what-if network=fast",
                                "simulate --from-trace " + sim + " --what-if contention=on",
                                "simulate --from-trace " + sim + " --what-if bucket-mb=5",
                                "simulate --from-trace " + sim + " --what-if ranks=0",
                                "simulate --from-trace " + sim + " --model mlp:2x8",
                                "simulate --cluster 2xh100 --what-if overlap=off"}) {
    const CliResult bad = run_tandem(args);
    EXPECT_EQ(bad.exit_code, 2) << args << ": " << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << args << ": " << bad.err;
  }
}

// slowdown=off takes out the compute's slowdown beside communication and nothing else
// (eq. 4's E2E_ideal, scheduled); contention=off the communication's too. On a simulated
// machine where each slows the other twofold and a quarter of the backward runs beside
// the all-reduces, each what-if is shorter than the one before.
TEST(SimulateCliTest, SlowdownOffRemovesTheComputesContentionOnly) {
  TempDir dir;
  const fs::path cluster = dir.path() / "cluster.json";
  std::ofstream(cluster) << R"({"nodes": 1, "devices_per_node": 2,
    "device": {"profile": "h100", "overlap_compute_slowdown": 1, "overlap_comm_slowdown": 1},
    "intra": {"gbps": 20, "latency_us": 5}})";
  const std::string sim = (dir.path() / "sim").string();
  ASSERT_EQ(
      run_tandem("simulate --cluster " + cluster.string() +
                 " --model mlp:4x1024 --batch 4096 --strategy layerwise --steps 4 --out " + sim)
          .exit_code,
      0);
  const auto ms = [&](const std::string& what_if, const char* label) {
    const CliResult r = run_tandem("simulate --from-trace " + sim + " --what-if " + what_if);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto at = r.out.find(label);
    EXPECT_NE(at, std::string::npos) << r.out;
    return at == std::string::npos ? -1.0 : std::stod(r.out.substr(at + std::string(label).size()));
  };
  const double replayed = ms("network=1x", "replayed");
  const double slowdown_off = ms("slowdown=off", "what-if");
  const double contention_off = ms("contention=off", "what-if");
  EXPECT_LT(slowdown_off, 0.95 * replayed);
  EXPECT_LT(contention_off, 0.95 * slowdown_off);
  // Both at once are contention=off.
  EXPECT_DOUBLE_EQ(ms("slowdown=off --what-if contention=off", "what-if"), contention_off);
}

// PyTorch profiles replay as a graph (experiment/profile_replay.h): per iteration the
// measured, replayed and what-if E2E, and --out as analyze writes a profile, with the
// replay beside the what-if in report.html.
// A sweep's points replay one at a time, each as DIR/points/ID; the sweep given whole is
// refused in one line naming a point (it replayed its first point in silence).
TEST(SimulateCliTest, ASweepsPointIsReplayedByItsDirectory) {
  TempDir dir;
  const fs::path sweep = dir.path() / "sweep";
  ASSERT_EQ(run_tandem("characterize --model mlp:2x64 --ranks 2 --batch 8 --iterations 3 "
                       "--warmup 1 --no-progress --sweep strategy=bucketed,layerwise --out " +
                       sweep.string())
                .exit_code,
            0);
  const CliResult whole = run_tandem("simulate --from-trace " + sweep.string());
  EXPECT_EQ(whole.exit_code, 2) << whole.out << whole.err;
  EXPECT_NE(whole.err.find("points"), std::string::npos) << whole.err;
  EXPECT_EQ(std::count(whole.err.begin(), whole.err.end(), '\n'), 1) << whole.err;
  const auto summary = nlohmann::json::parse(slurp(sweep / "summary.json"));
  for (const auto& entry : fs::directory_iterator(sweep / "points")) {
    const std::string id = entry.path().filename().string();
    const CliResult r = run_tandem("simulate --from-trace " + entry.path().string());
    ASSERT_EQ(r.exit_code, 0) << id << r.err;
    EXPECT_NE(r.out.find("point " + id + " overlapped"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("E2E_ideal"), std::string::npos) << r.out;  // no what-if: none
    // Without contention, beside the point's own E2E_ideal (eq. 4).
    const fs::path out = dir.path() / ("ideal-" + id);
    const CliResult ideal = run_tandem("simulate --from-trace " + entry.path().string() +
                                       " --what-if slowdown=off --out " + out.string());
    ASSERT_EQ(ideal.exit_code, 0) << id << ideal.err;
    EXPECT_NE(ideal.out.find("E2E_ideal"), std::string::npos) << ideal.out;
    double metric = -1;
    for (const auto& point : summary["points"]) {
      if (point["id"] == id) metric = point["metrics"]["e2e_ideal_ns"]["median"].get<double>();
    }
    EXPECT_NEAR(nlohmann::json::parse(slurp(out / "summary.json"))["simulated"]["e2e_ideal_ms"]
                    .get<double>(),
                metric / 1e6, 1e-9)
        << id;
  }
  const CliResult missing =
      run_tandem("simulate --from-trace " + (sweep / "points" / "nope").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_NE(missing.err.find("nope"), std::string::npos) << missing.err;
}

TEST(SimulateCliTest, ReplaysPyTorchProfilesWithAWhatIf) {
  TempDir dir;
  const fs::path traces = dir.path() / "traces";
  fs::create_directories(traces);
  for (int rank = 0; rank < 2; ++rank) {
    KinetoBuilder b(rank);
    for (int step = 0; step < 3; ++step) {
      const double t0 = 1000.0 * step;
      const long c = 10L * step;
      b.profiler_step(step, t0, 999);
      // Backward, then its all-reduce (400 us of transfer after both ranks arrive), then
      // the optimizer 2 us after it.
      b.launch(t0 + 1, c + 1).kernel("bwd", t0 + 3, 200, 7, c + 1);
      b.launch(t0 + 2, c + 2)
          .nccl("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + 205, 400, c + 2, "allreduce",
                1 << 20, 1 << 20, 2);
      b.launch(t0 + 3, c + 3).kernel("sgd", t0 + 607, 100, 7, c + 3);
    }
    std::ofstream(traces / ("rank" + std::to_string(rank) + ".json")) << b.str();
  }
  const fs::path out = dir.path() / "fast";
  const CliResult r = run_tandem("simulate --from-trace " + traces.string() +
                                 " --what-if network=4x --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 704 us measured (3 .. 707); the transfer at a quarter: 100 us, the step 404.
  EXPECT_NE(r.out.find("measured      0.704 ms"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("replayed      0.704 ms  (+0.0% of measured)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("what-if       0.404 ms"), std::string::npos) << r.out;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_EQ(summary["command"], "analyze");
  EXPECT_EQ(summary["simulated"]["what_if"], "network 4x");
  EXPECT_EQ(summary["simulated"]["steps"].size(), 3u);
  EXPECT_NEAR(summary["simulated"]["what_if_step_ms"].get<double>(), 0.404, 1e-9);
  EXPECT_TRUE(fs::exists(out / "replayed.trace.json"));
  EXPECT_NE(slurp(out / "report.html").find("The run as replayed"), std::string::npos);

  // What a profile cannot replay: one line, exit 2.
  ASSERT_EQ(run_tandem("train --ranks 2 --model mlp:2x64 --batch 8 --steps 2 --quiet --out " +
                       (dir.path() / "own").string())
                .exit_code,
            0);
  for (const std::string& args : std::vector<std::string>{
           "simulate --from-trace " + traces.string() + " --what-if ranks=4",
           "simulate --from-trace " + traces.string() + " --what-if bucket-mb=2",
           "simulate --from-trace " + (dir.path() / "own" / "trace.json").string(),
           // A compute-only profile prices contention=off, of a profile only.
           "simulate --from-trace " + traces.string() + " --baseline " + traces.string(),
           "simulate --from-trace " + (dir.path() / "own").string() +
               " --what-if contention=off --baseline " + traces.string(),
           "simulate --cluster 2xh100 --baseline " + traces.string()}) {
    const CliResult bad = run_tandem(args);
    EXPECT_EQ(bad.exit_code, 2) << args << ": " << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << args << ": " << bad.err;
  }
}

// A run over an emulated --link replays with its wire as measured (a calibration still
// refuses it: it would fit the emulation, not the machine); its what-ifs know the wire.
TEST(SimulateCliTest, AReplayTakesAnEmulatedLinkAsMeasured) {
  TempDir dir;
  const std::string run = (dir.path() / "linked").string();
  ASSERT_EQ(run_tandem("train --ranks 2 --model mlp:2x64 --batch 8 --steps 4 --quiet --link "
                       "1GB/s,20us --out " +
                       run)
                .exit_code,
            0);
  const CliResult r = run_tandem("simulate --from-trace " + run + " --what-if network=2x");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("replayed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("what-if"), std::string::npos) << r.out;
  // Only the wire's part of each collective is the network's (Note [a faster network,
  // emulated]).
  EXPECT_NE(r.out.find("only its wire time is shortened"), std::string::npos) << r.out;
  // More ranks than the run's host has cores: said, not modelled; what was never measured
  // is the emulated link's.
  const int cores =
      nlohmann::json::parse(slurp(fs::path(run) / "summary.json"))["machine"]["cores"].get<int>();
  CliResult more =
      run_tandem("simulate --from-trace " + run + " --what-if ranks=" + std::to_string(cores + 1));
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_NE(more.out.find("cores would share them: not modelled"), std::string::npos) << more.out;
  EXPECT_NE(more.out.find("priced by the emulated link"), std::string::npos) << more.out;
  more = run_tandem("simulate --from-trace " + run + " --what-if ranks=1");
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_EQ(more.out.find("would share them"), std::string::npos) << more.out;
  EXPECT_NE(more.out.find("fewer ranks may compute faster (not modelled)"), std::string::npos)
      << more.out;
  const CliResult refused = run_tandem("simulate --calibrate " + run);
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
}

// characterize --simulate: the four scenarios predicted, the metrics derived from them as
// from measured ones.
TEST(SimulateCliTest, CharacterizePredictsTheFourScenarios) {
  TempDir dir;
  const fs::path out = dir.path() / "c";
  const CliResult r = run_tandem(
      "characterize --simulate 2x2xa100 --ranks 4 --model mlp:4x2048 --batch 64 --iterations 2 "
      "--precision fp16 "
      "--warmup 0 --no-progress --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("simulated on 2 x 2 a100-40gb"), std::string::npos) << r.out;
  const auto summary = nlohmann::json::parse(slurp(out / "summary.json"));
  const auto& point = summary["points"][0];
  EXPECT_EQ(point["config"]["workload"], "simulated");
  EXPECT_EQ(point["config"]["device_profile"], "a100-40gb");
  EXPECT_EQ(point["config"]["precision"], "fp16");  // the simulated device's, not this CPU's
  EXPECT_EQ(point["scenarios"].size(), 4u);
  // a100's profile slows overlapped compute by 4%, and the last layers' buckets overlap
  // the first layers' backward: some slowdown, never more than the factor.
  const double slowdown = point["metrics"]["compute_slowdown"]["median"].get<double>();
  EXPECT_GT(slowdown, 0.0) << point["metrics"];
  EXPECT_LE(slowdown, 0.04 + 1e-9) << point["metrics"];
  for (const std::string args :
       {"characterize --simulate 2xh100 --microbench gemm=64,allreduce=1MiB",
        "characterize --straggler rank=1,compute=2x", "characterize --simulate 2xh900"}) {
    const CliResult bad = run_tandem(args);
    EXPECT_EQ(bad.exit_code, 2) << args << ": " << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << args << ": " << bad.err;
  }
}

}  // namespace
}  // namespace tandem::testing
