#include "report/analyze_summary.h"

namespace tandem {

namespace {

nlohmann::json files_json(const ImportResult& imported) {
  nlohmann::json files = nlohmann::json::array();
  for (const TraceFileInfo& f : imported.files) {
    files.push_back({{"path", f.path},
                     {"format", f.format},
                     {"rank", f.rank >= 0 ? nlohmann::json(f.rank) : nlohmann::json(nullptr)},
                     {"rank_source", f.rank_source},
                     {"bytes", f.bytes},
                     {"trace_events", f.trace_events},
                     {"compute_spans", f.compute},
                     {"comm_spans", f.comm},
                     {"memory_spans", f.memory},
                     {"ignored_events", f.ignored},
                     {"outside_steps", f.outside_steps},
                     {"step_windows", f.step_windows},
                     {"names_cut", f.names_cut}});
  }
  return files;
}

}  // namespace

nlohmann::json analyze_summary_body(const AnalyzeResult& r, const ImportResult& run,
                                    const ImportResult* baseline,
                                    const ClassificationRules& rules) {
  nlohmann::json breakdowns = nlohmann::json::array();
  for (const IterationMetrics& m : r.iterations) {
    const IterationBreakdown b = breakdown(m);
    nlohmann::json j = m;
    j["compute_only_ns"] = b.compute_only_ns;
    j["hidden_share"] = number_or_null(b.hidden_share);
    j["overlap_ratio"] = number_or_null(b.overlap_ratio);
    breakdowns.push_back(std::move(j));
  }
  return {
      {"inputs", files_json(run)},
      {"baseline_inputs", baseline != nullptr ? files_json(*baseline) : nlohmann::json(nullptr)},
      {"classification",
       {{"comm_regex", rules.comm},
        {"memory_regex", rules.memory},
        {"compute_regex",
         rules.compute.empty() ? nlohmann::json(nullptr) : nlohmann::json(rules.compute)}}},
      {"warmup", r.warmup},
      {"measured_iterations", r.steps.size()},
      {"hidden_share", number_or_null(r.hidden_share)},
      {"e2e_ms", r.e2e_ms},
      {"compute_ms", r.compute_ms},
      {"comm_ms", r.comm_ms},
      {"overlap_ms", r.overlap_ms},
      {"exposed_comm_ms", r.exposed_comm_ms},
      {"idle_ms", r.idle_ms},
      {"metrics", r.scenario},  // ScenarioMetrics, the key tandem characterize uses
      {"steps", r.steps},
      {"baseline_steps", r.baseline_steps},
      {"iterations", breakdowns},
  };
}

}  // namespace tandem
