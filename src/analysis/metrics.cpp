// The metrics of docs/METRICS.md; the rules behind them are stated in metrics.h.
#include "analysis/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "analysis/intervals.h"
#include "analysis/metric_catalogue.h"
#include "core/error.h"

namespace tandem {
namespace {

// num / den, or NaN when the denominator is not positive (no compute, no communication):
// a ratio of nothing is undefined, not 0 or infinity.
double ratio(double num, double den) { return den > 0 ? num / den : kUndefined; }

double median_of(const std::vector<double>& values) { return summarize(values).median; }

// Metrics of one (rank, step) group of spans.
IterationMetrics measure_iteration(const std::vector<const Span*>& spans) {
  IterationMetrics m;
  m.rank = spans.front()->rank;
  m.step = spans.front()->step;
  std::vector<Interval> compute;
  std::vector<Interval> comm;
  for (const Span* s : spans) {
    switch (s->lane) {
      case Lane::kCompute:
        m.t_comp_ns += s->duration_ns();
        ++m.compute_spans;
        compute.push_back({s->start_ns, s->end_ns});
        break;
      case Lane::kComm:
        m.t_comm_ns += s->duration_ns();
        m.bytes += s->bytes;
        ++m.comm_spans;
        comm.push_back({s->start_ns, s->end_ns});
        break;
      case Lane::kWait:
        m.t_wait_ns += s->duration_ns();
        break;
      case Lane::kIdle:
        break;
    }
  }
  // The window is the hull of the compute spans, or of the comm spans when the step has
  // no compute (comm-only scenario). Hulls are taken over the raw spans, so a zero-length
  // span still marks where the iteration starts or ends.
  const std::vector<Interval>& defining = compute.empty() ? comm : compute;
  Interval window{std::numeric_limits<std::int64_t>::max(),
                  std::numeric_limits<std::int64_t>::min()};
  for (const Interval& i : defining) {
    window.start_ns = std::min(window.start_ns, i.start_ns);
    window.end_ns = std::max(window.end_ns, i.end_ns);
  }
  if (defining.empty()) window = {0, 0};
  m.start_ns = window.start_ns;
  m.e2e_ns = window.length();

  const IntervalSet compute_set = union_of(std::move(compute));
  const IntervalSet comm_set = union_of(std::move(comm));
  const IntervalSet comm_in_window = clip(comm_set, window);
  m.t_ovl_ns = intersection_length(compute_set, comm_set);
  m.t_exposed_comm_ns =
      total_length(comm_in_window) - intersection_length(compute_set, comm_in_window);
  m.t_comm_outside_ns = total_length(comm_set) - total_length(comm_in_window);
  const std::int64_t busy = total_length(clip(unite(compute_set, comm_set), window));
  m.t_other_ns = std::max<std::int64_t>(0, m.e2e_ns - busy);
  return m;
}

}  // namespace

std::vector<IterationMetrics> compute_iteration_metrics(const Timeline& timeline) {
  std::vector<const Span*> spans;
  spans.reserve(timeline.spans.size());
  for (const Span& s : timeline.spans) {
    if (s.step >= 0) spans.push_back(&s);
  }
  std::sort(spans.begin(), spans.end(), [](const Span* a, const Span* b) {
    return a->rank != b->rank ? a->rank < b->rank : a->step < b->step;
  });
  std::vector<IterationMetrics> out;
  std::vector<const Span*> group;
  for (std::size_t i = 0; i < spans.size();) {
    std::size_t j = i;
    bool has_activity = false;  // a group of only wait/idle spans is no iteration
    group.clear();
    while (j < spans.size() && spans[j]->rank == spans[i]->rank &&
           spans[j]->step == spans[i]->step) {
      has_activity |= spans[j]->lane == Lane::kCompute || spans[j]->lane == Lane::kComm;
      group.push_back(spans[j++]);
    }
    if (has_activity) out.push_back(measure_iteration(group));
    i = j;
  }
  return out;
}

std::vector<StepMetrics> aggregate_steps(const std::vector<IterationMetrics>& per_rank) {
  std::vector<const IterationMetrics*> sorted;
  sorted.reserve(per_rank.size());
  for (const IterationMetrics& m : per_rank) sorted.push_back(&m);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return a->step != b->step ? a->step < b->step : a->rank < b->rank;
  });
  std::vector<StepMetrics> out;
  for (std::size_t i = 0; i < sorted.size();) {
    StepMetrics s;
    s.step = sorted[i]->step;
    s.slowest_rank = sorted[i]->rank;
    s.e2e_ns = -1;
    std::size_t j = i;
    for (; j < sorted.size() && sorted[j]->step == s.step; ++j) {
      const IterationMetrics& m = *sorted[j];
      ++s.ranks;
      // Strictly greater keeps the lowest rank on ties (ranks are visited in order).
      if (static_cast<double>(m.e2e_ns) > s.e2e_ns) {
        s.e2e_ns = static_cast<double>(m.e2e_ns);
        s.slowest_rank = m.rank;
      }
      s.t_comp_ns += static_cast<double>(m.t_comp_ns);
      s.t_comm_ns += static_cast<double>(m.t_comm_ns);
      s.t_ovl_ns += static_cast<double>(m.t_ovl_ns);
      s.t_wait_ns += static_cast<double>(m.t_wait_ns);
      s.t_exposed_comm_ns += static_cast<double>(m.t_exposed_comm_ns);
      s.t_other_ns += static_cast<double>(m.t_other_ns);
      s.bytes += static_cast<double>(m.bytes);
    }
    const double n = s.ranks;
    for (double* mean : {&s.t_comp_ns, &s.t_comm_ns, &s.t_ovl_ns, &s.t_wait_ns,
                         &s.t_exposed_comm_ns, &s.t_other_ns, &s.bytes}) {
      *mean /= n;
    }
    out.push_back(s);
    i = j;
  }
  return out;
}

