#include "experiment/characterize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "analysis/metric_catalogue.h"
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
      {"binding", where.binding},
      {"hosts", where.hosts},
      {"ranks_per_host", where.ranks_per_host > 0 ? where.ranks_per_host : where.ranks},
      {"clock_uncertainty_ns", clock_uncertainty_ns}};
  for (const auto& [key, value] : placement.items()) {
    if (!config.contains(key)) config[key] = value;
  }
}

// The measured iterations' span on the spans' clock: from the first span of an iteration
// after warm-up to the last span's end ({0, 0} without one).
std::pair<std::int64_t, std::int64_t> measured_span(const Timeline& timeline, int warmup) {
  std::int64_t begin = std::numeric_limits<std::int64_t>::max();
  std::int64_t end = std::numeric_limits<std::int64_t>::min();
  for (const Span& s : timeline.spans) {
    if (s.step < warmup) continue;
    begin = std::min(begin, s.start_ns);
    end = std::max(end, s.end_ns);
  }
  if (begin > end) return {0, 0};
  return {begin, end};
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
      // Power over the measured iterations only: the setup before them (buffers, CUPTI,
      // the first kernels' loading) draws power too (docs/METRICS.md, "Power").
      const auto [begin, end] = measured_span(run.timeline, options.warmup);
      run.power_iterations = steps;
      if (begin < end) {
        run.power = options.power->summarize(begin, end);
        run.power_iterations = options.iterations;
      }
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
  out.waiting = explain_waiting(out.run(Scenario::kOverlapped).timeline, options.warmup);
  out.waiting.clocks = clocks_note(clock_uncertainty_ns,
                                   out.config.value("timing_source", std::string()) == "simulated");
  return out;
}

std::string format_waiting_lines(const Characterization& c) {
  const std::string lines = format_waiting(c.waiting, "  ");
  return lines.empty() ? ""
                       : "blocked waiting in the overlapped scenario, per iteration:\n" + lines;
}

std::vector<PowerOverlap> power_overlap(const Characterization& c) {
  std::vector<PowerOverlap> out;
  if (c.runs.size() != kAllScenarios.size()) return out;
  const ScenarioRun& compute = c.run(Scenario::kComputeOnly);
  const ScenarioRun& sequential = c.run(Scenario::kSequential);
  const ScenarioRun& overlapped = c.run(Scenario::kOverlapped);
  const std::size_t n =
      std::min({compute.power.size(), sequential.power.size(), overlapped.power.size()});
  for (std::size_t s = 0; s < n; ++s) {
    const double peak_compute = compute.power[s].peak_watts;
    const double avg_compute = compute.power[s].average_watts;
    const double seq_energy = sequential.energy_per_iteration(sequential.power[s]);
    out.push_back(
        {.source = overlapped.power[s].source,
         .extra_peak = peak_compute > 0 ? overlapped.power[s].peak_watts / peak_compute - 1 : NAN,
         .extra_average =
             avg_compute > 0 ? overlapped.power[s].average_watts / avg_compute - 1 : NAN,
         .energy_vs_sequential =
             seq_energy > 0 ? overlapped.energy_per_iteration(overlapped.power[s]) / seq_energy
                            : NAN});
  }
  return out;
}

std::string format_power_table(const Characterization& c) {
  std::string text;
  char line[256];
  double worst = 0;  // the coarsest energy resolution of a row
  for (const ScenarioRun& run : c.runs) {
    for (const PowerSummary& p : run.power) {
      if (text.empty()) {
        text = "  power over the measured iterations   average W     peak W   J/iteration  "
               "resolution\n";
      }
      char resolution[16] = "n/a";
      if (p.resolution) {
        std::snprintf(resolution, sizeof resolution, "+-%.0f%%", 100 * *p.resolution);
        worst = std::max(worst, *p.resolution);
      }
      std::snprintf(line, sizeof line, "  %-13s %-22.22s %9.1f %10.1f %13.3f  %10s\n",
                    std::string(to_string(run.scenario)).c_str(), p.source.c_str(), p.average_watts,
                    p.peak_watts, run.energy_per_iteration(p), resolution);
      text += line;
    }
  }
  if (worst > 0.1) {
    std::snprintf(line, sizeof line,
                  "  warning: a scenario's iterations span under ten steps of its energy counter "
                  "(+-%.0f%%): more --iterations measure power better\n",
                  100 * worst);
    text += line;
  }
  auto percent = [](double v) {
    char out[32];
    std::snprintf(out, sizeof out, "%+.1f%%", 100 * v);
    return std::isfinite(v) ? std::string(out) : std::string("n/a");
  };
  for (const PowerOverlap& o : power_overlap(c)) {
    char ratio[32] = "n/a";
    if (std::isfinite(o.energy_vs_sequential)) {
      std::snprintf(ratio, sizeof ratio, "%.2fx", o.energy_vs_sequential);
    }
    text += "  " + o.source + ": overlapped vs compute-only peak " + percent(o.extra_peak) +
            ", average " + percent(o.extra_average) + "; energy per iteration " + ratio +
            " sequential's\n";
  }
  return text;
}

nlohmann::json to_json(const Characterization& c) {
  nlohmann::json scenarios = nlohmann::json::object();
  for (const auto& run : c.runs) {
    nlohmann::json power = nlohmann::json::array();
    for (const auto& p : run.power) {
      nlohmann::json j = p;
      j["energy_per_iteration_joules"] = run.energy_per_iteration(p);
      power.push_back(j);
    }
    scenarios[std::string(to_string(run.scenario))] = {
        {"steps", run.steps},
        {"wall_ns", run.wall_ns},
        {"power", run.power.empty() ? nlohmann::json("unavailable") : power}};
  }
  nlohmann::json overlap = nlohmann::json::array();
  for (const PowerOverlap& o : power_overlap(c)) {
    overlap.push_back({{"source", o.source},
                       {"extra_peak", number_or_null(o.extra_peak)},
                       {"extra_average", number_or_null(o.extra_average)},
                       {"energy_vs_sequential", number_or_null(o.energy_vs_sequential)}});
  }
  return {{"description", c.description}, {"config", c.config},
          {"warmup", c.warmup},           {"iterations", c.iterations},
          {"metrics", c.metrics},         {"story", overlap_story(c.metrics)},
          {"scenarios", scenarios},       {"waiting", waiting_json(c.waiting)},
          {"power_overlap", overlap}};
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
