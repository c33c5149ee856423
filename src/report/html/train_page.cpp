// The page of a `tandem train --out` directory: one configuration, no baselines, so the
// timeline, the per-step breakdown and the run's statistics.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <optional>

#include "analysis/metrics.h"
#include "core/error.h"
#include "report/html/page.h"
#include "report/html/sections.h"

namespace tandem::html {

namespace {

using nlohmann::json;

constexpr std::size_t kMaxStepRows = 40;

std::string ms_cell(double ms) {
  if (!std::isfinite(ms)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", ms);
  return buf;
}

// The measured steps (warm-up dropped, as summary.json did) and the chosen one.
int choose_step(const std::vector<StepMetrics>& measured, const std::vector<StepMetrics>& all,
                const ReportOptions& options) {
  if (options.iteration) {
    for (const StepMetrics& s : all) {
      if (s.step == *options.iteration) return s.step;
    }
    throw UsageError(
        "--iteration " + std::to_string(*options.iteration) +
        ": no such iteration in trace.json (steps " +
        (all.empty() ? std::string("none")
                     : std::to_string(all.front().step) + ".." + std::to_string(all.back().step)) +
        ")");
  }
  const std::vector<StepMetrics>& pool = measured.empty() ? all : measured;
  if (pool.empty()) return -1;
  std::vector<StepMetrics> sorted = pool;
  std::sort(sorted.begin(), sorted.end(), [](const StepMetrics& a, const StepMetrics& b) {
    return a.e2e_ns < b.e2e_ns || (a.e2e_ns == b.e2e_ns && a.step < b.step);
  });
  return sorted[(sorted.size() - 1) / 2].step;
}

// A timeline's measured steps, the step its Gantt shows (choose_step) and that chart's
// input, labelled `label` and the step.
struct ChosenStep {
  std::vector<StepMetrics> measured;
  int step = -1;
  GanttInput gantt;
  int total_ranks = 0;
};
ChosenStep chosen_step(const Timeline& timeline, const json& summary, const ReportOptions& options,
                       const std::string& label) {
  ChosenStep out;
  const std::vector<StepMetrics> all = compute_step_metrics(timeline);
  const int warmup =
      std::max(0, summary["config"].value("steps", 0) - summary.value("measured_steps", 0));
  out.measured = drop_warmup(all, static_cast<std::size_t>(warmup));
  out.step = choose_step(out.measured, all, options);
  out.gantt = gantt_for_step(timeline, out.step, options.max_ranks,
                             label + " " + std::to_string(out.step), out.total_ranks);
  return out;
}

}  // namespace

std::string train_body(const Results& r, const ReportOptions& options) {
  const json& s = r.summary;
  const json& config = s["config"];
  const auto trace = load_trace(r.dir / "trace.json");

  std::string body = "<h1>tandem train: " +
                     escape(config.value("model", std::string("?")) + ", " +
                            std::to_string(config.value("ranks", 0)) + " ranks, " +
                            config.value("strategy", std::string("?"))) +
                     "</h1>";
  body += "<p class=\"sub\">" +
          escape(std::to_string(s.value("measured_steps", 0)) + " measured steps of " +
                 std::to_string(config.value("steps", 0)) + " · created " +
                 s.value("created", std::string("not recorded")) + " · " + r.shown.string()) +
          "</p>";
  auto med = [&](const char* key) { return ms_cell(stat_of(s, key).median); };
  const double hidden = s.contains("hidden_share") && s["hidden_share"].is_number()
                            ? s["hidden_share"].get<double>()
                            : NAN;
  body += cards({{"step time (median)", med("step_ms")},
                 {"compute per step", med("compute_ms")},
                 {"communication per step", med("comm_ms")},
                 {"waiting per step", med("wait_ms")},
                 {"overlapped per step", med("overlap_ms")},
                 {"hidden share of comm", format_percent(hidden)}});
  // Power over the measured steps, per source (absent from older summaries).
  if (s.contains("power") && s["power"].is_array()) {
    std::vector<std::pair<std::string, std::string>> power;
    char text[96];
    for (const json& p : s["power"]) {
      const std::string source = p.value("source", std::string("?"));
      std::snprintf(text, sizeof text, "%.0f W / %.0f W", p.value("average_watts", NAN),
                    p.value("peak_watts", NAN));
      power.push_back({"average / peak power, " + source, text});
      std::snprintf(text, sizeof text, "%.3g J", p.value("energy_per_step_joules", NAN));
      power.push_back({"energy per step, " + source, text});
    }
    body += cards(power);
  }

  std::string timeline_html;
  std::string breakdown_html;
  if (!trace) {
    timeline_html = note("no trace.json in this directory (the run had its timeline off)");
  } else {
    const ChosenStep chosen = chosen_step(trace->timeline, s, options, "training step");
    const std::vector<StepMetrics>& measured = chosen.measured;
    const int step = chosen.step;
    const GanttInput& g = chosen.gantt;
    if (g.ranks.empty()) {
      timeline_html = note("trace.json has no spans of a training step");
    } else {
      std::string caption = "Step " + std::to_string(step) +
                            (options.iteration ? "" : " (the median measured step)") +
                            ": hover a bar for its name, duration and bytes.";
      const std::string ranks = ranks_note(g, chosen.total_ranks);
      if (!ranks.empty()) caption += " " + ranks + ".";
      timeline_html = figure(gantt_chart(g), caption);
    }
    std::vector<StackRow> rows;
    for (const StepMetrics& m : measured) {
      if (rows.size() == kMaxStepRows) break;
      rows.push_back(
          {"step " + std::to_string(m.step), {m.t_comp_ns, m.t_exposed_comm_ns, m.t_ovl_ns}});
    }
    breakdown_html = figure(stacked_bar_chart({{"compute", "f-comp"},
                                               {"exposed communication", "f-exposed"},
                                               {"hidden communication", "f-hidden"}},
                                              rows, "time per step, mean over ranks (ms)", 1e6,
                                              "compute, exposed and hidden communication per step"),
                            measured.size() > kMaxStepRows
                                ? "The first " + std::to_string(kMaxStepRows) + " of " +
                                      std::to_string(measured.size()) + " measured steps."
                                : "");
  }
  body += section("timeline", "Timeline of one step",
                  "Per rank: compute, communication and waiting on it. Hatching marks time "
                  "when compute and communication ran at once; a tick on the comm lane is "
                  "when a bucket became ready, the dotted lead how long it waited for its "
                  "collective.",
                  timeline_html);
  // A replay's what-if (tandem simulate --from-trace --what-if, docs/SIMULATE.md): the run
  // as replayed (its median step), drawn below the what-if's timeline.
  if (const auto replayed = trace ? load_trace(r.dir / "replayed.trace.json") : std::nullopt) {
    const ChosenStep chosen = chosen_step(replayed->timeline, s, options, "replayed step");
    body += replay_section(s, chosen.gantt, chosen.step);
  }
  if (s.contains("waiting")) body += waiting_section(s["waiting"]);
  if (!breakdown_html.empty()) {
    body += section("breakdown", "Where each step goes",
                    "Per measured step: compute, the communication left exposed, and the "
                    "communication hidden behind compute.",
                    breakdown_html);
  }
  // Pipeline stages (docs/PIPELINE.md): per rank its bubble and micro-batches in flight.
  if (s.contains("pipeline") && s["pipeline"].is_object()) {
    const nlohmann::json& p = s["pipeline"];
    std::vector<std::vector<std::string>> stage_rows;
    const nlohmann::json bubble = p.value("bubble", nlohmann::json::array());
    const nlohmann::json in_flight = p.value("micro_batches_in_flight", nlohmann::json::array());
    const int stages = std::max(1, p.value("stages", 1));
    for (std::size_t rank = 0; rank < std::max(bubble.size(), in_flight.size()); ++rank) {
      const bool has_bubble = rank < bubble.size() && bubble[rank].is_number();
      stage_rows.push_back(
          {std::to_string(rank), std::to_string(static_cast<int>(rank) % stages),
           has_bubble ? format_percent(bubble[rank].get<double>()) : "n/a",
           rank < in_flight.size() ? std::to_string(in_flight[rank].get<int>()) : "n/a"});
    }
    const std::string textbook = p.contains("textbook_bubble") && p["textbook_bubble"].is_number()
                                     ? format_percent(p["textbook_bubble"].get<double>())
                                     : std::string("n/a");
    body += section("pipeline", "Pipeline stages",
                    p.value("describe", std::string()) +
                        ". The bubble is each stage's idle share of the pipeline's pass window "
                        "(median over measured steps); the textbook value for equal stages is " +
                        textbook + ". The timeline labels each micro-batch's forward (F) and "
                        "backward (B).",
                    table({"rank", "stage", "bubble", "micro-batches in flight"}, stage_rows));
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, label] : std::vector<std::pair<const char*, const char*>>{
           {"step_ms", "step time (slowest rank)"},
           {"compute_ms", "compute"},
           {"comm_ms", "communication"},
           {"wait_ms", "waiting on communication"},
           {"overlap_ms", "overlapped (T_ovl)"},
           {"exposed_comm_ms", "exposed communication"}}) {
    const Stat st = stat_of(s, key);
    rows.push_back({label, ms_cell(st.median), ms_cell(st.p10), ms_cell(st.p90), ms_cell(st.mean)});
  }
  body += section("metrics", "Statistics per step",
                  "Over the measured steps (warm-up dropped); compute, communication and "
                  "overlap are means over ranks.",
                  table({"quantity", "median", "p10", "p90", "mean"}, rows));
  body += section("power", "Power", "",
                  note("power: unavailable for tandem train runs (sampled by tandem "
                       "characterize where a sensor exists)."));
  body += section("config", "Configuration", "", config_table(config));
  body +=
      section("machine", "Machine", "",
              s.contains("machine") ? machine_table(s["machine"], s.value("created", std::string()))
                                    : note("not recorded by this run"));
  return body;
}

}  // namespace tandem::html
