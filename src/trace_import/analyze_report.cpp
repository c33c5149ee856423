#include "trace_import/analyze_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "analysis/metric_catalogue.h"
#include "core/error.h"

namespace tandem {
namespace {

double ratio(double num, double den) { return den > 0 ? num / den : kUndefined; }

Summary summarize_ms(const std::vector<StepMetrics>& steps, double StepMetrics::*field) {
  std::vector<double> values;
  values.reserve(steps.size());
  for (const StepMetrics& s : steps) values.push_back(s.*field / 1e6);
  return summarize(values);
}

std::vector<StepMetrics> measured_steps(const Timeline& timeline, std::size_t warmup) {
  return drop_warmup(compute_step_metrics(timeline), warmup);
}

std::string percent(double share) {
  if (std::isnan(share)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * share);
  return buf;
}

std::string ms_line(const char* label, const Summary& s, double scale = 1) {
  char buf[160];
  if (s.count == 0) {
    std::snprintf(buf, sizeof buf, "  %-30s n/a\n", label);
  } else {
    std::snprintf(buf, sizeof buf, "  %-30s %9.3f ms  (p10 %.3f, p90 %.3f)\n", label,
                  s.median * scale, s.p10 * scale, s.p90 * scale);
  }
  return buf;
}

std::string share_line(const char* label, const Summary& s) {
  char buf[160];
  if (s.count == 0) {
    std::snprintf(buf, sizeof buf, "  %-30s n/a\n", label);
  } else {
    std::snprintf(buf, sizeof buf, "  %-30s %9.1f%%     (p10 %.1f%%, p90 %.1f%%)\n", label,
                  100 * s.median, 100 * s.p10, 100 * s.p90);
  }
  return buf;
}

// A scenario metric in the summary's layout, labelled as in the metrics table.
std::string metric_line(const ScenarioMetrics& m, Summary ScenarioMetrics::*field) {
  const MetricDef& def = metric_def(field);
  const std::string label(def.label);
  if (def.unit == MetricUnit::kFraction) return share_line(label.c_str(), m.*field);
  return ms_line(label.c_str(), m.*field, 1e-6);
}

}  // namespace

IterationBreakdown breakdown(const IterationMetrics& m) {
  IterationBreakdown b;
  b.overlapped_ns = m.t_ovl_ns;
  b.exposed_comm_ns = m.t_exposed_comm_ns;
  b.idle_ns = m.t_other_ns;
  b.compute_only_ns = m.e2e_ns - m.t_exposed_comm_ns - m.t_other_ns - m.t_ovl_ns;
  b.hidden_share = ratio(static_cast<double>(m.t_ovl_ns), static_cast<double>(m.t_comm_ns));
  b.overlap_ratio = ratio(static_cast<double>(m.t_ovl_ns), static_cast<double>(m.t_comp_ns));
  return b;
}

AnalyzeResult analyze_timeline(const Timeline& run, const Timeline* baseline, std::size_t warmup) {
  AnalyzeResult r;
  r.warmup = warmup;
  r.steps = measured_steps(run, warmup);
  if (r.steps.empty()) {
    throw UsageError(
        "nothing to analyze: no iteration with GPU kernels" +
        std::string(warmup > 0 ? " left after --warmup " + std::to_string(warmup) : ""));
  }
  std::set<std::int32_t> measured;
  for (const StepMetrics& s : r.steps) measured.insert(s.step);
  for (const IterationMetrics& m : compute_iteration_metrics(run)) {
    if (measured.contains(m.step)) r.iterations.push_back(m);
  }
  if (baseline != nullptr) {
    r.has_baseline = true;
    r.baseline_steps = measured_steps(*baseline, warmup);
    if (r.baseline_steps.empty()) {
      throw UsageError("--baseline: no iteration with GPU kernels in the baseline traces");
    }
  }
  r.scenario = compute_scenario_metrics(scenario_inputs(r.baseline_steps, {}, {}, r.steps));

  double ovl = 0, comm = 0;
  for (const StepMetrics& s : r.steps) {
    ovl += s.t_ovl_ns;
    comm += s.t_comm_ns;
  }
  r.hidden_share = ratio(ovl, comm);
  r.e2e_ms = summarize_ms(r.steps, &StepMetrics::e2e_ns);
  r.compute_ms = summarize_ms(r.steps, &StepMetrics::t_comp_ns);
  r.comm_ms = summarize_ms(r.steps, &StepMetrics::t_comm_ns);
  r.overlap_ms = summarize_ms(r.steps, &StepMetrics::t_ovl_ns);
  r.exposed_comm_ms = summarize_ms(r.steps, &StepMetrics::t_exposed_comm_ns);
  r.idle_ms = summarize_ms(r.steps, &StepMetrics::t_other_ns);
  return r;
}

std::string format_iteration_table(const AnalyzeResult& result) {
  std::string text =
      "rank   step      e2e_ms  compute_ms   comm_ms  overlap_ms  exposed_ms   idle_ms  "
      "hidden   ratio  compute-only/overlap/exposed/idle\n";
  char row[256];
  for (const IterationMetrics& m : result.iterations) {
    const IterationBreakdown b = breakdown(m);
    const double e2e = static_cast<double>(m.e2e_ns);
    const auto pct = [&](std::int64_t part) { return e2e > 0 ? 100.0 * part / e2e : 0.0; };
    std::snprintf(
        row, sizeof row,
        "%4d %6d %11.3f %11.3f %9.3f %11.3f %11.3f %9.3f %7s %7s  %3.0f/%.0f/%.0f/%.0f %%\n",
        m.rank, m.step, e2e / 1e6, m.t_comp_ns / 1e6, m.t_comm_ns / 1e6, m.t_ovl_ns / 1e6,
        m.t_exposed_comm_ns / 1e6, m.t_other_ns / 1e6, percent(b.hidden_share).c_str(),
        percent(b.overlap_ratio).c_str(), pct(b.compute_only_ns), pct(b.overlapped_ns),
        pct(b.exposed_comm_ns), pct(b.idle_ns));
    text += row;
  }
  return text;
}

std::string format_analyze_summary(const AnalyzeResult& r) {
  std::set<std::int32_t> ranks;
  for (const IterationMetrics& m : r.iterations) ranks.insert(m.rank);
  char head[200];
  std::snprintf(head, sizeof head,
                "\nsummary over %zu iterations (after %zu warm-up), %zu ranks: per iteration, "
                "E2E of the slowest rank, the rest the mean over ranks\n",
                r.steps.size(), r.warmup, ranks.size());
  std::string text = head;
  text += ms_line("iteration time (E2E)", r.e2e_ms);
  text += ms_line("compute (sum of kernels)", r.compute_ms);
  text += ms_line("communication (sum)", r.comm_ms);
  text += ms_line("overlapped", r.overlap_ms);
  text += ms_line("exposed communication", r.exposed_comm_ms);
  text += ms_line("idle (neither)", r.idle_ms);
  text += "  hidden share of communication  " + percent(r.hidden_share) +
          "  (sum T_ovl / sum T_comm, HTA)\n";
  text += metric_line(r.scenario, &ScenarioMetrics::overlap_ratio);
  if (r.has_baseline) {
    char line[160];
    std::snprintf(line, sizeof line, "  baseline (%zu iterations, compute-only):\n",
                  r.baseline_steps.size());
    text += line;
    for (auto field : {&ScenarioMetrics::t_comp_iso_ns, &ScenarioMetrics::compute_slowdown,
                       &ScenarioMetrics::e2e_ideal_ns}) {
      text += metric_line(r.scenario, field);
    }
  }
  return text;
}

std::string iterations_csv(const AnalyzeResult& result) {
  std::string csv =
      "rank,step,start_ns,e2e_ns,compute_ns,comm_ns,overlap_ns,exposed_comm_ns,idle_ns,"
      "comm_outside_ns,compute_only_ns,hidden_share,overlap_ratio,compute_kernels,"
      "comm_kernels\n";
  char row[320];
  const auto num = [](double v) { return std::isnan(v) ? std::string() : std::to_string(v); };
  for (const IterationMetrics& m : result.iterations) {
    const IterationBreakdown b = breakdown(m);
    std::snprintf(row, sizeof row,
                  "%d,%d,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%s,%s,%d,%d\n", m.rank,
                  m.step, static_cast<long long>(m.start_ns), static_cast<long long>(m.e2e_ns),
                  static_cast<long long>(m.t_comp_ns), static_cast<long long>(m.t_comm_ns),
                  static_cast<long long>(m.t_ovl_ns), static_cast<long long>(m.t_exposed_comm_ns),
                  static_cast<long long>(m.t_other_ns), static_cast<long long>(m.t_comm_outside_ns),
                  static_cast<long long>(b.compute_only_ns), num(b.hidden_share).c_str(),
                  num(b.overlap_ratio).c_str(), m.compute_spans, m.comm_spans);
    csv += row;
  }
  return csv;
}

}  // namespace tandem
