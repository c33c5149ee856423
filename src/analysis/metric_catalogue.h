// The one list of the scenario metrics (ScenarioMetrics): for each, the label people read,
// the JSON key, the unit, its definition and where its value lives. Everything that shows
// or writes these metrics iterates this table (metrics.cpp's JSON and summaries, the
// terminal table of characterize and analyze, the HTML report), so a metric is added,
// renamed or reworded here and nowhere else. The rules behind the definitions are in
// metrics.h and docs/METRICS.md; equation numbers are docs/METRICS.md's.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/metrics.h"

namespace tandem {

enum class MetricUnit : std::uint8_t {
  kNanoseconds,  // a time; shown in milliseconds
  kFraction,     // a share or a relative change (0.25); shown as a percentage
  kRatio,        // a dimensionless ratio; shown as is
};
std::string_view to_string(MetricUnit unit);  // "ns", "fraction", "ratio"

// One row. Exactly one of `input` and `derived` is set: a measured metric summarizes its
// scenario's series, a derived one summarizes derive()'s value over the overlapped
// iterations (the per-iteration vs median rule of compute_scenario_metrics).
struct MetricDef {
  std::string_view key;         // JSON key under "metrics": "compute_slowdown"
  std::string_view label;       // terminal and HTML row: "compute slowdown S (eq. 1)"
  MetricUnit unit;              //
  std::string_view definition;  // "(T_comp_ovl - T_comp_iso) / T_comp_iso"
  Summary ScenarioMetrics::*summary;
  std::vector<double> ScenarioInputs::*input = nullptr;
  double DerivedMetrics::*derived = nullptr;
};

// Every ScenarioMetrics field once, in the order tables show them.
std::span<const MetricDef> metric_catalogue();
// The row of a field (a broken invariant if the field has none).
const MetricDef& metric_def(Summary ScenarioMetrics::*summary);

// One value as tables show it: "12.345 ms", "42.1%", "0.123"; "n/a" when undefined.
std::string format_metric(double value, MetricUnit unit);

// The metrics table of characterize and analyze: a row per catalogue entry with its
// median, p10 and p90.
std::string format_metrics_table(const ScenarioMetrics& m);
// The four scenarios in two sentences, from the medians: what overlap hid and saved
// against sequential, and what contention cost against ideal; "" where one is undefined.
std::string overlap_story(const ScenarioMetrics& m);

}  // namespace tandem
