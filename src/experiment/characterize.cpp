#include "experiment/characterize.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/clock.h"
#include "core/error.h"

namespace tandem {

const ScenarioRun& Characterization::run(Scenario scenario) const {
  for (const auto& r : runs) {
    if (r.scenario == scenario) return r;
  }
  TANDEM_CHECK(false && "scenario not run");
}

namespace {

// Where the point ran, in its config as train's summary says it (backend, hosts,
// ranks_per_host, clock_uncertainty_ns). A key the workload states itself wins (a device
// microbenchmark names its device communicator); the runs fill in the others.
void add_placement(nlohmann::json& config, const RunPlacement& where,
                   std::int64_t clock_uncertainty_ns) {
  const nlohmann::json placement = {
      {"backend", where.backend},
      {"backend_details", where.backend_details},
      {"hosts", where.hosts},
      {"ranks_per_host", where.ranks_per_host > 0 ? where.ranks_per_host : where.ranks},
      {"clock_uncertainty_ns", clock_uncertainty_ns}};
  for (const auto& [key, value] : placement.items()) {
    if (!config.contains(key)) config[key] = value;
  }
}

}  // namespace

Characterization characterize(Workload& workload, const CharacterizeOptions& options) {
  if (options.iterations < 1) throw UsageError("--iterations must be >= 1");
  if (options.warmup < 0) throw UsageError("--warmup must be >= 0");
  std::optional<Job> threads;
  Job& job = options.job != nullptr ? *options.job : threads.emplace("local", BackendOptions{});
  Characterization out;
  out.warmup = options.warmup;
  out.iterations = options.iterations;
  const int steps = options.warmup + options.iterations;
  std::int64_t clock_uncertainty_ns = 0;
  for (Scenario scenario : kAllScenarios) {
    if (options.on_scenario) options.on_scenario(scenario);
    ScenarioRun run{.scenario = scenario};
    const bool sample_power = options.power && options.power->available();
    if (sample_power) options.power->start();
    const std::int64_t t0 = now_ns();
    run.timeline = workload.run(job, scenario, steps);
    run.wall_ns = now_ns() - t0;
    clock_uncertainty_ns = std::max(clock_uncertainty_ns, job.last_run().clock_uncertainty_ns);
    if (sample_power) {
      run.power = options.power->stop();
      run.power_samples = options.power->samples();
    }
    out.runs.push_back(std::move(run));
  }
  out.description = workload.describe();
  out.config = workload.config_json();
  add_placement(out.config, job.last_run(), clock_uncertainty_ns);
  // Only the leader holds the timelines (engine/launch.h): on the other processes of a
  // job there is nothing to measure.
  if (!job.leader()) return out;
  for (ScenarioRun& run : out.runs) {
    run.steps = drop_warmup(compute_step_metrics(run.timeline), options.warmup);
  }
  out.metrics = compute_scenario_metrics(
      scenario_inputs(out.run(Scenario::kComputeOnly).steps, out.run(Scenario::kCommOnly).steps,
                      out.run(Scenario::kSequential).steps, out.run(Scenario::kOverlapped).steps));
  return out;
}

nlohmann::json to_json(const Characterization& c) {
  nlohmann::json scenarios = nlohmann::json::object();
  for (const auto& run : c.runs) {
    nlohmann::json power = nlohmann::json::array();
    for (const auto& p : run.power) {
      nlohmann::json j = p;
      j["energy_per_iteration_joules"] = p.energy_joules / (c.warmup + c.iterations);
      power.push_back(j);
    }
    scenarios[std::string(to_string(run.scenario))] = {
        {"steps", run.steps},
        {"wall_ns", run.wall_ns},
        {"power", run.power.empty() ? nlohmann::json("unavailable") : power}};
  }
  return {{"description", c.description}, {"config", c.config},   {"warmup", c.warmup},
          {"iterations", c.iterations},   {"metrics", c.metrics}, {"scenarios", scenarios}};
}

std::string iterations_csv_rows(const std::string& point_id, const Characterization& c) {
  std::string csv;
  char row[400];
  for (const auto& run : c.runs) {
    for (const auto& s : run.steps) {
      std::snprintf(row, sizeof row, "%s,%s,%d,%d,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f\n",
                    point_id.c_str(), std::string(to_string(run.scenario)).c_str(), s.step, s.ranks,
                    s.e2e_ns, s.t_comp_ns, s.t_comm_ns, s.t_ovl_ns, s.t_wait_ns,
                    s.t_exposed_comm_ns, s.t_other_ns, s.bytes);
      csv += row;
    }
  }
  return csv;
}

}  // namespace tandem
