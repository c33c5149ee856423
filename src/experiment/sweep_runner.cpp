#include "experiment/sweep_runner.h"

#include "core/files.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {

fs::path trace_path(const std::string& id, Scenario scenario) {
  return fs::path("points") / id / (std::string(to_string(scenario)) + ".trace.json");
}

// Every scenario's timeline, with its power samples as counter tracks.
void write_point_traces(const ResultsWriter& results, const std::string& id,
                        const Characterization& c) {
  for (const ScenarioRun& run : c.runs) {
    ChromeTraceOptions options{
        .other_data = {{"scenario", to_string(run.scenario)}, {"config", c.config}}};
    for (std::size_t s = 0; s < run.power.size() && !run.power_samples.empty(); ++s) {
      CounterTrack track{.name = "power " + run.power[s].source, .series = "watts"};
      for (const PowerSample& sample : run.power_samples) {
        if (sample.source == static_cast<int>(s))
          track.samples.push_back({sample.t_ns, sample.watts});
      }
      options.counters.push_back(std::move(track));
    }
    results.write_trace(trace_path(id, run.scenario), run.timeline, options);
  }
}

// points/<id>/result.json: the point's entry of summary.json, plus its iterations.csv rows.
nlohmann::json point_result(const SweepPoint& point, const std::string& id,
                            const Characterization& c) {
  nlohmann::json result = to_json(c);
  result["id"] = id;
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [key, value] : point) params[key] = value;
  result["params"] = params;
  result["iterations_csv"] = iterations_csv_rows(id, c);
  return result;
}

// summary.json, iterations.csv and trace.json (the first finished point's overlapped
// scenario) from every finished point, in grid order.
void rebuild_outputs(const ResultsWriter& results, const std::vector<std::string>& ids,
                     const std::vector<SweepAxis>& axes) {
  nlohmann::json axes_json = nlohmann::json::array();
  for (const SweepAxis& a : axes) axes_json.push_back({{"key", a.key}, {"values", a.values}});
  std::string csv = kIterationsCsvHeader;
  nlohmann::json points = nlohmann::json::array();
  for (nlohmann::json& p : results.load_points(ids)) {
    csv += p["iterations_csv"].get<std::string>();
    p.erase("iterations_csv");
    points.push_back(std::move(p));
  }
  results.write_summary({{"sweep", axes_json}, {"points_total", ids.size()}, {"points", points}});
  results.write("iterations.csv", csv);
  for (const std::string& id : ids) {
    const fs::path trace = results.working_path() / trace_path(id, Scenario::kOverlapped);
    std::error_code ec;
    if (results.finished_points().count(id) && fs::exists(trace, ec)) {
      results.write("trace.json", read_file(trace));
      break;
    }
  }
}

}  // namespace

SweepOutcome run_sweep(std::span<SweepItem> jobs, const SweepOptions& options,
                       ResultsWriter* results, SweepObserver* observer) {
  std::vector<std::string> ids;
  for (const SweepItem& job : jobs) ids.push_back(point_id(job.point));
  SweepOutcome outcome;
  for (const std::string& id : ids) outcome.skipped += options.finished.count(id);
  if (observer) observer->sweep_started(jobs.size(), outcome.skipped);

  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (options.finished.count(ids[i])) continue;
    const SweepPoint& point = jobs[i].point;
    CharacterizeOptions run{.warmup = options.warmup,
                            .iterations = options.iterations,
                            .power = options.power,
                            .job = options.job,
                            .on_scenario = {}};
    if (observer) {
      run.on_scenario = [&](Scenario s) { observer->scenario_started(i, point, s); };
    }
    if (options.before_point) options.before_point(point);
    Characterization c = characterize(*jobs[i].workload, run);
    if (results) {
      write_point_traces(*results, ids[i], c);
      results->commit_point(ids[i], point_result(point, ids[i], c));
      rebuild_outputs(*results, ids, options.axes);
    }
    if (observer) observer->point_finished(i, point, c);
    ++outcome.ran;
    outcome.last = std::move(c);
  }
  // Nothing ran (a finished sweep resumed): the summary is still rewritten, with today's
  // header (docs/REPORT.md: that is how a schema-1 sweep is upgraded).
  if (results && outcome.ran == 0) rebuild_outputs(*results, ids, options.axes);
  return outcome;
}

}  // namespace tandem
