// The page of a `tandem tune --out` directory: the answer, the search's predictions
// against its measurements, the Pareto front of step time and memory, and every
// configuration of the space (docs/TUNE.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "core/parse.h"
#include "report/html/charts.h"
#include "report/html/page.h"
#include "report/html/sections.h"
#include "report/html/svg.h"

namespace tandem::html {

namespace {

using nlohmann::json;

double number(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

std::string ms_cell(double ms) {
  if (!std::isfinite(ms)) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", ms);
  return buf;
}

std::string label_of(const json& c) { return c.value("label", c.value("id", std::string("?"))); }

}  // namespace

std::string tune_body(const Results& r, const ReportOptions& options) {
  (void)options;
  const json& t = r.summary["tune"];
  const json& candidates = t["candidates"];
  const std::string mode = t.value("mode", std::string("measured"));
  const bool simulated = mode == "simulated";
  std::string body = "<h1>tandem tune: " + escape(r.shown.filename().string()) + "</h1>";

  // The answer.
  const json answer = t.contains("answer") ? t["answer"] : json::object();
  std::vector<std::pair<std::string, std::string>> items;
  const auto find = [&](const json& id) -> const json* {
    for (const json& c : candidates) {
      if (!id.is_null() && c.value("id", std::string()) == id) return &c;
    }
    return nullptr;
  };
  const json* best = find(answer.value("best", json()));
  if (best != nullptr) {
    items.emplace_back(simulated ? "predicted best" : "best", label_of(*best));
    if (simulated) {
      items.emplace_back("predicted step", ms_cell(number(answer, "best_predicted_ms")));
    } else {
      items.emplace_back("measured step", ms_cell(number(answer, "best_ms")));
      if (answer.value("objective", std::string()) == "energy") {
        char joules[96];
        std::snprintf(joules, sizeof joules, "%.3g J (the default %.3g J, sequential %.3g J)",
                      number(answer, "best_j_per_step"), number(answer, "default_j_per_step"),
                      number(answer, "sequential_j_per_step"));
        items.emplace_back("energy per step (the objective)", joules);
      }
      const double d = number(answer, "default_ms"), b = number(answer, "best_ms");
      const double q = number(answer, "sequential_ms");
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.2fx (%s)", d / b, ms_cell(d).c_str());
      items.emplace_back("vs the default", answer.value("default_is_best", false)
                                               ? "nothing beat it"
                                               : std::string(buf));
      std::snprintf(buf, sizeof buf, "%.2fx (%s)", q / b, ms_cell(q).c_str());
      items.emplace_back("vs sequential", buf);
      if (answer.contains("gap_to_runner_up") && answer["gap_to_runner_up"].is_number()) {
        std::snprintf(buf, sizeof buf, "%s: runner-up +%.1f%%, spread ±%.1f%%",
                      answer.value("sure", false) ? "clear" : "within noise",
                      100 * number(answer, "gap_to_runner_up"), 100 * number(answer, "spread"));
        items.emplace_back("how sure", buf);
      }
      items.emplace_back("measuring took", format_duration_ns(number(t, "measurement_s") * 1e9));
    }
  } else {
    items.emplace_back("best", "none");
  }
  body += cards(items);
  if (answer.contains("command") && answer["command"].is_string()) {
    body += "<p><code>" + escape(answer["command"].get<std::string>()) + "</code></p>";
  }

  // Predicted against measured.
  std::vector<ScatterPoint> points;
  std::vector<ScatterPoint> memory;
  std::set<std::string> front;
  for (const json& id : t.value("pareto", json::array())) front.insert(id.get<std::string>());
  for (const json& c : candidates) {
    if (!c["refused"].is_null()) continue;
    const double predicted = number(c, "predicted_ms");
    const double measured = c.contains("measured_ms") ? number(c["measured_ms"], "median") : NAN;
    const std::string label = label_of(c);
    if (std::isfinite(measured)) {
      points.push_back({predicted, measured, label});
      memory.push_back(
          {measured, number(c, "memory_bytes") / (1 << 20),
           label + (front.contains(c.value("id", std::string())) ? " (Pareto front)" : "")});
    }
  }
  std::string on_front;
  for (const json& id : t.value("pareto", json::array())) {
    const json* c = find(id);
    on_front +=
        (on_front.empty() ? "" : "; ") + (c != nullptr ? label_of(*c) : id.get<std::string>());
  }
  if (!points.empty()) {
    body += section("predicted", "Predicted against measured",
                    "Every configuration the search measured: the calibrated simulator's step time "
                    "(x) against the median of its measured steps (y). Points on the diagonal were "
                    "predicted exactly; the ranking only needs the order right.",
                    figure(scatter_chart(points, "predicted step (ms)", "measured step (ms)",
                                         "Predicted against measured step time",
                                         {.percent = false, .diagonal = true, .labels = false}),
                           "One point per measured configuration (hover for its name)."));
    body += section(
        "pareto", "Step time and memory",
        "Measured step time (x) against the memory a rank holds (y: parameters, gradients, "
        "optimizer state, activations and gathered peaks, as the simulator counts them). "
        "The Pareto front: no other configuration is both faster and smaller.",
        figure(scatter_chart(memory, "measured step (ms)", "memory per rank (MiB)",
                             "Step time against memory", {.percent = false, .labels = false}),
               "On the Pareto front, fastest first: " + on_front +
                   " (hover over a dot for its name)."));
  }

  // Every configuration.
  std::vector<std::vector<std::string>> rows;
  std::vector<const json*> order;
  for (const json& c : candidates) order.push_back(&c);
  const auto key = [&](const json* c) {
    const double m = c->contains("measured_ms") ? number((*c)["measured_ms"], "median") : NAN;
    const double p = number(*c, "predicted_ms");
    return std::tuple(!(*c)["refused"].is_null(), -c->value("rounds", 0),
                      std::isfinite(m) ? m : INFINITY, std::isfinite(p) ? p : INFINITY);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const json* a, const json* b) { return key(a) < key(b); });
  int highlight = -1;
  for (const json* c : order) {
    const json& m = c->contains("measured_ms") ? (*c)["measured_ms"] : json::object();
    const double mem = number(*c, "memory_bytes");
    if (best != nullptr && c == best) highlight = static_cast<int>(rows.size());
    rows.push_back({label_of(*c) + (c->value("default", false) ? " (default)" : ""),
                    ms_cell(number(*c, "predicted_ms")), ms_cell(number(m, "median")),
                    std::isfinite(number(m, "p10"))
                        ? ms_cell(number(m, "p10")) + " – " + ms_cell(number(m, "p90"))
                        : "",
                    std::to_string(c->value("rounds", 0)),
                    std::isfinite(mem) ? format_bytes(mem) : "",
                    (*c)["refused"].is_null() ? "" : (*c)["refused"].get<std::string>()});
  }
  body += section(
      "candidates", "Every configuration",
      "The space, the measured first (most rounds first, then fastest), then by "
      "prediction; refused configurations say why they were never tried.",
      table({"configuration", "predicted", "measured", "p10 – p90", "rounds", "memory", "refused"},
            rows, highlight));
  return body;
}

}  // namespace tandem::html
