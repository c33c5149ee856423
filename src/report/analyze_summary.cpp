#include "report/analyze_summary.h"

namespace tandem {

namespace {

nlohmann::json files_json(const ImportResult& imported) {
  nlohmann::json files = nlohmann::json::array();
  const auto pct = [&](const HtaRankModes& modes, bool all) {
    const HtaOverlap& h = imported.hta(modes, all);
    return h.defined ? nlohmann::json(h.hidden_pct) : nlohmann::json(nullptr);
  };
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
                     {"names_cut", f.names_cut},
                     {"devices", f.devices},
                     {"hta_file_hidden_share_pct",
                      f.hta_file ? pct(*f.hta_file, false) : nlohmann::json(nullptr)},
                     {"hta_file_hidden_share_pct_all_steps",
                      f.hta_file ? pct(*f.hta_file, true) : nlohmann::json(nullptr)}});
  }
  return files;
}

nlohmann::json ranks_json(const AnalyzeResult& r) {
  nlohmann::json ranks = nlohmann::json::array();
  const auto pct = [](const HtaOverlap& h) {
    return h.defined ? nlohmann::json(h.hidden_pct) : nlohmann::json(nullptr);
  };
  for (const AnalyzeResult::Rank& k : r.ranks) {
    const HtaOverlap& h = k.last_step_out;
    ranks.push_back({{"rank", k.import.rank},
                     {"file", k.import.file},
                     {"device", k.import.device >= 0 ? nlohmann::json(k.import.device)
                                                     : nlohmann::json(nullptr)},
                     {"hidden_share_pct", pct(h)},
                     {"hidden_share_pct_all_steps", pct(k.last_step_in)},
                     {"compute_ms", h.compute_us / 1e3},
                     {"comm_ms", h.comm_us / 1e3},
                     {"overlap_ms", h.overlap_us / 1e3},
                     {"idle_ms", h.idle_us / 1e3},
                     {"kernels", h.kernels},
                     {"all_steps",
                      {{"compute_ms", k.last_step_in.compute_us / 1e3},
                       {"comm_ms", k.last_step_in.comm_us / 1e3},
                       {"overlap_ms", k.last_step_in.overlap_us / 1e3},
                       {"idle_ms", k.last_step_in.idle_us / 1e3},
                       {"kernels", k.last_step_in.kernels}}}});
  }
  return ranks;
}

nlohmann::json collectives_json(const AnalyzeResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const CollectiveRow& c : r.collectives) {
    rows.push_back({{"collective", std::string(to_string(c.type))},
                    {"bytes", c.bytes >= 0 ? nlohmann::json(c.bytes) : nlohmann::json(nullptr)},
                    {"group_size",
                     c.group_size > 0 ? nlohmann::json(c.group_size) : nlohmann::json(nullptr)},
                    {"dtype", c.dtype.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.dtype)},
                    {"count", c.count},
                    {"time_ns", c.time_ns},
                    {"hidden_ns", c.hidden_ns},
                    {"hidden_share", number_or_null(c.hidden_share())},
                    {"algbw_GBps", number_or_null(c.algbw_gbps())},
                    {"busbw_GBps", number_or_null(c.busbw_gbps())}});
  }
  return rows;
}

nlohmann::json kernels_json(const AnalyzeResult& r) {
  if (!r.kernels) return nullptr;
  const KernelSlowdownReport& k = *r.kernels;
  nlohmann::json rows = nlohmann::json::array();
  for (const KernelSlowdown& s : k.kernels) {
    nlohmann::json over = nlohmann::json::array();
    for (const ContendingCollective& c : s.collectives) {
      over.push_back({{"collective", std::string(to_string(c.type))},
                      {"bytes", c.bytes >= 0 ? nlohmann::json(c.bytes) : nlohmann::json(nullptr)},
                      {"overlap_ns", c.overlap_ns}});
    }
    rows.push_back({{"name", s.name},
                    {"count", s.count},
                    {"alone_ns", s.alone_ns},
                    {"overlapped_ns", s.overlapped_ns},
                    {"slowdown", number_or_null(s.slowdown())},
                    {"under_comm_ns", s.under_comm_ns},
                    {"collectives", std::move(over)}});
  }
  return {{"iterations_paired", k.iterations_paired},
          {"unmatched_run", k.unmatched_run},
          {"unmatched_baseline", k.unmatched_baseline},
          {"names_only_run", k.names_only_run},
          {"names_only_baseline", k.names_only_baseline},
          {"kernels", std::move(rows)}};
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
      {"waiting", waiting_json(r.waiting)},
      {"metrics", r.scenario},  // ScenarioMetrics, the key tandem characterize uses
      {"steps", r.steps},
      {"baseline_steps", r.baseline_steps},
      {"iterations", breakdowns},
      {"hta_last_step_filter", r.hta_step_filter},
      {"ranks", ranks_json(r)},
      {"collectives", collectives_json(r)},
      {"kernel_slowdown", kernels_json(r)},
  };
}

}  // namespace tandem
