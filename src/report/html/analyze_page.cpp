// The page of a `tandem analyze --out` directory: someone else's job seen through the
// same metrics, so the timeline of one iteration, where each iteration goes, per-rank
// numbers, the metrics table and where the spans came from.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "report/html/page.h"
#include "report/html/sections.h"
#include "trace_import/trace_import.h"

namespace tandem::html {

namespace {

using nlohmann::json;

constexpr std::size_t kMaxIterationRows = 40;
constexpr std::size_t kMaxRankRows = 64;

double number(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

// The iteration drawn: --iteration if given (it must be one of the analysed ones), else
// the one whose E2E is the median.
int choose_iteration(const json& steps, const ReportOptions& options) {
  std::vector<std::pair<double, int>> by_e2e;
  for (const json& s : steps) {
    if (s.contains("step") && s["step"].is_number_integer()) {
      by_e2e.emplace_back(number(s, "e2e_ns"), s["step"].get<int>());
    }
  }
  if (options.iteration) {
    for (const auto& [e2e, step] : by_e2e) {
      if (step == *options.iteration) return step;
    }
    throw UsageError("--iteration " + std::to_string(*options.iteration) +
                     ": not an analysed iteration of this directory (" +
                     std::to_string(by_e2e.size()) + " iterations)");
  }
  if (by_e2e.empty()) return -1;
  std::sort(by_e2e.begin(), by_e2e.end());
  return by_e2e[(by_e2e.size() - 1) / 2].second;
}

std::string timeline(const Results& r, const json& steps, const ReportOptions& options) {
  const int step = choose_iteration(steps, options);
  const std::filesystem::path path = r.dir / "trace.json";
  std::error_code ec;
  if (step < 0) return note("no analysed iteration");
  if (!std::filesystem::exists(path, ec)) return note("no trace.json in this directory");
  // The merged trace of a large profile can be hundreds of MB: read it with the streaming
  // importer (spans only), not as a JSON document.
  const ImportResult imported = import_traces({path.string()});
  int total = 0;
  const GanttInput g = gantt_for_step(imported.timeline, step, options.max_ranks,
                                      "iteration " + std::to_string(step), total);
  if (g.ranks.empty()) return note("trace.json has no spans of iteration " + std::to_string(step));
  std::string caption = "Iteration " + std::to_string(step) +
                        (options.iteration ? "" : " (the median one)") +
                        ": GPU kernels (or CPU spans) per rank; hover a bar for its name, "
                        "duration and bytes.";
  const std::string ranks = ranks_note(g, total);
  if (!ranks.empty()) caption += " " + ranks + ".";
  return figure(gantt_chart(g), caption);
}

std::string breakdown(const json& steps) {
  std::vector<StackRow> rows;
  for (const json& s : steps) {
    if (rows.size() == kMaxIterationRows) break;
    const double comp = number(s, "t_comp_ns");
    const double exposed = number(s, "t_exposed_comm_ns");
    const double hidden = number(s, "t_ovl_ns");
    const double other = number(s, "t_other_ns");
    rows.push_back({"iteration " + json(s.value("step", -1)).dump(),
                    {comp, exposed, hidden, std::isfinite(other) ? other : 0.0}});
  }
  if (rows.empty()) return note("no analysed iteration");
  return figure(stacked_bar_chart({{"compute", "f-comp"},
                                   {"exposed communication", "f-exposed"},
                                   {"hidden communication", "f-hidden"},
                                   {"idle", "f-idle"}},
                                  rows, "time per iteration, mean over ranks (ms)", 1e6,
                                  "compute, exposed and hidden communication, idle per iteration"),
                steps.size() > kMaxIterationRows
                    ? "The first " + std::to_string(kMaxIterationRows) + " of " +
                          std::to_string(steps.size()) + " iterations."
                    : "");
}

std::string per_rank(const json& iterations) {
  struct Sums {
    double comp = 0, comm = 0, ovl = 0, exposed = 0, e2e = 0;
    int n = 0;
  };
  std::map<int, Sums> by_rank;
  for (const json& it : iterations) {
    Sums& s = by_rank[it.value("rank", -1)];
    s.comp += number(it, "t_comp_ns");
    s.comm += number(it, "t_comm_ns");
    s.ovl += number(it, "t_ovl_ns");
    s.exposed += number(it, "t_exposed_comm_ns");
    s.e2e += number(it, "e2e_ns");
    ++s.n;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [rank, s] : by_rank) {
    if (rows.size() == kMaxRankRows) break;
    const double n = s.n;
    rows.push_back({std::to_string(rank), std::to_string(s.n), format_ms(s.e2e / n),
                    format_ms(s.comp / n), format_ms(s.comm / n), format_ms(s.ovl / n),
                    format_ms(s.exposed / n), format_percent(s.comm > 0 ? s.ovl / s.comm : NAN)});
  }
  std::string out = "<div class=\"scroll\">" +
                    table({"rank", "iterations", "iteration time", "compute", "communication",
                           "overlapped", "exposed comm", "hidden share"},
                          rows) +
                    "</div>";
  if (by_rank.size() > kMaxRankRows) {
    out += note("The first " + std::to_string(kMaxRankRows) + " of " +
                std::to_string(by_rank.size()) + " ranks; iterations.csv has them all.");
  }
  return out;
}

std::string inputs_table(const json& inputs) {
  std::vector<std::vector<std::string>> rows;
  for (const json& f : inputs) {
    auto count = [&](const char* key) { return json(f.value(key, 0)).dump(); };
    const json rank = f.value("rank", json());
    rows.push_back({f.value("path", std::string("?")), f.value("format", std::string("?")),
                    rank.is_number() ? rank.dump() : std::string("from the trace"),
                    f.value("rank_source", std::string("?")), count("compute_spans"),
                    count("comm_spans"), count("memory_spans"), count("ignored_events"),
                    count("step_windows")});
  }
  return "<div class=\"scroll\">" +
         table({"file", "format", "rank", "rank from", "compute", "comm", "memory", "unmatched",
                "ProfilerStep windows"},
               rows) +
         "</div>";
}

}  // namespace

std::string analyze_body(const Results& r, const ReportOptions& options) {
  const json& s = r.summary;
  const json& steps = s["steps"];
  const json& inputs = s["inputs"];
  const bool has_baseline = s.contains("baseline_inputs") && s["baseline_inputs"].is_array();
  int ranks = 0;
  for (const json& st : steps) ranks = std::max(ranks, st.value("ranks", 0));

  std::string body =
      "<h1>tandem analyze: " +
      escape(std::to_string(inputs.size()) + " trace file" + (inputs.size() == 1 ? "" : "s") +
             ", " + std::to_string(ranks) + " rank" + (ranks == 1 ? "" : "s")) +
      "</h1>";
  body += "<p class=\"sub\">" +
          escape(std::to_string(steps.size()) + " iterations analysed after " +
                 json(s.value("warmup", 0)).dump() + " warm-up · " +
                 (has_baseline ? "with a compute-only baseline" : "no baseline") + " · " +
                 r.shown.string()) +
          "</p>";
  auto med = [&](const char* key) {
    const double ms = stat_of(s, key).median;
    return std::isfinite(ms) ? format_ms(ms * 1e6) : std::string("n/a");
  };
  body += cards({{"iteration time (median)", med("e2e_ms")},
                 {"compute per iteration", med("compute_ms")},
                 {"communication per iteration", med("comm_ms")},
                 {"overlapped per iteration", med("overlap_ms")},
                 {"exposed communication", med("exposed_comm_ms")},
                 {"hidden share of comm", format_percent(number(s, "hidden_share"))}});

  body += section("timeline", "Timeline of one iteration",
                  "Per rank: compute and communication kernels. Hatching marks time when "
                  "both ran at once.",
                  timeline(r, steps, options));
  body += section("breakdown", "Where each iteration goes",
                  "Per iteration (mean over ranks): compute, communication left exposed, "
                  "communication hidden behind compute, and time with neither.",
                  breakdown(steps));
  body += section("ranks", "Per rank", "Means over the analysed iterations.",
                  per_rank(s["iterations"]));
  body += section("metrics", "Metrics",
                  std::string("The same definitions as tandem characterize (docs/METRICS.md); "
                              "a profile has no comm-only or sequential run, so those rows "
                              "read n/a.") +
                      (has_baseline ? " The baseline traces give T_comp_iso, the compute "
                                      "slowdown and the ideal time."
                                    : " Pass --baseline (the job with communication off) "
                                      "for the compute slowdown and the ideal time."),
                  metric_rows_table(s["metrics"]));
  std::string sources = inputs_table(inputs);
  if (has_baseline) sources += "<h3>Baseline</h3>" + inputs_table(s["baseline_inputs"]);
  if (s.contains("classification") && s["classification"].is_object()) {
    std::vector<std::vector<std::string>> rules;
    for (const auto& [key, value] : s["classification"].items()) {
      rules.push_back({key, value.is_string() ? value.get<std::string>() : "all others"});
    }
    sources += "<h3>Classification</h3>" + table({"rule", "regex"}, rules);
  }
  body += section("inputs", "Traces", "", sources);
  return body;
}

}  // namespace tandem::html
