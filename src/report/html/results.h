// Reading a results directory back for the report: the layout of
// `tandem characterize --out DIR` (summary.json with "points", points/<id>/*.trace.json)
// or of `tandem train --out DIR` (summary.json with "config", trace.json), or of
// `tandem analyze --out DIR` (summary.json with "command": "analyze", trace.json). Everything is
// validated here so that a missing or damaged directory is one UsageError naming the
// file, never a crash or a half-drawn page.
#pragma once

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/metrics.h"
#include "report/html/charts.h"
#include "timeline/recorder.h"

namespace tandem::html {

enum class ResultsKind { kCharacterize, kTrain, kAnalyze };

struct PointResult {
  std::string id;
  std::string label;    // "strategy=chunked:5 batch=32", or the description for no sweep
  nlohmann::json json;  // the point's entry of summary.json (result.json's content)
};

struct Results {
  ResultsKind kind = ResultsKind::kCharacterize;
  std::filesystem::path dir;
  nlohmann::json summary;
  std::vector<PointResult> points;  // characterize: in grid order
};

// Throws UsageError("<path>: ...") for a missing directory, a missing or unparsable
// summary.json, an unknown version or layout, or malformed points.
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
