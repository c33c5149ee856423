// What `tandem analyze` reports about imported traces: the metrics of analysis/metrics.h
// per rank and iteration, their summary over iterations, and (with a compute-only
// baseline) compute slowdown and ideal iteration time, as text and CSV (summary.json's body
// is report/analyze_summary.h's: the importer does not know the results layout).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analysis/metrics.h"
#include "analysis/waiting.h"
#include "trace_import/kernel_slowdown.h"
#include "trace_import/trace_import.h"

namespace tandem {

// Per-iteration quantities beyond IterationMetrics. The four parts of the temporal
// breakdown add up to e2e exactly (the identity in metrics.h):
//   compute_only + overlapped + exposed_comm + idle = e2e.
struct IterationBreakdown {
  std::int64_t compute_only_ns = 0;   // |∪compute| − t_ovl: computing, not communicating
  std::int64_t overlapped_ns = 0;     // t_ovl: computing while communicating
  std::int64_t exposed_comm_ns = 0;   // communicating, not computing
  std::int64_t idle_ns = 0;           // t_other: neither (memory copies, CPU gaps)
  double hidden_share = kUndefined;   // t_ovl / t_comm (HTA)
  double overlap_ratio = kUndefined;  // t_ovl / t_comp (eq. 2)
};
IterationBreakdown breakdown(const IterationMetrics& m);

struct AnalyzeResult {
  std::size_t warmup = 0;                    // iterations (steps) dropped at the start
  std::vector<IterationMetrics> iterations;  // measured, per rank per step
  std::vector<StepMetrics> steps;            // measured, across ranks
  std::vector<StepMetrics> baseline_steps;   // measured baseline steps (empty: none)
  bool has_baseline = false;
  ScenarioMetrics scenario;          // compute-only = baseline, overlapped = the analyzed run
  double hidden_share = kUndefined;  // Σ T_ovl / Σ T_comm over measured steps (HTA)
  // Per step, ms: E2E (slowest rank), the rest the mean over ranks.
  Summary e2e_ms, compute_ms, comm_ms, overlap_ms, exposed_comm_ms, idle_ms;

  // From analyze_imports: the parts that need more than a timeline.
  struct Rank {
    ImportedRank import;
    HtaOverlap last_step_out, last_step_in;  // HTA's default and include_last_profiler_step
  };
  std::vector<Rank> ranks;                      // Kineto ranks, HTA's whole-trace numbers
  bool hta_step_filter = false;                 // HTA left the last ProfilerStep out
  std::vector<CollectiveRow> collectives;       // measured iterations
  std::optional<KernelSlowdownReport> kernels;  // with a Kineto baseline
  // The time blocked on collectives (the comm spans, or the wait spans of tandem's own
  // traces) split into skew and transfer over the measured iterations
  // (analysis/waiting.h), and whose clocks the arrivals were read from.
  WaitingAnalysis waiting;
};

// `baseline` may be null. Throws UsageError when nothing is left to analyze.
AnalyzeResult analyze_timeline(const Timeline& run, const Timeline* baseline, std::size_t warmup);

// Throws UsageError naming --baseline when `baseline` cannot be the run's compute-only
// profile: another trace format, other ranks, GPU kernels on one side only.
void check_baseline_matches(const ImportResult& run, const ImportResult& baseline);
// analyze_timeline and, for Kineto inputs, HTA's per-rank overlap, the collectives table
// and (with a baseline, check_baseline_matches first) the kernels contention slows.
AnalyzeResult analyze_imports(const ImportResult& run, const ImportResult* baseline,
                              std::size_t warmup);

std::string format_iteration_table(const AnalyzeResult& result);
// A row per rank, HTA's numbers (empty when no input was a Kineto trace).
std::string format_rank_table(const AnalyzeResult& result);
// The collectives, longest total time first, at most `max_rows` (the rest summed up).
std::string format_collective_table(const AnalyzeResult& result, std::size_t max_rows);
// The kernels that gained the most time under overlap, at most `max_rows`.
std::string format_kernel_table(const AnalyzeResult& result, std::size_t max_rows);
std::string collectives_csv(const AnalyzeResult& result);
std::string kernels_csv(const AnalyzeResult& result);
std::string format_analyze_summary(const AnalyzeResult& result);
// A row per rank per measured iteration.
std::string iterations_csv(const AnalyzeResult& result);

}  // namespace tandem
