// The page of a `tandem analyze --out` directory: someone else's job seen through the
// same metrics, so the timeline of one iteration, where each iteration goes, per-rank
// numbers, the metrics table and where the spans came from.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/parse.h"
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

// j[key], or null when j is not an object or lacks it (summary.json may be old or edited).
const json& field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// A JSON number as text with `format`, "n/a" for null or absent.
std::string num(const json& j, const char* key, const char* format, double scale = 1) {
  const json& v = field(j, key);
  if (!v.is_number()) return "n/a";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v.get<double>() * scale);
  return buf;
}

// j[key] if it is a string, else "?".
std::string text(const json& j, const char* key) {
  const json& v = field(j, key);
  return v.is_string() ? v.get<std::string>() : std::string("?");
}

std::string bytes_text(const json& j) {
  const json& v = field(j, "bytes");
  return v.is_number() ? format_bytes(v.get<double>()) : std::string("?");
}

// HTA's per-rank numbers (summary.json "ranks").
std::string hta_ranks(const json& ranks) {
  std::vector<std::vector<std::string>> rows;
  for (const json& k : ranks) {
    if (rows.size() == kMaxRankRows) break;
    if (!k.is_object()) continue;
    rows.push_back({num(k, "rank", "%.0f"),
                    field(k, "device").is_number() ? field(k, "device").dump() : "-",
                    num(k, "hidden_share_pct", "%.2f%%"), num(k, "hidden_share_pct_all_steps", "%.2f%%"),
                    num(k, "compute_ms", "%.3f ms"), num(k, "comm_ms", "%.3f ms"),
                    num(k, "overlap_ms", "%.3f ms"), num(k, "idle_ms", "%.3f ms")});
  }
  return "<div class=\"scroll\">" +
         table({"rank", "device", "hidden (HTA)", "hidden, last step kept", "compute",
                "communication", "overlapped", "idle"},
               rows) +
         "</div>";
}

std::string collectives(const json& rows_json) {
  std::vector<std::vector<std::string>> rows;
  for (const json& c : rows_json) {
    if (rows.size() == 30) break;
    if (!c.is_object()) continue;
    const double count = number(c, "count");
    rows.push_back({text(c, "collective"), bytes_text(c),
                    field(c, "group_size").is_number() ? field(c, "group_size").dump() : "?",
                    field(c, "dtype").is_string() ? field(c, "dtype").get<std::string>() : "?",
                    num(c, "count", "%.0f"), num(c, "time_ns", "%.3f ms", 1e-6),
                    count > 0 ? format_ms(number(c, "time_ns") / count) : "n/a",
                    format_percent(field(c, "hidden_share").is_number() ? field(c, "hidden_share").get<double>() : NAN),
                    num(c, "algbw_GBps", "%.2f"), num(c, "busbw_GBps", "%.2f")});
  }
  std::string out = "<div class=\"scroll\">" +
                    table({"collective", "size", "group", "dtype", "count", "time", "mean",
                           "hidden", "algbw GB/s", "busbw GB/s"},
                          rows) +
                    "</div>";
  if (rows_json.size() > rows.size()) {
    out += note("The first " + std::to_string(rows.size()) + " of " +
                std::to_string(rows_json.size()) + " rows; collectives.csv has them all.");
  }
  return out;
}

std::string slowed_kernels(const json& k) {
  std::vector<std::vector<std::string>> rows;
  for (const json& s : field(k, "kernels")) {
    if (rows.size() == 20) break;
    if (!s.is_object()) continue;
    std::string over;
    for (const json& c : field(s, "collectives")) {
      if (!c.is_object()) continue;
      if (!over.empty()) over += ", ";
      over += text(c, "collective") + " " + bytes_text(c) + " (" +
              format_ms(number(c, "overlap_ns")) + ")";
    }
    rows.push_back({text(s, "name"), num(s, "count", "%.0f"),
                    num(s, "alone_ns", "%.3f ms", 1e-6), num(s, "overlapped_ns", "%.3f ms", 1e-6),
                    num(s, "slowdown", "%+.1f%%", 100), over.empty() ? "-" : over});
  }
  return "<div class=\"scroll\">" +
         table({"kernel", "matched", "alone", "under overlap", "slowdown",
                "collectives running over it"},
               rows) +
         "</div>" +
         note(num(k, "unmatched_run", "%.0f") + " occurrences only in the run, " +
              num(k, "unmatched_baseline", "%.0f") +
              " only in the baseline (not compared); kernels.csv has every kernel.");
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
  // A profile's replay with a what-if (tandem simulate --from-trace TRACES --what-if): the
  // profile as replayed, below the what-if's timeline.
  const std::filesystem::path replayed = r.dir / "replayed.trace.json";
  std::error_code ec;
  if (const int step = choose_iteration(steps, options);
      step >= 0 && std::filesystem::exists(replayed, ec)) {
    int total = 0;
    const GanttInput g =
        gantt_for_step(import_traces({replayed.string()}).timeline, step, options.max_ranks,
                       "iteration " + std::to_string(step), total);
    body += replay_section(s, g, step);
  }
  body += section("breakdown", "Where each iteration goes",
                  "Per iteration (mean over ranks): compute, communication left exposed, "
                  "communication hidden behind compute, and time with neither.",
                  breakdown(steps));
  body += section("ranks", "Per rank", "Means over the analysed iterations.",
                  per_rank(s["iterations"]));
  if (s.contains("waiting")) body += waiting_section(s["waiting"]);
  if (s.contains("ranks") && s["ranks"].is_array() && !s["ranks"].empty()) {
    body += section("hta", "Per rank, as HTA",
                    "Holistic Trace Analysis's get_comm_comp_overlap, computed as HTA does over "
                    "the whole trace: by default without the last ProfilerStep "
                    "(docs/ANALYZE.md).",
                    hta_ranks(s["ranks"]));
  }
  if (s.contains("collectives") && s["collectives"].is_array() && !s["collectives"].empty()) {
    body += section("collectives", "Collectives",
                    "Over the analysed iterations, longest total time first; size, algbw and "
                    "busbw as nccl-tests define them; hidden: the share of the collective's "
                    "time during which compute ran on its rank.",
                    collectives(s["collectives"]));
  }
  if (s.contains("kernel_slowdown") && s["kernel_slowdown"].is_object()) {
    body += section("kernels", "Kernels slowed by overlap",
                    "Compute kernels matched with the baseline by name and occurrence within "
                    "an iteration, most time added first, with the collectives that ran over "
                    "them.",
                    slowed_kernels(s["kernel_slowdown"]));
  }
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
