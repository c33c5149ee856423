// The characterization methodology: run a workload's four scenarios, measure each from
// its timeline, and derive what overlap buys and costs (docs/METRICS.md).
#pragma once

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/metrics.h"
#include "analysis/waiting.h"
#include "experiment/workload.h"
#include "power/power.h"

namespace tandem {

struct CharacterizeOptions {
  int warmup = 2;                 // iterations run and dropped from every scenario
  int iterations = 25;            // measured iterations per scenario (the paper averaged 25 runs)
  PowerSampler* power = nullptr;  // sampled around each scenario when available
  Job* job = nullptr;             // where the ranks run; null: threads of this process
  std::function<void(Scenario)> on_scenario;  // called before each scenario starts
};

struct ScenarioRun {
  Scenario scenario = Scenario::kOverlapped;
  Timeline timeline;
  std::vector<StepMetrics> steps;  // measured iterations only
  std::vector<PowerSummary> power;  // over the measured iterations
  int power_iterations = 0;         // how many iterations `power` spans
  std::vector<PowerSample> power_samples;
  std::int64_t wall_ns = 0;

  double energy_per_iteration(const PowerSummary& p) const {
    return p.energy_joules / std::max(1, power_iterations);
  }
};

struct Characterization {
  std::string description;
  nlohmann::json config;
  std::vector<ScenarioRun> runs;  // in kAllScenarios order
  ScenarioMetrics metrics;
  // The overlapped scenario's blocked time split into skew and transfer over its measured
  // iterations (analysis/waiting.h), and how far the ranks' clocks agree for it.
  WaitingAnalysis waiting;
  int warmup = 0;
  int iterations = 0;

  const ScenarioRun& run(Scenario scenario) const;
};

// Runs the four scenarios on every rank of options.job. In a process job every rank calls
// it; the leader's result holds the measurements, the others' only description and config.
Characterization characterize(Workload& workload, const CharacterizeOptions& options);

// What overlap does to a power source's draw, from the measured iterations of three
// scenarios (docs/METRICS.md, "Power"): NaN where a denominator is 0.
struct PowerOverlap {
  std::string source;
  double extra_peak = 0;            // overlapped's peak / compute-only's − 1
  double extra_average = 0;         // the same for the average
  double energy_vs_sequential = 0;  // overlapped's energy per iteration / sequential's
};
std::vector<PowerOverlap> power_overlap(const Characterization& c);
// The lines printed after the metrics on the overlapped scenario's waiting ("" when
// nothing was blocked).
std::string format_waiting_lines(const Characterization& c);
// The power table printed after the metrics (empty without power).
std::string format_power_table(const Characterization& c);

// Everything but the timelines (schema in docs/CHARACTERIZE.md).
nlohmann::json to_json(const Characterization& c);
// Rows of iterations.csv for one configuration (no header).
std::string iterations_csv_rows(const std::string& point_id, const Characterization& c);
inline constexpr const char* kIterationsCsvHeader =
    "point,scenario,step,ranks,e2e_ns,t_comp_ns,t_comm_ns,t_ovl_ns,t_wait_ns,t_exposed_comm_ns,"
    "t_other_ns,bytes\n";

}  // namespace tandem