std::vector<StepMetrics> compute_step_metrics(const Timeline& timeline) {
  return aggregate_steps(compute_iteration_metrics(timeline));
}

std::vector<StepMetrics> drop_warmup(const std::vector<StepMetrics>& steps, std::size_t warmup) {
  std::vector<StepMetrics> sorted = steps;
  std::sort(sorted.begin(), sorted.end(),
            [](const StepMetrics& a, const StepMetrics& b) { return a.step < b.step; });
  if (warmup >= sorted.size()) return {};
  sorted.erase(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(warmup));
  return sorted;
}

Summary summarize_ms(const std::vector<StepMetrics>& steps, double StepMetrics::*field) {
  std::vector<double> values;
  values.reserve(steps.size());
  for (const StepMetrics& s : steps) values.push_back(s.*field / 1e6);
  return summarize(values);
}

double hidden_share(double t_ovl_ns, double t_comm_ns) { return ratio(t_ovl_ns, t_comm_ns); }

double hidden_share(const std::vector<StepMetrics>& steps) {
  double ovl = 0, comm = 0;
  for (const StepMetrics& s : steps) {
    ovl += s.t_ovl_ns;
    comm += s.t_comm_ns;
  }
  return hidden_share(ovl, comm);
}

DerivedMetrics derive(double t_comp_iso_ns, double t_comm_iso_ns, double e2e_seq_ns,
                      double t_comp_ovl_ns, double t_comm_ovl_ns, double t_ovl_ns,
                      double e2e_ovl_ns) {
  DerivedMetrics d;
  // A baseline without compute cannot say how much compute slowed (an all-zero-length
  // baseline would make E2E_ideal negative): undefined, unless there is none to slow.
  const double slowdown_ns = t_comp_iso_ns <= 0 && t_comp_ovl_ns > 0
                                 ? kUndefined
                                 : t_comp_ovl_ns - t_comp_iso_ns;
  d.compute_slowdown = ratio(slowdown_ns, t_comp_iso_ns);
  d.overlap_ratio = ratio(t_ovl_ns, t_comp_ovl_ns);
  d.e2e_ideal_ns = e2e_ovl_ns - slowdown_ns;
  d.e2e_seq_model_ns = d.e2e_ideal_ns + t_ovl_ns;
  d.e2e_seq_model_error_ns = d.e2e_seq_model_ns - e2e_seq_ns;
  d.hidden_share = hidden_share(t_ovl_ns, t_comm_ovl_ns);
  d.overlap_benefit_ns = e2e_seq_ns - e2e_ovl_ns;
  d.contention_loss_ns = e2e_ovl_ns - d.e2e_ideal_ns;
  // std::min would return its first argument for a NaN second one; keep NaN sticky.
  const double hideable = std::isnan(t_comp_iso_ns) || std::isnan(t_comm_iso_ns)
                              ? kUndefined
                              : std::min(t_comp_iso_ns, t_comm_iso_ns);
  d.overlap_efficiency = ratio(d.overlap_benefit_ns, hideable);
  d.exposed_comm_ns = t_comm_ovl_ns - t_ovl_ns;
  return d;
}

