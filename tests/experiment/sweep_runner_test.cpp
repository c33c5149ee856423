// run_sweep without the CLI: grid order, what the observer hears, a point committed with
// its traces, and --resume skipping exactly the finished points (a workload that counts
// its runs says which ran). Also that it writes nothing without a writer.
#include "experiment/sweep_runner.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_support.h"
#include "core/files.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

// One rank; per step a compute span [0,100) and, unless compute-only, a comm span
// [50,150) (after compute when sequential). Counts the scenarios it ran.
class CountingWorkload : public Workload {
 public:
  explicit CountingWorkload(int* runs) : runs_(runs) {}
  std::string describe() const override { return "counting"; }
  nlohmann::json config_json() const override { return {{"kind", "counting"}}; }
  Timeline run(Job&, Scenario scenario, int steps) override {
    ++*runs_;
    Timeline t;
    t.ranks = 1;
    for (int step = 0; step < steps; ++step) {
      const std::int64_t base = 1000 * step;
      if (scenario != Scenario::kCommOnly) add(t, step, Lane::kCompute, base, base + 100);
      const std::int64_t comm = scenario == Scenario::kSequential ? base + 100 : base + 50;
      if (scenario != Scenario::kComputeOnly) add(t, step, Lane::kComm, comm, comm + 100);
    }
    return t;
  }

 private:
  static void add(Timeline& t, int step, Lane lane, std::int64_t start, std::int64_t end) {
    Span s;
    s.lane = lane;
    s.kind = lane == Lane::kCompute ? SpanKind::kBackward : SpanKind::kAllreduce;
    s.step = step;
    s.start_ns = start;
    s.end_ns = end;
    t.spans.push_back(s);
  }
  int* runs_;
};

class RecordingObserver : public SweepObserver {
 public:
  void sweep_started(std::size_t total, std::size_t finished) override {
    events.push_back("start " + std::to_string(total) + " " + std::to_string(finished));
  }
  void scenario_started(std::size_t index, const SweepPoint&, Scenario scenario) override {
    if (scenario == Scenario::kComputeOnly) events.push_back("run " + std::to_string(index));
  }
  void point_finished(std::size_t index, const SweepPoint& point,
                      const Characterization&) override {
    events.push_back("done " + std::to_string(index) + " " + describe(point));
  }
  std::vector<std::string> events;
};

const std::vector<SweepAxis> kAxes = {{"chunks", {"1", "2", "3"}}};

struct Sweep {
  std::vector<int> runs = std::vector<int>(3, 0);  // scenarios run, per point
  std::vector<SweepItem> jobs;
  Sweep() {
    const std::vector<SweepPoint> grid = expand_grid(kAxes);
    for (std::size_t i = 0; i < grid.size(); ++i) {
      jobs.push_back({grid[i], std::make_unique<CountingWorkload>(&runs[i])});
    }
  }
};

SweepOptions options(std::set<std::string> finished = {}) {
  return {.axes = kAxes,
          .finished = std::move(finished),
          .warmup = 0,
          .iterations = 2,
          .power = nullptr};
}

