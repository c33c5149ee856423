// The page of a `tandem characterize` results directory.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "analysis/metric_catalogue.h"
#include "core/error.h"
#include "core/parse.h"
#include "report/html/page.h"
#include "report/html/sections.h"

namespace tandem::html {

namespace {

using nlohmann::json;

// Bar charts draw at most this many configurations; the sweep table lists them all.
constexpr std::size_t kMaxBarRows = 40;
constexpr std::size_t kMaxLineSeries = 6;
constexpr const char* kGanttScenarios[] = {"overlapped", "sequential", "compute-only", "comm-only"};

using SM = ScenarioMetrics;

// A metric's median as its catalogue unit shows it.
std::string median_cell(const json& metrics, Summary SM::*field) {
  return format_metric(stat_of(metrics, field).median, metric_def(field).unit);
}

const json& metrics_of(const PointResult& p) { return p.json["metrics"]; }

const json& scenario_of(const PointResult& p, const std::string& scenario) {
  static const json kEmpty = json::object();
  if (!p.json.contains("scenarios") || !p.json["scenarios"].contains(scenario)) return kEmpty;
  return p.json["scenarios"][scenario];
}

std::vector<int> measured_steps(const json& scenario, std::vector<double>* e2e = nullptr) {
  std::vector<int> steps;
  if (!scenario.contains("steps") || !scenario["steps"].is_array()) return steps;
  for (const json& s : scenario["steps"]) {
    if (!s.is_object() || !s.contains("step") || !s["step"].is_number_integer()) continue;
    steps.push_back(s["step"].get<int>());
    if (e2e) e2e->push_back(s.value("e2e_ns", NAN));
  }
  return steps;
}

// The overlapped run's median-E2E iteration (the lower middle one), or the requested one.
int chosen_step(const PointResult& p, const ReportOptions& options) {
  std::vector<double> e2e;
  const std::vector<int> steps = measured_steps(scenario_of(p, "overlapped"), &e2e);
  if (options.iteration) {
    if (std::find(steps.begin(), steps.end(), *options.iteration) == steps.end()) {
      std::string list = steps.empty() ? "none" : "";
      if (!steps.empty()) {
        list = std::to_string(steps.front()) + ".." + std::to_string(steps.back());
      }
      throw UsageError("--iteration " + std::to_string(*options.iteration) +
                       ": not a measured iteration of point '" + p.id + "' (measured: " + list +
                       ")");
    }
    return *options.iteration;
  }
  if (steps.empty()) return -1;
  std::vector<std::size_t> order(steps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return e2e[a] < e2e[b] || (e2e[a] == e2e[b] && steps[a] < steps[b]);
  });
  return steps[order[(order.size() - 1) / 2]];
}

const PointResult& chosen_point(const Results& r, const ReportOptions& options) {
  if (options.point.empty()) return r.points.front();
  for (const PointResult& p : r.points) {
    if (p.id == options.point) return p;
  }
  std::string ids;
  for (std::size_t i = 0; i < r.points.size() && i < 8; ++i)
    ids += (i ? ", " : "") + r.points[i].id;
  if (r.points.size() > 8) ids += ", ...";
  throw UsageError("--point " + options.point + ": no such configuration in " + r.dir.string() +
                   " (have: " + ids + ")");
}

std::string timelines(const Results& r, const PointResult& p, int step,
                      const ReportOptions& options) {
  std::string out;
  for (const char* scenario : kGanttScenarios) {
    const auto path = r.dir / "points" / p.id / (std::string(scenario) + ".trace.json");
    const std::optional<LoadedTrace> trace = load_trace(path);
    out += "<h3>" + escape(scenario) + "</h3>";
    if (!trace) {
      out += note("no " + path.filename().string() + " in this results directory");
      continue;
    }
    int total = 0;
    const GanttInput g =
        gantt_for_step(trace->timeline, step, options.max_ranks,
                       std::string(scenario) + " iteration " + std::to_string(step), total);
    if (g.ranks.empty()) {
      out += note("iteration " + std::to_string(step) + " is not in " + path.string());
      continue;
    }
    std::string caption = std::string(scenario) + ", iteration " + std::to_string(step) +
                          ": hover a bar for its name, duration and bytes.";
    const std::string ranks = ranks_note(g, total);
    if (!ranks.empty()) caption += " " + ranks + ".";
    out += figure(gantt_chart(g), caption);
  }
  return out;
}

std::vector<const PointResult*> capped(const Results& r, std::string* note_text) {
  std::vector<const PointResult*> out;
  for (const PointResult& p : r.points) {
    if (out.size() < kMaxBarRows) out.push_back(&p);
  }
  if (r.points.size() > kMaxBarRows) {
    *note_text = "The first " + std::to_string(kMaxBarRows) + " of " +
                 std::to_string(r.points.size()) +
                 " configurations are drawn; the sweep table below lists every one.";
  }
  return out;
}

std::string e2e_and_breakdown(const Results& r) {
  std::string cap_note;
  const std::vector<const PointResult*> shown = capped(r, &cap_note);
  std::vector<BarGroup> groups;
  std::vector<StackRow> rows;
  for (const PointResult* p : shown) {
    const json& m = metrics_of(*p);
    BarGroup g{.label = p->label, .values = {}};
    for (auto field : {&SM::e2e_seq_ns, &SM::e2e_ovl_ns, &SM::e2e_ideal_ns}) {
      const Stat s = stat_of(m, field);
      g.values.push_back({s.median, s.p10, s.p90});
    }
    groups.push_back(std::move(g));
    rows.push_back({p->label,
                    {stat_of(m, &SM::t_comp_ovl_ns).median, stat_of(m, &SM::exposed_comm_ns).median,
                     stat_of(m, &SM::t_ovl_ns).median}});
  }
  std::string out =
      section("e2e", "Iteration time: sequential, overlapped, ideal",
              "Median iteration time (E2E) per configuration; whiskers span p10 to p90. Sequential "
              "runs all communication after the backward pass; overlapped is the measured overlap "
              "strategy; ideal is overlapped minus the compute slowdown (equation 4): what overlap "
              "would give without contention. Shorter is better.",
              figure(grouped_bar_chart({{"E2E sequential (measured)", "f-seq"},
                                        {"E2E overlapped (measured)", "f-ovl"},
                                        {"E2E ideal (eq. 4)", "f-ideal"}},
                                       groups, "iteration time (ms)", 1e6,
                                       "iteration time per configuration"),
                     "") +
                  (cap_note.empty() ? "" : note(cap_note)));
  out +=
      section("breakdown", "Where the overlapped iteration goes",
              "Per configuration (medians): compute time under overlap, the communication left "
              "exposed (not hidden behind compute), and the communication hidden behind compute. "
              "Compute + exposed is roughly the overlapped iteration; adding the hidden part gives "
              "what the same work costs with nothing overlapped.",
              figure(stacked_bar_chart({{"compute (T_comp_ovl)", "f-comp"},
                                        {"exposed communication", "f-exposed"},
                                        {"hidden communication (T_ovl)", "f-hidden"}},
                                       rows, "time per iteration (ms)", 1e6,
                                       "compute, exposed and hidden communication"),
                     "") +
                  (cap_note.empty() ? "" : note(cap_note)));
  return out;
}

std::string slowdown_scatter(const Results& r) {
  std::vector<ScatterPoint> pts;
  for (const PointResult& p : r.points) {
    const json& m = metrics_of(p);
    pts.push_back(
        {stat_of(m, &SM::overlap_ratio).median, stat_of(m, &SM::compute_slowdown).median, p.label});
  }
  return section("slowdown", "Compute slowdown against overlap ratio",
                 "One dot per configuration (medians). Overlap ratio R is the share of compute "
                 "that ran while communication did (equation 2); compute slowdown S is how "
                 "much longer compute took under overlap than alone (equation 1). Dots high "
                 "and to the right pay for their overlap with contention.",
                 figure(scatter_chart(pts, "overlap ratio R (%)", "compute slowdown S (%)",
                                      "compute slowdown against overlap ratio"),
                        ""));
}

// The numeric value a point has on a scaling axis, if any: "chunks" (or strategy
// chunked:N) for chunk count, "bucket-mb" for bucket size.
std::optional<double> axis_value(const PointResult& p, const std::string& axis) {
  const json& params = p.json.value("params", json::object());
  auto number = [](const std::string& text) -> std::optional<double> {
    try {
      return parse_double(text, "value");
    } catch (const UsageError&) {
      return std::nullopt;
    }
  };
  auto param = [&](const char* key) -> std::optional<std::string> {
    if (!params.is_object() || !params.contains(key) || !params[key].is_string()) return {};
    return params[key].get<std::string>();
  };
  if (axis == "chunks") {
    if (auto v = param("chunks")) return number(*v);
    if (auto v = param("strategy"); v && v->starts_with("chunked:")) return number(v->substr(8));
    return std::nullopt;
  }
  if (auto v = param("bucket-mb")) return number(*v);
  return std::nullopt;
}

// The label of a point's other parameters (everything but the scaling axis).
std::string others_label(const PointResult& p, const std::string& axis) {
  std::string label;
  const json& params = p.json.value("params", json::object());
  for (const auto& [key, value] : params.items()) {
    if (key == axis || (axis == "chunks" && key == "strategy")) continue;
    label += (label.empty() ? "" : " ") + key + "=" +
             (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return label;
}

std::string scaling_chart(const Results& r, const std::string& axis, const std::string& x_title) {
  std::map<std::string, std::vector<const PointResult*>> by_others;
  std::set<double> xs;
  for (const PointResult& p : r.points) {
    if (const auto x = axis_value(p, axis)) {
      by_others[others_label(p, axis)].push_back(&p);
      xs.insert(*x);
    }
  }
  if (xs.size() < 2) return "";
  std::vector<LineSeries> lines;
  std::string caption;
  if (by_others.size() == 1) {
    const auto& pts = by_others.begin()->second;
    const std::pair<Summary SM::*, Series> kSeries[] = {
        {&SM::e2e_seq_ns, {"E2E sequential", "l-seq"}},
        {&SM::e2e_ovl_ns, {"E2E overlapped", "l-ovl"}},
        {&SM::e2e_ideal_ns, {"E2E ideal", "l-ideal"}}};
    for (const auto& [field, series] : kSeries) {
      LineSeries l{.series = series, .points = {}};
      for (const PointResult* p : pts) {
        l.points.push_back({*axis_value(*p, axis), stat_of(metrics_of(*p), field).median});
      }
      lines.push_back(std::move(l));
    }
  } else {
    std::size_t i = 0;
    for (const auto& [others, pts] : by_others) {
      if (i == kMaxLineSeries) {
        caption = "First " + std::to_string(kMaxLineSeries) + " of " +
                  std::to_string(by_others.size()) + " series drawn.";
        break;
      }
      LineSeries l{.series = {"E2E overlapped, " + others, "l-s" + std::to_string(i++)},
                   .points = {}};
      for (const PointResult* p : pts) {
        l.points.push_back(
            {*axis_value(*p, axis), stat_of(metrics_of(*p), &SM::e2e_ovl_ns).median});
      }
      lines.push_back(std::move(l));
    }
  }
  return figure(line_chart(lines, x_title, "iteration time (ms)", 1e6, "scaling with " + axis),
                caption);
}

std::string scaling(const Results& r) {
  std::string content = scaling_chart(r, "chunks", "chunk count") +
                        scaling_chart(r, "bucket-mb", "bucket size cap (MiB)");
  if (content.empty()) {
    content = note(
        "No sweep over chunk count (--sweep chunks=... or strategy=chunked:N) or "
        "bucket size (--sweep bucket-mb=...) in these results.");
  }
  return section("scaling", "Scaling with chunk count and bucket size",
                 "Median iteration time as the gradient is cut finer: more chunks or smaller "
                 "buckets start communication earlier (more overlap) but pay a fixed cost per "
                 "collective.",
                 content);
}

std::string power(const Results& r, const PointResult& p) {
  std::string content;
  std::vector<std::vector<std::string>> rows;
  for (const char* scenario : kGanttScenarios) {
    const json& power = scenario_of(p, scenario).value("power", json());
    if (!power.is_array()) continue;
    for (const json& s : power) {
      char avg[32], peak[32], energy[32];
      std::snprintf(avg, sizeof avg, "%.1f", s.value("average_watts", NAN));
      std::snprintf(peak, sizeof peak, "%.1f", s.value("peak_watts", NAN));
      std::snprintf(energy, sizeof energy, "%.3f", s.value("energy_per_iteration_joules", NAN));
      rows.push_back({scenario, s.value("source", std::string("?")), avg, peak, energy});
    }
    const auto trace =
        load_trace(r.dir / "points" / p.id / (std::string(scenario) + ".trace.json"));
    if (!trace || trace->power.empty()) continue;
    std::int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    for (const Span& s : trace->timeline.spans) {
      t0 = std::min(t0, s.start_ns);
      t1 = std::max(t1, s.end_ns);
    }
    for (const PowerTrack& t : trace->power) {
      for (const auto& [ts, w] : t.samples) {
        t0 = std::min(t0, static_cast<std::int64_t>(ts));
        t1 = std::max(t1, static_cast<std::int64_t>(ts));
      }
    }
    content += "<h3>" + escape(scenario) + "</h3>" +
               figure(power_chart(trace->power, overlap_any_rank(trace->timeline), t0, t1,
                                  std::string("power during ") + scenario),
                      "");
  }
  if (rows.empty()) {
    return section("power", "Power", "",
                   note("power: unavailable on this machine (no readable RAPL zone or GPU "
                        "sensor when these results were measured)."));
  }
  content +=
      table({"scenario", "source", "average (W)", "peak (W)", "energy per iteration (J)"}, rows);
  return section("power", "Power over time",
                 "Sampled power per source during each scenario of the detailed "
                 "configuration; hatched bands are times when some rank computed and "
                 "communicated at once.",
                 content);
}

std::string metrics_tables(const Results& r, const PointResult& chosen) {
  std::string out = "<h3>" + escape(chosen.label) + "</h3>" + metric_rows_table(metrics_of(chosen));
  if (r.points.size() > 1) {
    std::vector<std::vector<std::string>> sweep;
    int highlight = -1;
    for (const PointResult& p : r.points) {
      const json& m = metrics_of(p);
      const Stat e2e = stat_of(m, &SM::e2e_ovl_ns);
      const std::string e2e_range =
          format_ms(e2e.median) + " [" + format_ms(e2e.p10) + "–" + format_ms(e2e.p90) + "]";
      if (&p == &chosen) highlight = static_cast<int>(sweep.size());
      std::vector<std::string> row = {p.label, e2e_range};
      for (auto field : {&SM::e2e_seq_ns, &SM::e2e_ideal_ns, &SM::compute_slowdown,
                         &SM::overlap_ratio, &SM::hidden_share, &SM::overlap_benefit_ns}) {
        row.push_back(median_cell(m, field));
      }
      sweep.push_back(std::move(row));
    }
    out +=
        "<h3>All configurations (medians; E2E overlapped also [p10–p90])</h3>"
        "<div class=\"scroll\">" +
        table({"configuration", "E2E overlapped", "E2E sequential", "E2E ideal", "slowdown S",
               "overlap ratio R", "hidden share", "overlap benefit"},
              sweep, highlight) +
        "</div>";
  }
  return section("metrics", "Metrics",
                 "Medians with p10/p90 over the measured iterations (warm-up dropped); "
                 "definitions in docs/METRICS.md. n/a: undefined (a zero denominator or a "
                 "scenario not run).",
                 out);
}

}  // namespace

std::string metric_rows_table(const nlohmann::json& metrics) {
  std::vector<std::vector<std::string>> rows;
  for (const MetricDef& def : metric_catalogue()) {
    const Stat s = stat_of(metrics, std::string(def.key));
    rows.push_back({std::string(def.label), format_metric(s.median, def.unit),
                    format_metric(s.p10, def.unit), format_metric(s.p90, def.unit),
                    format_metric(s.mean, def.unit), std::string(def.definition)});
  }
  return table({"metric", "median", "p10", "p90", "mean", "definition"}, rows);
}

std::string characterize_body(const Results& r, const ReportOptions& options) {
  const PointResult& chosen = chosen_point(r, options);
  const int step = chosen_step(chosen, options);
  const json& m = metrics_of(chosen);
  const int warmup = chosen.json.value("warmup", 0);
  const int iterations = chosen.json.value("iterations", 0);

  std::string body =
      "<h1>tandem characterize: " + escape(chosen.json.value("description", chosen.id)) + "</h1>";
  body +=
      "<p class=\"sub\">" +
      escape(std::to_string(r.points.size()) + " configuration" +
             (r.points.size() == 1 ? "" : "s") + " · 4 scenarios each · " + std::to_string(warmup) +
             " warm-up + " + std::to_string(iterations) + " measured iterations · created " +
             r.summary.value("created", std::string("?")) + " · " + r.shown.string()) +
      "</p>";
  body +=
      "<nav><a href=\"#timeline\">timelines</a><a href=\"#e2e\">E2E</a><a "
      "href=\"#breakdown\">breakdown</a><a href=\"#waiting\">waiting</a><a "
      "href=\"#slowdown\">slowdown</a><a "
      "href=\"#scaling\">scaling</a><a href=\"#power\">power</a><a "
      "href=\"#metrics\">metrics</a><a href=\"#config\">configuration</a><a "
      "href=\"#machine\">machine</a></nav>";
  body += cards({{"E2E overlapped (median)", median_cell(m, &SM::e2e_ovl_ns)},
                 {"E2E sequential (median)", median_cell(m, &SM::e2e_seq_ns)},
                 {"E2E ideal (median)", median_cell(m, &SM::e2e_ideal_ns)},
                 {"compute slowdown S", median_cell(m, &SM::compute_slowdown)},
                 {"overlap ratio R", median_cell(m, &SM::overlap_ratio)},
                 {"hidden share of comm", median_cell(m, &SM::hidden_share)}});
  if (const std::string story = chosen.json.value("story", std::string()); !story.empty()) {
    body += "<p>" + escape(story) + "</p>";
  }
  if (r.points.size() > 1) {
    body += note("Cards, timelines and power are for the configuration " + chosen.label +
                 " (choose another with tandem report --point ID); the charts below compare "
                 "all " +
                 std::to_string(r.points.size()) + ".");
  }
  body += section(
      "timeline", "Timelines of one iteration",
      "Per rank: compute, communication and waiting on it, for iteration " + std::to_string(step) +
          (options.iteration ? "" : " (the overlapped run's median iteration)") +
          " of each scenario. Hatching marks time when compute and communication "
          "ran at once; a tick on the comm lane is when a bucket became ready, the "
          "dotted lead how long it waited for its collective.",
      step < 0 ? note("no measured iteration recorded") : timelines(r, chosen, step, options));
  body += e2e_and_breakdown(r);
  if (chosen.json.contains("waiting")) {
    body += waiting_section(chosen.json["waiting"], " in the overlapped scenario");
  }
  body += slowdown_scatter(r);
  body += scaling(r);
  body += power(r, chosen);
  body += metrics_tables(r, chosen);
  body += section("config", "Configuration", chosen.label,
                  config_table(chosen.json.value("config", json::object())));
  body += section("machine", "Machine", "",
                  machine_table(r.summary.value("machine", json::object()),
                                r.summary.value("created", std::string())));
  return body;
}

}  // namespace tandem::html
