// Reading a results directory back for the report. summary.json's header
// (report/summary_header.h) says which command wrote it, and so the layout:
//   characterize: "points", points/<id>/*.trace.json
//   train:        "config", trace.json
//   analyze:      "inputs", "steps", "iterations", "metrics", trace.json
// Everything is validated here so that a missing or damaged directory is one UsageError
// naming the file, never a crash or a half-drawn page.
#pragma once

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/metrics.h"
#include "report/html/charts.h"
#include "report/summary_header.h"
#include "timeline/recorder.h"

namespace tandem::html {

struct PointResult {
  std::string id;
  std::string label;    // "strategy=chunked:5 batch=32", or the description for no sweep
  nlohmann::json json;  // the point's entry of summary.json (result.json's content)
};

struct Results {
  ResultsCommand command = ResultsCommand::kCharacterize;  // from the summary's header
  std::filesystem::path dir;                               // where it is read from
  std::filesystem::path shown;  // how the page names it (ReportOptions::shown_as, else dir)
  nlohmann::json summary;
  std::vector<PointResult> points;  // characterize: in grid order
};

// Throws UsageError("<path>: ...") for a missing directory, a missing or unparsable
// summary.json, a summary without the header or of an unknown schema or command, or a
// body that is not the layout its command writes.
Results load_results(const std::filesystem::path& dir);

// median / p10 / p90 / mean of a metric summary object ({"median": ..}); null -> NaN.
struct Stat {
  double median = NAN, p10 = NAN, p90 = NAN, mean = NAN;
};
Stat stat_of(const nlohmann::json& summaries, const std::string& key);
// The same for a scenario metric, found under its catalogue key.
Stat stat_of(const nlohmann::json& metrics, Summary ScenarioMetrics::*field);

// A trace file: its spans and its counter tracks (power, in watts, absolute ns).
struct LoadedTrace {
  Timeline timeline;
  std::vector<PowerTrack> power;
};
// nullopt when the file does not exist; UsageError naming it when it is unreadable.
std::optional<LoadedTrace> load_trace(const std::filesystem::path& path);

}  // namespace tandem::html
