// Internal to the report: the pieces report.cpp and the page kinds (characterize_page.cpp,
// train_page.cpp, analyze_page.cpp) share.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "report/html/charts.h"
#include "report/html/report.h"
#include "report/html/results.h"
#include "timeline/recorder.h"

namespace tandem::html {

// The Gantt input for one step of a timeline: the first `max_ranks` ranks, their compute,
// comm and wait spans of that step, and each rank's overlapped intervals.
// `ranks_total` receives how many ranks the timeline has spans for.
GanttInput gantt_for_step(const Timeline& timeline, int step, int max_ranks,
                          const std::string& label, int& ranks_total);
// ∪compute ∩ ∪comm per rank, united over ranks (the power chart's shading).
IntervalSet overlap_any_rank(const Timeline& timeline);
// "ranks 0-7 of 32 drawn" style note, or "" when every rank is drawn.
std::string ranks_note(const GanttInput& gantt, int ranks_total);

// summary.json's "waiting" (analysis/waiting.h) as a section: the split of the blocked time
// into skew and transfer per rank and per collective kind, and who arrived last; "" when
// the summary has none. `scope` follows "blocked on communication" (" in the overlapped
// scenario").
std::string waiting_section(const nlohmann::json& waiting, const std::string& scope = "");

// A replay's what-if (tandem simulate --from-trace --what-if, docs/SIMULATE.md): the run
// as replayed, `gantt` its step `step` (from replayed.trace.json), drawn below the
// what-if's timeline, with the three step times of summary.json's "simulated".
std::string replay_section(const nlohmann::json& summary, const GanttInput& gantt, int step);

std::string config_table(const nlohmann::json& config);
std::string machine_table(const nlohmann::json& machine, const std::string& created);

// The metrics of one configuration (ScenarioMetrics as JSON), a row per metric_catalogue()
// entry as in the terminal table: median, p10, p90, mean and the definition.
std::string metric_rows_table(const nlohmann::json& metrics);

std::string characterize_body(const Results& results, const ReportOptions& options);
std::string train_body(const Results& results, const ReportOptions& options);
std::string analyze_body(const Results& results, const ReportOptions& options);
std::string tune_body(const Results& results, const ReportOptions& options);

}  // namespace tandem::html