ScenarioInputs scenario_inputs(const std::vector<StepMetrics>& compute_only,
                               const std::vector<StepMetrics>& comm_only,
                               const std::vector<StepMetrics>& sequential,
                               const std::vector<StepMetrics>& overlapped) {
  ScenarioInputs in;
  for (const StepMetrics& s : compute_only) in.t_comp_iso_ns.push_back(s.t_comp_ns);
  for (const StepMetrics& s : comm_only) in.t_comm_iso_ns.push_back(s.t_comm_ns);
  for (const StepMetrics& s : sequential) in.e2e_seq_ns.push_back(s.e2e_ns);
  for (const StepMetrics& s : overlapped) {
    in.t_comp_ovl_ns.push_back(s.t_comp_ns);
    in.t_comm_ovl_ns.push_back(s.t_comm_ns);
    in.t_ovl_ns.push_back(s.t_ovl_ns);
    in.e2e_ovl_ns.push_back(s.e2e_ns);
  }
  return in;
}

ScenarioMetrics compute_scenario_metrics(const ScenarioInputs& in) {
  const std::size_t n = in.e2e_ovl_ns.size();
  if (in.t_comp_ovl_ns.size() != n || in.t_comm_ovl_ns.size() != n || in.t_ovl_ns.size() != n) {
    throw UsageError("overlapped series differ in length (t_comp " +
                     std::to_string(in.t_comp_ovl_ns.size()) + ", t_comm " +
                     std::to_string(in.t_comm_ovl_ns.size()) + ", t_ovl " +
                     std::to_string(in.t_ovl_ns.size()) + ", e2e " + std::to_string(n) + ")");
  }
  const double comp_iso = median_of(in.t_comp_iso_ns);
  const double comm_iso = median_of(in.t_comm_iso_ns);
  const double e2e_seq = median_of(in.e2e_seq_ns);
  std::vector<DerivedMetrics> derived;
  derived.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    derived.push_back(derive(comp_iso, comm_iso, e2e_seq, in.t_comp_ovl_ns[i], in.t_comm_ovl_ns[i],
                             in.t_ovl_ns[i], in.e2e_ovl_ns[i]));
  }
  ScenarioMetrics out;
  std::vector<double> series(n);
  for (const MetricDef& metric : metric_catalogue()) {
    if (metric.input != nullptr) {
      out.*metric.summary = summarize(in.*metric.input);
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) series[i] = derived[i].*metric.derived;
    out.*metric.summary = summarize(series);
  }
  return out;
}

void to_json(nlohmann::json& j, const IterationMetrics& m) {
  j = nlohmann::json{{"rank", m.rank},
                     {"step", m.step},
                     {"start_ns", m.start_ns},
                     {"e2e_ns", m.e2e_ns},
                     {"t_comp_ns", m.t_comp_ns},
                     {"t_comm_ns", m.t_comm_ns},
                     {"t_ovl_ns", m.t_ovl_ns},
                     {"t_wait_ns", m.t_wait_ns},
                     {"t_exposed_comm_ns", m.t_exposed_comm_ns},
                     {"t_other_ns", m.t_other_ns},
                     {"t_comm_outside_ns", m.t_comm_outside_ns},
                     {"bytes", m.bytes},
                     {"compute_spans", m.compute_spans},
                     {"comm_spans", m.comm_spans}};
}

void to_json(nlohmann::json& j, const StepMetrics& m) {
  j = nlohmann::json{{"step", m.step},
                     {"ranks", m.ranks},
                     {"slowest_rank", m.slowest_rank},
                     {"e2e_ns", number_or_null(m.e2e_ns)},
                     {"t_comp_ns", number_or_null(m.t_comp_ns)},
                     {"t_comm_ns", number_or_null(m.t_comm_ns)},
                     {"t_ovl_ns", number_or_null(m.t_ovl_ns)},
                     {"t_wait_ns", number_or_null(m.t_wait_ns)},
                     {"t_exposed_comm_ns", number_or_null(m.t_exposed_comm_ns)},
                     {"t_other_ns", number_or_null(m.t_other_ns)},
                     {"bytes", number_or_null(m.bytes)}};
}

void to_json(nlohmann::json& j, const DerivedMetrics& d) {
  j = nlohmann::json::object();
  for (const MetricDef& metric : metric_catalogue()) {
    if (metric.derived != nullptr) j[metric.key] = number_or_null(d.*metric.derived);
  }
}

void to_json(nlohmann::json& j, const ScenarioMetrics& m) {
  j = nlohmann::json::object();
  for (const MetricDef& metric : metric_catalogue()) j[metric.key] = m.*metric.summary;
}

}  // namespace tandem
