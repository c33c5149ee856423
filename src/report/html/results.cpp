// Loading and validating results directories (results.h).
#include "report/html/results.h"

#include <map>

#include "analysis/metric_catalogue.h"
#include "core/error.h"
#include "core/files.h"
#include "report/sweep_point.h"
#include "timeline/chrome_trace.h"

namespace tandem::html {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// JSON parser messages can quote the offending input; keep the error to one line.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

json parse_json_file(const fs::path& path) {
  const std::string text = read_file(path);  // UsageError naming the path
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError(path.string() + ": not valid JSON: " + one_line(e.what()));
  }
}

std::string point_label(const json& point) {
  const json& params = point.contains("params") ? point["params"] : json();
  if (params.is_object() && !params.empty()) {
    SweepPoint sp;
    for (const auto& [key, value] : params.items()) {
      sp.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
    }
    // params is an object (sorted keys); the summary's sweep order is the grid's.
    return describe(sp);
  }
  return point.value("description", point.value("id", std::string("default")));
}

void validate_points(const fs::path& path, const json& summary, Results& out) {
  const json& points = summary["points"];
  if (!points.is_array()) throw UsageError(path.string() + ": \"points\" is not an array");
  if (points.empty()) {
    throw UsageError(path.string() + ": no finished configuration yet (\"points\" is empty)");
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    const json& p = points[i];
    const std::string where = path.string() + ": point " + std::to_string(i) + ": ";
    if (!p.is_object()) throw UsageError(where + "not an object");
    if (!p.contains("id") || !p["id"].is_string()) throw UsageError(where + "no \"id\"");
    if (!p.contains("metrics") || !p["metrics"].is_object()) {
      throw UsageError(where + "no \"metrics\" object");
    }
    if (p.contains("scenarios") && !p["scenarios"].is_object()) {
      throw UsageError(where + "\"scenarios\" is not an object");
    }
    out.points.push_back({p["id"].get<std::string>(), point_label(p), p});
  }
}

// The body of a summary is the layout its header's command writes.
void validate_body(const fs::path& path, Results& out) {
  const json& s = out.summary;
  const std::string where =
      path.string() + ": " + std::string(to_string(out.command)) + " summary without ";
  switch (out.command) {
    case ResultsCommand::kAnalyze:
      for (const char* key : {"steps", "iterations", "inputs"}) {
        if (!s.contains(key) || !s[key].is_array()) {
          throw UsageError(where + "a \"" + key + "\" array");
        }
      }
      if (!s.contains("metrics") || !s["metrics"].is_object()) {
        throw UsageError(where + "a \"metrics\" object");
      }
      break;
    case ResultsCommand::kCharacterize:
      if (!s.contains("points")) throw UsageError(where + "\"points\"");
      validate_points(path, s, out);
      break;
    case ResultsCommand::kTrain:
      if (!s.contains("config") || !s["config"].is_object()) {
        throw UsageError(where + "a \"config\" object");
      }
      break;
    case ResultsCommand::kTune: {
      if (!s.contains("tune") || !s["tune"].is_object()) {
        throw UsageError(where + "a \"tune\" object");
      }
      const json& t = s["tune"];
      if (!t.contains("candidates") || !t["candidates"].is_array()) {
        throw UsageError(where + "a \"tune\".\"candidates\" array");
      }
      for (const json& c : t["candidates"]) {
        if (!c.is_object() || !c.contains("id") || !c["id"].is_string() || !c.contains("refused") ||
            !(c["refused"].is_null() || c["refused"].is_string()) ||
            (c.contains("measured_ms") && !c["measured_ms"].is_object())) {
          throw UsageError(path.string() +
                           ": a tune candidate that is not an object with "
                           "\"id\", \"refused\" and \"measured_ms\"");
        }
      }
      if ((t.contains("answer") && !t["answer"].is_object()) ||
          (t.contains("pareto") && !t["pareto"].is_array())) {
        throw UsageError(path.string() + ": \"tune\".\"answer\" or \"pareto\" of the wrong type");
      }
      for (const json& id : t.value("pareto", json::array())) {
        if (!id.is_string()) throw UsageError(path.string() + ": a Pareto id that is not a string");
      }
      break;
    }
  }
}

}  // namespace

Results load_results(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw UsageError(dir.string() + ": no such results directory");
  }
  const fs::path path = dir / "summary.json";
  if (!fs::exists(path, ec)) {
    throw UsageError(path.string() +
                     ": missing (not a results directory of tandem train, characterize, "
                     "analyze or tune --out)");
  }
  Results out;
  out.dir = dir;
  out.shown = dir;
  out.summary = parse_json_file(path);
  out.command = read_summary_header(out.summary, path);
  validate_body(path, out);
  return out;
}

Stat stat_of(const json& summaries, const std::string& key) {
  Stat st;
  if (!summaries.is_object() || !summaries.contains(key) || !summaries[key].is_object()) return st;
  const json& j = summaries[key];
  auto get = [&](const char* field) {
    return j.contains(field) && j[field].is_number() ? j[field].get<double>() : NAN;
  };
  st.median = get("median");
  st.p10 = get("p10");
  st.p90 = get("p90");
  st.mean = get("mean");
  return st;
}

Stat stat_of(const json& metrics, Summary ScenarioMetrics::*field) {
  return stat_of(metrics, std::string(metric_def(field).key));
}

std::optional<LoadedTrace> load_trace(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const json trace = parse_json_file(path);
  LoadedTrace out;
  out.timeline = parse_chrome_trace(trace, path.string());
  // Counter tracks: parse_chrome_trace skips them, the power chart needs them.
  std::int64_t t0 = 0;
  if (trace.is_object() && trace.contains("otherData") && trace["otherData"].is_object()) {
    const json& book = trace["otherData"].value("tandem_trace", json::object());
    if (book.contains("t0_ns") && book["t0_ns"].is_number_integer()) t0 = book["t0_ns"];
  }
  const json& events = trace.is_array() ? trace : trace["traceEvents"];
  std::map<std::string, std::size_t> track_of;
  for (const json& e : events) {
    if (e.value("ph", "") != "C" || !e.contains("args") || !e["args"].is_object()) continue;
    if (!e.contains("ts") || !e["ts"].is_number()) continue;
    for (const auto& [series, value] : e["args"].items()) {
      if (!value.is_number()) continue;
      const std::string name = e.value("name", "counter");
      auto [it, fresh] = track_of.try_emplace(name, out.power.size());
      if (fresh) out.power.push_back({name, {}});
      const double t_ns = static_cast<double>(t0) + e["ts"].get<double>() * 1e3;
      out.power[it->second].samples.push_back({t_ns, value.get<double>()});
      break;  // one series per track
    }
  }
  return out;
}

}  // namespace tandem::html
