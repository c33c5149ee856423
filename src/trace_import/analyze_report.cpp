#include "trace_import/analyze_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "analysis/metric_catalogue.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {
namespace {

double ratio(double num, double den) { return den > 0 ? num / den : kUndefined; }

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
  b.hidden_share = hidden_share(static_cast<double>(m.t_ovl_ns), static_cast<double>(m.t_comm_ns));
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

  r.hidden_share = hidden_share(r.steps);
  r.e2e_ms = summarize_ms(r.steps, &StepMetrics::e2e_ns);
  r.compute_ms = summarize_ms(r.steps, &StepMetrics::t_comp_ns);
  r.comm_ms = summarize_ms(r.steps, &StepMetrics::t_comm_ns);
  r.overlap_ms = summarize_ms(r.steps, &StepMetrics::t_ovl_ns);
  r.exposed_comm_ms = summarize_ms(r.steps, &StepMetrics::t_exposed_comm_ns);
  r.idle_ms = summarize_ms(r.steps, &StepMetrics::t_other_ns);
  r.waiting = explain_waiting(run, r.steps.front().step);
  r.waiting.clocks = "as the trace recorded them";
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
  if (const std::string lines = format_waiting(r.waiting, "    "); !lines.empty()) {
    text += std::string("  blocked on communication (") +
            (r.waiting.from_wait_spans ? "wait spans" : "the collectives' own time") +
            "), clocks: " + r.waiting.clocks + "\n" + lines;
  }
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

namespace tandem {
namespace {

// A collective's size as format_bytes prints it, "?" when unknown.
std::string size_text(std::int64_t bytes) {
  return bytes < 0 ? std::string("?") : format_bytes(static_cast<double>(bytes));
}

std::string number_text(double v, const char* format) {
  if (std::isnan(v)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string csv_number(double v) { return std::isnan(v) ? std::string() : std::to_string(v); }

// CSV text field: quoted, quotes doubled (kernel names hold commas), control characters
// as \xNN (a NUL or an escape in a dtype or kernel name).
std::string csv_text(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    append_visible(out, c, /*keep_whitespace=*/false);
  }
  return out + "\"";
}

std::string cut(std::string_view s, std::size_t width) {
  if (s.size() <= width) return std::string(s);
  return std::string(s.substr(0, width - 3)) + "...";
}

std::vector<std::int32_t> step_ids(const std::vector<StepMetrics>& steps) {
  std::vector<std::int32_t> ids;
  for (const StepMetrics& s : steps) ids.push_back(s.step);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

namespace {

std::set<std::int32_t> ranks_of(const Timeline& timeline) {
  std::set<std::int32_t> out;
  for (const Span& s : timeline.spans) out.insert(s.rank);
  return out;
}

std::string ranks_text(const std::set<std::int32_t>& ranks) {
  std::string out;
  std::size_t shown = 0;
  for (const std::int32_t r : ranks) {
    if (shown++ == 8) return out + ", ... (" + std::to_string(ranks.size()) + " ranks)";
    out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

std::string formats_of(const ImportResult& imported) {
  std::set<std::string> formats;
  for (const TraceFileInfo& f : imported.files) formats.insert(f.format);
  std::string out;
  for (const std::string& f : formats) out += (out.empty() ? "" : "+") + f;
  return out;
}

}  // namespace

void check_baseline_matches(const ImportResult& run, const ImportResult& baseline) {
  const std::string run_formats = formats_of(run), base_formats = formats_of(baseline);
  if (run_formats != base_formats) {
    throw UsageError("--baseline: a " + base_formats + " trace is not the baseline of a " +
                     run_formats + " trace (the same job profiled without communication is)");
  }
  const std::set<std::int32_t> run_ranks = ranks_of(run.timeline);
  const std::set<std::int32_t> base_ranks = ranks_of(baseline.timeline);
  if (!base_ranks.empty() && !run_ranks.empty() && run_ranks != base_ranks) {
    throw UsageError("--baseline: its ranks (" + ranks_text(base_ranks) +
                     ") are not the trace's (" + ranks_text(run_ranks) +
                     "): the baseline is the same job profiled without communication");
  }
  const bool run_gpu = std::any_of(run.files.begin(), run.files.end(),
                                   [](const TraceFileInfo& f) { return f.devices > 0; });
  const bool base_gpu = std::any_of(baseline.files.begin(), baseline.files.end(),
                                    [](const TraceFileInfo& f) { return f.devices > 0; });
  if (run_gpu != base_gpu) {
    throw UsageError(std::string("--baseline: a profile ") + (base_gpu ? "with" : "without") +
                     " GPU kernels is not the baseline of one " + (run_gpu ? "with" : "without") +
                     " them");
  }
}

AnalyzeResult analyze_imports(const ImportResult& run, const ImportResult* baseline,
                              std::size_t warmup) {
  if (baseline != nullptr) check_baseline_matches(run, *baseline);
  AnalyzeResult r =
      analyze_timeline(run.timeline, baseline != nullptr ? &baseline->timeline : nullptr, warmup);
  r.hta_step_filter = run.hta_step_filter;
  if (!run.ranks.empty()) {
    r.waiting.clocks =
        "each Kineto trace's own host clock, as the profiler wrote it (not aligned "
        "across hosts: their offset adds to the skew)";
  }
  for (const ImportedRank& rank : run.ranks) {
    r.ranks.push_back({rank, run.hta(rank, false), run.hta(rank, true)});
  }
  r.collectives = collective_table(run.timeline, run.comm, step_ids(r.steps));
  if (baseline != nullptr && !run.ranks.empty()) {
    r.kernels = kernel_slowdown(run.timeline, run.comm, step_ids(r.steps), baseline->timeline,
                                step_ids(r.baseline_steps));
  }
  return r;
}

std::string format_rank_table(const AnalyzeResult& r) {
  if (r.ranks.empty()) return "";
  std::string text =
      "\nper rank, as HTA's get_comm_comp_overlap (whole trace, not per iteration; HTA's "
      "default leaves the last ProfilerStep out, 'all' keeps it)\n";
  if (!r.hta_step_filter) {
    text += "  (fewer than two ProfilerStep names in the traces: HTA keeps every kernel in both)\n";
  }
  text += "rank  device   hidden  hidden(all)  compute_ms    comm_ms  overlap_ms    idle_ms  file\n";
  char row[512];
  for (const AnalyzeResult::Rank& k : r.ranks) {
    const HtaOverlap& h = k.last_step_out;
    const std::string device = k.import.device >= 0 ? std::to_string(k.import.device) : "-";
    const auto pct = [](const HtaOverlap& o) {
      return o.defined ? number_text(o.hidden_pct, "%.2f%%") : std::string("n/a");
    };
    std::snprintf(row, sizeof row, "%4d  %6s  %7s  %11s  %10.3f %10.3f  %10.3f %10.3f  ",
                  k.import.rank, device.c_str(), pct(h).c_str(), pct(k.last_step_in).c_str(),
                  h.compute_us / 1e3, h.comm_us / 1e3, h.overlap_us / 1e3, h.idle_us / 1e3);
    text += row + k.import.file + "\n";
  }
  return text;
}

std::string format_collective_table(const AnalyzeResult& r, std::size_t max_rows) {
  if (r.collectives.empty()) return "";
  std::string text =
      "\ncollectives over the measured iterations (size and bandwidths as nccl-tests; longest "
      "total time first)\n"
      "collective          size  group  dtype       count    time_ms   mean_us   hidden  "
      "algbw_GB/s  busbw_GB/s\n";
  char row[320];
  std::size_t shown = 0, rest_count = 0;
  std::int64_t rest_ns = 0;
  for (const CollectiveRow& c : r.collectives) {
    if (shown == max_rows) {
      rest_count += c.count;
      rest_ns += c.time_ns;
      continue;
    }
    ++shown;
    const std::string group = c.group_size > 0 ? std::to_string(c.group_size) : "?";
    std::snprintf(row, sizeof row, "%-14s %9s  %5s  %-10s %6zu %10.3f %9.1f %8s %11s %11s\n",
                  std::string(to_string(c.type)).c_str(), size_text(c.bytes).c_str(),
                  group.c_str(), cut(c.dtype.empty() ? "?" : c.dtype, 10).c_str(), c.count,
                  c.time_ns / 1e6, c.time_ns / 1e3 / static_cast<double>(c.count),
                  percent(c.hidden_share()).c_str(), number_text(c.algbw_gbps(), "%.2f").c_str(),
                  number_text(c.busbw_gbps(), "%.2f").c_str());
    text += row;
  }
  if (rest_count > 0) {
    std::snprintf(row, sizeof row, "  ... %zu more in %zu rows, %.3f ms (all in summary.json)\n",
                  rest_count, r.collectives.size() - shown, rest_ns / 1e6);
    text += row;
  }
  return text;
}

std::string format_kernel_table(const AnalyzeResult& r, std::size_t max_rows) {
  if (!r.kernels) return "";
  const KernelSlowdownReport& k = *r.kernels;
  char line[640];
  std::snprintf(line, sizeof line,
                "\nkernels slowed by overlap: run against baseline, %zu (rank, iteration) pairs, "
                "kernels matched by name and occurrence;\n  unmatched occurrences: %zu only in "
                "the run, %zu only in the baseline (%zu and %zu kernel names)\n",
                k.iterations_paired, k.unmatched_run, k.unmatched_baseline, k.names_only_run,
                k.names_only_baseline);
  std::string text = line;
  text +=
      "kernel                                         count  alone_ms  overlap_ms  slowdown  "
      "under_comm  collectives running over it\n";
  std::size_t shown = 0;
  for (const KernelSlowdown& s : k.kernels) {
    if (shown++ == max_rows) break;
    std::string over;
    for (std::size_t i = 0; i < s.collectives.size() && i < 3; ++i) {
      const ContendingCollective& c = s.collectives[i];
      char part[96];
      std::snprintf(part, sizeof part, "%s%s %s %.2f ms", i > 0 ? ", " : "",
                    std::string(to_string(c.type)).c_str(), size_text(c.bytes).c_str(),
                    c.overlap_ns / 1e6);
      over += part;
    }
    if (over.empty()) over = "-";
    const double under = s.overlapped_ns > 0 ? static_cast<double>(s.under_comm_ns) /
                                                   static_cast<double>(s.overlapped_ns)
                                             : kUndefined;
    std::snprintf(line, sizeof line, "%-45s %6zu %9.3f %11.3f %9s %11s  %s\n",
                  cut(s.name, 45).c_str(), s.count, s.alone_ns / 1e6, s.overlapped_ns / 1e6,
                  number_text(100 * s.slowdown(), "%+.1f%%").c_str(), percent(under).c_str(),
                  over.c_str());
    text += line;
  }
  return text;
}

std::string collectives_csv(const AnalyzeResult& r) {
  std::string csv =
      "collective,bytes,group_size,dtype,count,time_ns,hidden_ns,hidden_share,algbw_GBps,"
      "busbw_GBps\n";
  for (const CollectiveRow& c : r.collectives) {
    csv += std::string(to_string(c.type)) + "," + (c.bytes >= 0 ? std::to_string(c.bytes) : "") +
           "," + (c.group_size > 0 ? std::to_string(c.group_size) : "") + "," +
           csv_text(c.dtype) + "," + std::to_string(c.count) + "," + std::to_string(c.time_ns) +
           "," + std::to_string(c.hidden_ns) + "," + csv_number(c.hidden_share()) + "," +
           csv_number(c.algbw_gbps()) + "," + csv_number(c.busbw_gbps()) + "\n";
  }
  return csv;
}

std::string kernels_csv(const AnalyzeResult& r) {
  std::string csv = "kernel,count,alone_ns,overlapped_ns,slowdown,under_comm_ns,collectives\n";
  if (!r.kernels) return csv;
  for (const KernelSlowdown& s : r.kernels->kernels) {
    std::string over;
    for (const ContendingCollective& c : s.collectives) {
      if (!over.empty()) over += ";";
      over += std::string(to_string(c.type)) + ":" + (c.bytes >= 0 ? std::to_string(c.bytes) : "?") +
              ":" + std::to_string(c.overlap_ns);
    }
    csv += csv_text(s.name) + "," + std::to_string(s.count) + "," + std::to_string(s.alone_ns) +
           "," + std::to_string(s.overlapped_ns) + "," + csv_number(s.slowdown()) + "," +
           std::to_string(s.under_comm_ns) + "," + csv_text(over) + "\n";
  }
  return csv;
}

}  // namespace tandem
