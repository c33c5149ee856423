// tandem's metrics, implemented once: every producer's spans and every report go through
// here (docs/METRICS.md states the same rules for readers).
//
// Three levels:
//   1. IterationMetrics: one rank, one training step, measured from spans.
//   2. StepMetrics: one step across ranks.
//        e2e_ns      = max over ranks (an iteration is as slow as its slowest rank);
//        every other = mean over the ranks that recorded the step.
//   3. ScenarioMetrics: the derived equations over the four scenarios (compute-only,
//      comm-only, sequential, overlapped), summarized over the measured iterations.
//
// NaN means "undefined" (a zero denominator, a missing scenario); it is skipped by
// summarize() and written as null in JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "analysis/statistics.h"
#include "timeline/recorder.h"

namespace tandem {

// One rank, one step. Reads spans with that rank and step (spans with step < 0 belong to
// no iteration and are ignored):
//   compute = Lane::kCompute spans, comm = Lane::kComm spans, wait = Lane::kWait spans.
// The iteration window W is [first compute start, last compute end) (first forward
// kernel to optimizer end). Compute-defined even when a collective ends after the
// optimizer; such comm time is reported as t_comm_outside_ns rather than stretching E2E.
// A step with comm spans but no compute spans (the comm-only scenario) uses the comm
// spans' hull as its window instead.
//
// Identity (exact, by construction): e2e = |∪compute| + t_exposed_comm + t_other.
// When compute spans do not overlap each other |∪compute| = t_comp, so
// t_exposed_comm = e2e − t_comp − t_other as docs/METRICS.md writes it.
struct IterationMetrics {
  std::int32_t rank = 0;
  std::int32_t step = 0;
  std::int64_t start_ns = 0;           // window start
  std::int64_t e2e_ns = 0;             // window length
  std::int64_t t_comp_ns = 0;          // Σ compute durations
  std::int64_t t_comm_ns = 0;          // Σ comm durations
  std::int64_t t_ovl_ns = 0;           // |∪compute ∩ ∪comm|
  std::int64_t t_wait_ns = 0;          // Σ wait durations
  std::int64_t t_exposed_comm_ns = 0;  // |(∪comm ∩ W) \ ∪compute| = |∪comm ∩ W| − t_ovl
  std::int64_t t_other_ns = 0;         // e2e − |(∪compute ∪ ∪comm) ∩ W|: neither ran
  std::int64_t t_comm_outside_ns = 0;  // |∪comm \ W|: comm outside the window
  std::int64_t bytes = 0;              // Σ comm span bytes
  std::int32_t compute_spans = 0;
  std::int32_t comm_spans = 0;
};

// Every (rank, step) that has a compute or comm span, sorted by (rank, step).
std::vector<IterationMetrics> compute_iteration_metrics(const Timeline& timeline);

// One step across ranks (see the header comment for max vs mean).
struct StepMetrics {
  std::int32_t step = 0;
  std::int32_t ranks = 0;         // ranks that recorded this step
  std::int32_t slowest_rank = 0;  // the rank whose e2e is the step's e2e (lowest on ties)
  double e2e_ns = 0;              // max over ranks
  double t_comp_ns = 0;           // the rest: mean over ranks
  double t_comm_ns = 0;
  double t_ovl_ns = 0;
  double t_wait_ns = 0;
  double t_exposed_comm_ns = 0;
  double t_other_ns = 0;
  double bytes = 0;
};

// Aggregates per-rank metrics (any order) into one entry per step, sorted by step.
std::vector<StepMetrics> aggregate_steps(const std::vector<IterationMetrics>& per_rank);
// Convenience: compute_iteration_metrics + aggregate_steps.
std::vector<StepMetrics> compute_step_metrics(const Timeline& timeline);
// The steps without the first `warmup` ones in step order (empty if fewer).
std::vector<StepMetrics> drop_warmup(const std::vector<StepMetrics>& steps, std::size_t warmup);
// One field over steps, in milliseconds (fields are in ns).
Summary summarize_ms(const std::vector<StepMetrics>& steps, double StepMetrics::*field);

// The hidden share of communication, T_ovl / T_comm (docs/METRICS.md): undefined where
// nothing was communicated. Over steps, Σ T_ovl / Σ T_comm (HTA's "communication
// overlap"). The catalogue's hidden_share (T_ovl / T_comm_ovl) is the first form.
double hidden_share(double t_ovl_ns, double t_comm_ns);
double hidden_share(const std::vector<StepMetrics>& steps);

// The derived quantities of one overlapped iteration against its baselines
// (docs/METRICS.md: equations 1-5 and the rest of its table). All times in ns.
// exposed_comm_ns is T_comm_ovl − T_ovl because "other" is not among the inputs; it
// equals E2E_ovl − T_comp_ovl − other for one rank when neither lane's spans
// overlap each other and communication stays inside the iteration window. The exact,
// union-based value per rank is IterationMetrics::t_exposed_comm_ns.
struct DerivedMetrics {
  double compute_slowdown = kUndefined;        // S = (T_comp_ovl − T_comp_iso) / T_comp_iso
  double overlap_ratio = kUndefined;           // R = T_ovl / T_comp_ovl
  double e2e_ideal_ns = kUndefined;            // E2E_ovl − (T_comp_ovl − T_comp_iso)
  double e2e_seq_model_ns = kUndefined;        // E2E_ideal + T_ovl
  double e2e_seq_model_error_ns = kUndefined;  // E2E_seq_model − E2E_seq (measured)
  double hidden_share = kUndefined;            // T_ovl / T_comm_ovl
  double overlap_benefit_ns = kUndefined;      // E2E_seq − E2E_ovl
  double contention_loss_ns = kUndefined;  // E2E_ovl − E2E_ideal (= T_comp_ovl − T_comp_iso)
  double overlap_efficiency = kUndefined;  // (E2E_seq − E2E_ovl) / min(T_comp_iso, T_comm_iso)
  double exposed_comm_ns = kUndefined;     // T_comm_ovl − T_ovl: communication not hidden
};

// From plain numbers (tests, the synthetic oracle). A ratio whose denominator is <= 0 is
// NaN, and NaN inputs propagate to whatever depends on them.
DerivedMetrics derive(double t_comp_iso_ns, double t_comm_iso_ns, double e2e_seq_ns,
                      double t_comp_ovl_ns, double t_comm_ovl_ns, double t_ovl_ns,
                      double e2e_ovl_ns);

// Per-iteration series of the four scenarios, warm-up already dropped. A baseline series
// may be empty (scenario not run): its median is NaN and so is everything that needs it.
struct ScenarioInputs {
  std::vector<double> t_comp_iso_ns;  // compute-only: T_comp per iteration
  std::vector<double> t_comm_iso_ns;  // comm-only: T_comm per iteration
  std::vector<double> e2e_seq_ns;     // sequential: E2E per iteration
  // Overlapped: four series of equal length, one entry per iteration.
  std::vector<double> t_comp_ovl_ns;
  std::vector<double> t_comm_ovl_ns;
  std::vector<double> t_ovl_ns;
  std::vector<double> e2e_ovl_ns;
};

// Builds the inputs from each scenario's step metrics (warm-up already dropped).
ScenarioInputs scenario_inputs(const std::vector<StepMetrics>& compute_only,
                               const std::vector<StepMetrics>& comm_only,
                               const std::vector<StepMetrics>& sequential,
                               const std::vector<StepMetrics>& overlapped);

// Every measured and derived quantity as a Summary over iterations.
// Rule: baselines come from other runs, so their iterations do not pair with the
// overlapped run's. Each overlapped iteration i is derived against the MEDIAN of each
// baseline series: d_i = derive(median(T_comp_iso), median(T_comm_iso), median(E2E_seq),
// T_comp_ovl[i], T_comm_ovl[i], T_ovl[i], E2E_ovl[i]); each derived field is then
// summarized over i. Baseline summaries are of their own series.
struct ScenarioMetrics {
  Summary t_comp_iso_ns, t_comm_iso_ns, e2e_seq_ns;
  Summary t_comp_ovl_ns, t_comm_ovl_ns, t_ovl_ns, e2e_ovl_ns;
  Summary compute_slowdown, overlap_ratio, e2e_ideal_ns, e2e_seq_model_ns, e2e_seq_model_error_ns,
      hidden_share, overlap_benefit_ns, contention_loss_ns, overlap_efficiency, exposed_comm_ns;
};

// Throws UsageError if the four overlapped series differ in length.
ScenarioMetrics compute_scenario_metrics(const ScenarioInputs& inputs);

// JSON with the field names above (times keep their _ns suffix); NaN becomes null.
// DerivedMetrics and ScenarioMetrics take their keys from metric_catalogue().
void to_json(nlohmann::json& j, const IterationMetrics& m);
void to_json(nlohmann::json& j, const StepMetrics& m);
void to_json(nlohmann::json& j, const DerivedMetrics& m);
void to_json(nlohmann::json& j, const ScenarioMetrics& m);

}  // namespace tandem
