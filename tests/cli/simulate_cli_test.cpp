// `tandem simulate` as a user runs it: the same files as train, marked simulated, and one
// line with exit code 2 for what it cannot do.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_support.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

TEST(SimulateCliTest, WritesWhatTrainWritesMarkedSimulated) {
  TempDir dir;
  const fs::path out = dir.path() / "sim";
  const CliResult r = run_tandem(
      "simulate --cluster 2x4xh100 --model mlp:4x1024 --batch 16 "
      "--straggler rank=5,compute=1.5x --out " +
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
  // The straggler makes every rank wait: the others' blocked time is not zero.
  const auto trace = nlohmann::json::parse(slurp(out / "trace.json"));
  EXPECT_FALSE(trace["traceEvents"].empty());
}

TEST(SimulateCliTest, BadInputIsOneLineAndExitCodeTwo) {
  for (const std::string args :
       {"simulate --cluster 8xh900", "simulate --cluster 2xh100 --strategy fsdp",
        "simulate --cluster 2xh100 --ranks 4", "simulate --cluster 2xmi250 --precision tf32",
        "simulate --cluster 1xa100 --model gpt3-13b",
        "simulate --cluster 2xh100 --straggler rank=9,compute=2x",
        "simulate --cluster 2xh100 --model gpt:nope", "simulate --cluster /no/such.json"}) {
    const CliResult r = run_tandem(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find("--"), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace tandem::testing