TEST(SweepRunnerTest, RunsEveryPointInGridOrderAndWritesNothingWithoutAWriter) {
  Sweep sweep;
  RecordingObserver observer;
  const SweepOutcome outcome = run_sweep(sweep.jobs, options(), nullptr, &observer);
  EXPECT_EQ(outcome.ran, 3u);
  EXPECT_EQ(outcome.skipped, 0u);
  ASSERT_TRUE(outcome.last.has_value());
  EXPECT_EQ(outcome.last->description, "counting");
  EXPECT_DOUBLE_EQ(outcome.last->metrics.t_ovl_ns.median, 50);
  EXPECT_EQ(sweep.runs, (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(observer.events,
            (std::vector<std::string>{"start 3 0", "run 0", "done 0 chunks=1", "run 1",
                                      "done 1 chunks=2", "run 2", "done 2 chunks=3"}));
  // No observer is fine too.
  Sweep quiet;
  EXPECT_EQ(run_sweep(quiet.jobs, options(), nullptr, nullptr).ran, 3u);
}

// The hook for what a workload does not apply itself (a power cap): once per point that
// runs, before its first scenario, never for a finished one.
TEST(SweepRunnerTest, BeforePointRunsBeforeEachPointThatRuns) {
  Sweep sweep;
  RecordingObserver observer;
  SweepOptions o = options({"chunks-2"});
  o.before_point = [&](const SweepPoint& point) {
    observer.events.push_back("before " + describe(point));
  };
  EXPECT_EQ(run_sweep(sweep.jobs, o, nullptr, &observer).ran, 2u);
  EXPECT_EQ(observer.events,
            (std::vector<std::string>{"start 3 1", "before chunks=1", "run 0", "done 0 chunks=1",
                                      "before chunks=3", "run 2", "done 2 chunks=3"}));
  // A hook that throws (a limit that cannot be set) stops the sweep before the point runs.
  Sweep failing;
  o.finished = {};
  o.before_point = [](const SweepPoint&) { throw RuntimeError("cannot set"); };
  EXPECT_THROW(run_sweep(failing.jobs, o, nullptr, nullptr), RuntimeError);
  EXPECT_EQ(failing.runs, (std::vector<int>{0, 0, 0}));
}

TEST(SweepRunnerTest, ResumeSkipsExactlyTheFinishedPoints) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "out";
  {
    Sweep first;
    ResultsWriter results(dir, ResultsCommand::kCharacterize, {"tandem"});
    run_sweep(first.jobs, options(), &results, nullptr);
    results.commit();
  }
  const fs::path points = dir / "points";
  for (const char* id : {"chunks-1", "chunks-2", "chunks-3"}) {
    for (const char* s : {"compute-only", "comm-only", "sequential", "overlapped"}) {
      EXPECT_TRUE(fs::exists(points / id / (std::string(s) + ".trace.json"))) << id << s;
    }
  }
  fs::remove(points / "chunks-2" / "result.json");  // cut before its commit
  const std::string kept = read_file(points / "chunks-1" / "result.json");

  Sweep second;
  RecordingObserver observer;
  ResultsWriter results(dir, ResultsCommand::kCharacterize, {"tandem"}, {.resume = true});
  const SweepOutcome outcome =
      run_sweep(second.jobs, options(results.finished_points()), &results, &observer);
  EXPECT_EQ(outcome.ran, 1u);
  EXPECT_EQ(outcome.skipped, 2u);
  EXPECT_EQ(second.runs, (std::vector<int>{0, 4, 0}));
  EXPECT_EQ(observer.events, (std::vector<std::string>{"start 3 2", "run 1", "done 1 chunks=2"}));
  EXPECT_EQ(read_file(points / "chunks-1" / "result.json"), kept);

  const nlohmann::json summary = nlohmann::json::parse(read_file(dir / "summary.json"));
  EXPECT_EQ(summary["command"], "characterize");
  EXPECT_EQ(summary["points_total"], 3);
  ASSERT_EQ(summary["points"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(summary["points"][i]["id"], "chunks-" + std::to_string(i + 1));
    EXPECT_FALSE(summary["points"][i].contains("iterations_csv"));
  }
  EXPECT_EQ(summary["sweep"][0]["key"], "chunks");
  // Header + 3 points x 4 scenarios x 2 iterations.
  EXPECT_EQ(count_lines(read_file(dir / "iterations.csv")), 1 + 3 * 4 * 2);
  EXPECT_EQ(read_file(dir / "trace.json"),
            read_file(points / "chunks-1" / "overlapped.trace.json"));
}

TEST(SweepRunnerTest, AFinishedSweepResumedRunsNothingAndRewritesItsSummary) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "out";
  {
    Sweep first;
    ResultsWriter results(dir, ResultsCommand::kCharacterize, {"tandem"});
    run_sweep(first.jobs, options(), &results, nullptr);
    results.commit();
  }
  fs::remove(dir / "summary.json");
  Sweep second;
  ResultsWriter results(dir, ResultsCommand::kCharacterize, {"tandem"}, {.resume = true});
  const SweepOutcome outcome =
      run_sweep(second.jobs, options(results.finished_points()), &results, nullptr);
  EXPECT_EQ(outcome.ran, 0u);
  EXPECT_FALSE(outcome.last.has_value());
  EXPECT_EQ(second.runs, (std::vector<int>{0, 0, 0}));
  const nlohmann::json summary = nlohmann::json::parse(read_file(dir / "summary.json"));
  EXPECT_EQ(summary["points"].size(), 3u);
}

}  // namespace
}  // namespace tandem::testing
