// `tandem report` and the reports characterize and train write: structure, escaping,
// scaling to many ranks and points, bad input, and the trace's bucket-ready flows.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "cli/report_support.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// Offline means: no script, and every src/href points inside the page.
void expect_self_contained(const std::string& html) {
  EXPECT_EQ(html.find("<script"), std::string::npos);
  const std::regex ref(R"re((?:src|href)\s*=\s*"([^"]*)")re");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), ref); it != std::sregex_iterator();
       ++it) {
    EXPECT_EQ((*it)[1].str().rfind('#', 0), 0u) << "external reference: " << (*it)[0].str();
  }
}

TEST(ReportCliTest, CharacterizeWritesAReportWithEveryChart) {
  TempDir dir;
  const fs::path out = make_characterize_results(dir.path());
  const std::string html = slurp(out / "report.html");
  ASSERT_FALSE(html.empty());
  expect_self_contained(html);
  EXPECT_EQ(count(html, "class=\"chart gantt\""), 4u);  // one per scenario
  EXPECT_EQ(count(html, "class=\"chart bars\""), 1u);
  // The breakdown per configuration and the waiting split per rank.
  EXPECT_EQ(count(html, "class=\"chart stacked\""), 2u);
  EXPECT_EQ(count(html, "class=\"chart scatter\""), 1u);
  EXPECT_EQ(count(html, "class=\"chart lines\""), 1u);  // the chunks sweep
  EXPECT_EQ(count(html, "class=\"chart power\""), 4u);  // the fixture was sampled
  // Both ranks in each Gantt and in the waiting bars; overlapped time shaded in the
  // overlapped scenario only (synthetic sleep mode: compute-only and comm-only cannot
  // overlap).
  EXPECT_EQ(count(html, ">rank 0</text>"), 5u);
  EXPECT_EQ(count(html, ">rank 1</text>"), 5u);
  EXPECT_GT(count(html, "class=\"ovl\""), 0u);
  // The metrics table has every row of the terminal table, and the machine is named.
  EXPECT_NE(html.find("compute slowdown S (eq. 1)"), std::string::npos);
  EXPECT_NE(html.find("overlap efficiency"), std::string::npos);
  EXPECT_NE(html.find(">CPU</td>"), std::string::npos);
  EXPECT_NE(html.find("chunks=4"), std::string::npos);

  // Rebuilding from the saved results gives the same page.
  fs::remove(out / "report.html");
  const CliResult r = run_tandem("report " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(out / "report.html"), html);
}

TEST(ReportCliTest, PointAndIterationChooseWhatIsDrawn) {
  TempDir dir;
  const fs::path out = make_characterize_results(dir.path());
  const fs::path page = dir.path() / "p.html";
  const CliResult r = run_tandem("report " + out.string() +
                                 " --point chunks-4 --iteration 1 --out " + page.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = slurp(page);
  EXPECT_NE(html.find("<h3>chunks=4</h3>"), std::string::npos);  // the detailed metrics
  EXPECT_NE(html.find("iteration 1 of each scenario"), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"hl\"><td>chunks=4</td>"), std::string::npos);
}

TEST(ReportCliTest, HostileSpanNameIsTextNeverMarkup) {
  TempDir dir;
  const fs::path out = make_hostile_train_results(dir.path());
  const CliResult r = run_tandem("report " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = slurp(out / "report.html");
  expect_self_contained(html);
  EXPECT_EQ(html.find(kHostileName), std::string::npos);
  // In the span's tooltip and in the heading (the model name).
  EXPECT_GE(count(html, "&lt;script&gt;alert(1)&lt;/script&gt;"), 2u);
  EXPECT_EQ(count(html, "class=\"chart gantt\""), 1u);
  EXPECT_NE(html.find("power: unavailable"), std::string::npos);
}

TEST(ReportCliTest, TrainWritesAReport) {
  TempDir dir;
  const fs::path out = dir.path() / "t";
  const CliResult r = run_tandem(
      "train --ranks 2 --model mlp:2x32 --batch 4 --steps 4 --quiet "
      "--warmup 1 --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("report.html"), std::string::npos);
  const std::string html = slurp(out / "report.html");
  expect_self_contained(html);
  EXPECT_EQ(count(html, "class=\"chart gantt\""), 1u);
  // The step breakdown and the waiting split per rank.
  EXPECT_EQ(count(html, "class=\"chart stacked\""), 2u);
  EXPECT_NE(html.find("<h2>Waiting explained</h2>"), std::string::npos);
  EXPECT_NE(html.find(">allreduce B0 · "), std::string::npos);  // a comm span's tooltip
}

// 32 ranks and 200 configurations: the Gantt is capped, bars are capped, the table has
// every point, and the file stays small.
TEST(ReportCliTest, ScalesToManyRanksAndPoints) {
  TempDir dir;
  const fs::path out = dir.path() / "big";
  CliResult r = run_tandem(
      "characterize --synthetic compute=2ms,comm=1ms,chunks=2 --ranks 32 --warmup 0 "
      "--iterations 1 --no-progress --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json summary = json::parse(slurp(out / "summary.json"));
  const json point = summary["points"][0];
  summary["points"] = json::array();
  for (int i = 0; i < 200; ++i) {
    json p = point;
    if (i > 0) p["id"] = "chunks-" + std::to_string(i + 1);  // only the first has traces
    p["params"] = {{"chunks", std::to_string(i + 1)}};
    summary["points"].push_back(p);
  }
  write_text(out / "summary.json", summary.dump());
  r = run_tandem("report " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string html = slurp(out / "report.html");
  EXPECT_LT(html.size(), 1'500'000u);
  EXPECT_EQ(count(html, ">rank 7</text>"), 5u);  // 4 Gantts and the waiting bars
  EXPECT_EQ(count(html, ">rank 8</text>"), 0u);
  EXPECT_NE(html.find("The first 8 of 32 ranks; summary.json has every one."), std::string::npos);
  EXPECT_EQ(count(html, "ranks 0–7 of 32 drawn"), 4u);
  EXPECT_NE(html.find("The first 40 of 200 configurations"), std::string::npos);
  EXPECT_NE(html.find("<td>chunks=200</td>"), std::string::npos);
}

// Room running out while writing (here a file-size limit, as a full disk would) is a
// failure at run time: exit 1 and "tandem: failed:", the old report untouched and no
// temporary left. A path that cannot be used at all stays a usage error (exit 2).
TEST(ReportCliTest, RunningOutOfRoomIsAFailureAndLeavesTheOldReport) {
  TempDir dir;
  const fs::path out = dir.path() / "r";
  ASSERT_EQ(run_tandem("train --model mlp:2x16 --ranks 1 --batch 4 --steps 3 --quiet --out " +
                       out.string())
                .exit_code,
            0);
  const std::string before = slurp(out / "report.html");
  ASSERT_GT(before.size(), 4096u);
  // SIGXFSZ ignored: a write past the limit fails with EFBIG instead of killing.
  const CliResult r = run_shell("ulimit -f 4 && trap '' XFSZ && exec " +
                                std::string(TANDEM_BINARY) + " report " + out.string());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("tandem: failed: cannot write '", 0), 0u) << r.err;
  EXPECT_EQ(slurp(out / "report.html"), before);
  for (const auto& entry : fs::directory_iterator(out)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

void expect_one_line_error(const std::string& args, const std::string& fragment) {
  const CliResult r = run_tandem(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("tandem: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << r.err;
}

TEST(ReportCliTest, MissingOrCorruptResultsAreOneLineAndExit2) {
  TempDir dir;
  const fs::path d = dir.path();
  expect_one_line_error("report " + (d / "absent").string(), "absent: no such results directory");
  fs::create_directories(d / "empty");
  expect_one_line_error("report " + (d / "empty").string(), "summary.json: missing");
  write_text(d / "corrupt" / "summary.json", "{\"schema\": 2,\n\"points\": [\n");
  expect_one_line_error("report " + (d / "corrupt").string(), "summary.json: not valid JSON");
  // The header decides: none, an old or future schema, another tool, an unknown command.
  write_text(d / "bare" / "summary.json", R"({"points": []})");
  expect_one_line_error("report " + (d / "bare").string(),
                        (d / "bare" / "summary.json").string() + ": no \"schema\" header");
  write_text(d / "old" / "summary.json", R"({"version": 1, "points": []})");
  expect_one_line_error("report " + (d / "old").string(),
                        (d / "old" / "summary.json").string() + ": schema 1");
  write_text(d / "future" / "summary.json",
             R"({"schema": 7, "tool": "tandem", "command": "train"})");
  expect_one_line_error("report " + (d / "future").string(),
                        (d / "future" / "summary.json").string() + ": schema 7 is not supported");
  write_text(d / "foreign" / "summary.json", R"({"schema": 2, "tool": "x", "command": "train"})");
  expect_one_line_error("report " + (d / "foreign").string(), "\"tool\" is not \"tandem\"");
  write_text(d / "fly" / "summary.json", R"({"schema": 2, "tool": "tandem", "command": "fly"})");
  expect_one_line_error("report " + (d / "fly").string(),
                        (d / "fly" / "summary.json").string() + ": unknown command \"fly\"");
  // A known command with a body of another layout.
  write_text(d / "other" / "summary.json",
             R"({"schema": 2, "tool": "tandem", "command": "train"})");
  expect_one_line_error("report " + (d / "other").string(),
                        "train summary without a \"config\" object");
  write_text(
      d / "badpoint" / "summary.json",
      R"({"schema": 2, "tool": "tandem", "command": "characterize", "points": [{"id": 3}]})");
  expect_one_line_error("report " + (d / "badpoint").string(), "point 0: no \"id\"");
  // A damaged trace is an error too, not a silently empty chart.
  const fs::path hostile = make_hostile_train_results(d);
  write_text(hostile / "trace.json", "{\"traceEvents\": [");
  expect_one_line_error("report " + hostile.string(), "trace.json: not valid JSON");
  EXPECT_FALSE(fs::exists(hostile / "report.html"));
}

TEST(ReportCliTest, UnknownPointOrIterationIsAUsageError) {
  TempDir dir;
  const fs::path out = make_characterize_results(dir.path());
  expect_one_line_error("report " + out.string() + " --point nope", "--point nope: no such");
  expect_one_line_error("report " + out.string() + " --iteration 99",
                        "--iteration 99: not a measured iteration");
}

// tandem train's trace: every all-reduce of a step gets a bucket-ready arrow that starts
// on the compute lane and ends where its collective starts.
TEST(ReportCliTest, TrainTraceHasBucketReadyFlows) {
  TempDir dir;
  const fs::path out = dir.path() / "t";
  const CliResult r = run_tandem(
      "train --ranks 2 --model mlp:3x32 --batch 4 --steps 3 --quiet "
      "--strategy layerwise --out " +
      out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json trace = json::parse(slurp(out / "trace.json"));
  std::map<std::pair<int, double>, int> allreduce_starts;  // (pid, ts) of step allreduces
  std::map<std::int64_t, std::map<std::string, json>> flows;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "allreduce" && e["args"].contains("step")) {
      ++allreduce_starts[{e["pid"].get<int>(), e["ts"].get<double>()}];
      EXPECT_GE(e["args"]["queued_ns"].get<std::int64_t>(), 0);
    }
    if (e["ph"] == "s" || e["ph"] == "f") flows[e["id"].get<std::int64_t>()][e["ph"]] = e;
  }
  ASSERT_EQ(allreduce_starts.size(), 2u * 3u * 3u);  // ranks x steps x layers
  ASSERT_EQ(flows.size(), allreduce_starts.size());
  for (const auto& [id, pair] : flows) {
    ASSERT_EQ(pair.size(), 2u) << id;
    const json& s = pair.at("s");
    const json& f = pair.at("f");
    EXPECT_EQ(s["tid"], 0);
    EXPECT_EQ(f["tid"], 1);
    EXPECT_EQ(s["pid"], f["pid"]);
    EXPECT_LE(s["ts"].get<double>(), f["ts"].get<double>());
    EXPECT_EQ(allreduce_starts.count({f["pid"].get<int>(), f["ts"].get<double>()}), 1u) << f;
  }
}

}  // namespace
}  // namespace tandem::testing
