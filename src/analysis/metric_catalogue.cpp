#include "analysis/metric_catalogue.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/parse.h"

namespace tandem {
namespace {

using SM = ScenarioMetrics;
using In = ScenarioInputs;
using D = DerivedMetrics;
constexpr MetricUnit kNs = MetricUnit::kNanoseconds;
constexpr MetricUnit kFraction = MetricUnit::kFraction;

// Measured metrics summarize a scenario's series; derived ones derive()'s values.
constexpr MetricDef measured(std::string_view key, std::string_view label,
                             std::string_view definition, Summary SM::*summary,
                             std::vector<double> In::*input) {
  return {key, label, kNs, definition, summary, input, nullptr};
}
constexpr MetricDef derived(std::string_view key, std::string_view label, MetricUnit unit,
                            std::string_view definition, Summary SM::*summary, double D::*value) {
  return {key, label, unit, definition, summary, nullptr, value};
}

// clang-format off
constexpr MetricDef kCatalogue[] = {
    measured("t_comp_iso_ns", "T_comp_iso (compute-only)",
             "sum of compute span durations per iteration (mean over ranks), compute-only scenario",
             &SM::t_comp_iso_ns, &In::t_comp_iso_ns),
    measured("t_comp_ovl_ns", "T_comp_ovl (overlapped)",
             "sum of compute span durations per iteration (mean over ranks), overlapped scenario",
             &SM::t_comp_ovl_ns, &In::t_comp_ovl_ns),
    measured("t_comm_iso_ns", "T_comm_iso (comm-only)",
             "sum of comm span durations per iteration (mean over ranks), comm-only scenario",
             &SM::t_comm_iso_ns, &In::t_comm_iso_ns),
    measured("t_comm_ovl_ns", "T_comm_ovl (overlapped)",
             "sum of comm span durations per iteration (mean over ranks), overlapped scenario",
             &SM::t_comm_ovl_ns, &In::t_comm_ovl_ns),
    measured("t_ovl_ns", "T_ovl",
             "len(∪compute ∩ ∪comm) per iteration (mean over ranks), overlapped scenario",
             &SM::t_ovl_ns, &In::t_ovl_ns),
    derived("compute_slowdown", "compute slowdown S (eq. 1)", kFraction,
            "S = (T_comp_ovl - T_comp_iso) / T_comp_iso",
            &SM::compute_slowdown, &D::compute_slowdown),
    derived("overlap_ratio", "overlap ratio R (eq. 2)", kFraction,
            "R = T_ovl / T_comp_ovl",
            &SM::overlap_ratio, &D::overlap_ratio),
    measured("e2e_ovl_ns", "E2E_ovl (eq. 3, measured)",
             "first compute start to last compute end, slowest rank, overlapped scenario",
             &SM::e2e_ovl_ns, &In::e2e_ovl_ns),
    derived("e2e_ideal_ns", "E2E_ideal (eq. 4)", kNs,
            "E2E_ovl - (T_comp_ovl - T_comp_iso): overlap without contention",
            &SM::e2e_ideal_ns, &D::e2e_ideal_ns),
    measured("e2e_seq_ns", "E2E_seq (measured)",
             "first compute start to last compute end, slowest rank, sequential scenario",
             &SM::e2e_seq_ns, &In::e2e_seq_ns),
    derived("e2e_seq_model_ns", "E2E_seq_model (eq. 5)", kNs,
            "E2E_ideal + T_ovl: the sequential time the model predicts",
            &SM::e2e_seq_model_ns, &D::e2e_seq_model_ns),
    derived("e2e_seq_model_error_ns", "  model - measured", kNs,
            "E2E_seq_model - E2E_seq",
            &SM::e2e_seq_model_error_ns, &D::e2e_seq_model_error_ns),
    derived("hidden_share", "hidden share of comm", kFraction,
            "T_ovl / T_comm_ovl",
            &SM::hidden_share, &D::hidden_share),
    derived("exposed_comm_ns", "exposed comm", kNs,
            "T_comm_ovl - T_ovl: communication not hidden behind compute",
            &SM::exposed_comm_ns, &D::exposed_comm_ns),
    derived("overlap_benefit_ns", "overlap benefit (seq - ovl)", kNs,
            "E2E_seq - E2E_ovl",
            &SM::overlap_benefit_ns, &D::overlap_benefit_ns),
    derived("contention_loss_ns", "contention loss (ovl - ideal)", kNs,
            "E2E_ovl - E2E_ideal (= T_comp_ovl - T_comp_iso)",
            &SM::contention_loss_ns, &D::contention_loss_ns),
    derived("overlap_efficiency", "overlap efficiency", MetricUnit::kRatio,
            "(E2E_seq - E2E_ovl) / min(T_comp_iso, T_comm_iso)",
            &SM::overlap_efficiency, &D::overlap_efficiency),
};
// clang-format on

// Every field of the three structs has a row: a field added without one fails here
// (and tests/base/metric_catalogue_test.cpp checks each appears exactly once).
constexpr std::size_t count_derived() {
  std::size_t n = 0;
  for (const MetricDef& m : kCatalogue) n += m.derived != nullptr;
  return n;
}
static_assert(std::size(kCatalogue) * sizeof(Summary) == sizeof(ScenarioMetrics));
static_assert(count_derived() * sizeof(double) == sizeof(DerivedMetrics));
static_assert((std::size(kCatalogue) - count_derived()) * sizeof(std::vector<double>) ==
              sizeof(ScenarioInputs));

}  // namespace

std::string_view to_string(MetricUnit unit) {
  switch (unit) {
    case MetricUnit::kNanoseconds:
      return "ns";
    case MetricUnit::kFraction:
      return "fraction";
    case MetricUnit::kRatio:
      return "ratio";
  }
  return "?";
}

std::span<const MetricDef> metric_catalogue() { return kCatalogue; }

const MetricDef& metric_def(Summary ScenarioMetrics::*summary) {
  for (const MetricDef& m : kCatalogue) {
    if (m.summary == summary) return m;
  }
  TANDEM_CHECK(false && "a ScenarioMetrics field without a catalogue row");
}

std::string format_metric(double value, MetricUnit unit) {
  if (!std::isfinite(value)) return "n/a";
  char buf[40];
  switch (unit) {
    case MetricUnit::kNanoseconds:
      std::snprintf(buf, sizeof buf, "%.3f ms", value / 1e6);
      break;
    case MetricUnit::kFraction:
      std::snprintf(buf, sizeof buf, "%.1f%%", 100 * value);
      break;
    case MetricUnit::kRatio:
      std::snprintf(buf, sizeof buf, "%.3f", value);
      break;
  }
  return buf;
}

std::string format_metrics_table(const ScenarioMetrics& m) {
  std::string text;
  char line[200];
  std::snprintf(line, sizeof line, "  %-31s %14s %14s %14s\n", "metric", "median", "p10", "p90");
  text += line;
  for (const MetricDef& row : kCatalogue) {
    const Summary& s = m.*row.summary;
    std::snprintf(line, sizeof line, "  %-31s %14s %14s %14s\n", std::string(row.label).c_str(),
                  format_metric(s.median, row.unit).c_str(), format_metric(s.p10, row.unit).c_str(),
                  format_metric(s.p90, row.unit).c_str());
    text += line;
  }
  return text;
}

std::string overlap_story(const ScenarioMetrics& m) {
  const double hidden = m.hidden_share.median, ovl = m.e2e_ovl_ns.median;
  const double seq = m.e2e_seq_ns.median, ideal = m.e2e_ideal_ns.median;
  const double slowdown = m.compute_slowdown.median;
  for (double v : {hidden, ovl, seq, ideal, slowdown}) {
    if (!std::isfinite(v)) return "";
  }
  const auto ms = [](double ns) { return format_duration_ns(std::abs(ns)); };
  char text[640];
  std::snprintf(text, sizeof text,
                "Overlap hid %.1f%% of the communication: an iteration took %s overlapped "
                "against %s with the communication after backward (sequential), %s %s. "
                "Communication running beside compute %s compute by %.1f%%: without that "
                "contention the overlapped iteration would take %s (ideal), %s %s.",
                100 * hidden, ms(ovl).c_str(), ms(seq).c_str(), ms(seq - ovl).c_str(),
                seq >= ovl ? "saved" : "lost", slowdown >= 0 ? "slowed" : "sped up",
                100 * std::abs(slowdown), ms(ideal).c_str(), ms(ovl - ideal).c_str(),
                ovl >= ideal ? "less" : "more");
  return text;
}

}  // namespace tandem
