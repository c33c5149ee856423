// render_report / write_report, and the pieces shared by both page kinds (sections.h).
#include "report/html/report.h"

#include <algorithm>
#include <map>
#include <set>

#include "analysis/intervals.h"
#include "core/files.h"
#include "report/html/page.h"
#include "report/html/sections.h"
#include "timeline/chrome_trace.h"

namespace tandem::html {

namespace {

std::vector<Interval> lane_intervals(const std::vector<const Span*>& spans, Lane lane) {
  std::vector<Interval> out;
  for (const Span* s : spans) {
    if (s->lane == lane) out.push_back({s->start_ns, s->end_ns});
  }
  return out;
}

IntervalSet overlap_of(const std::vector<const Span*>& spans) {
  return intersect(union_of(lane_intervals(spans, Lane::kCompute)),
                   union_of(lane_intervals(spans, Lane::kComm)));
}

std::string json_cell(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "none";
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

// Consecutive forward (or backward) spans of one micro-batch, as one labelled run.
std::vector<GanttLabel> micro_batch_labels(const std::vector<const Span*>& spans) {
  std::vector<const Span*> compute;
  for (const Span* s : spans) {
    if (s->lane == Lane::kCompute && s->micro >= 0 &&
        (s->kind == SpanKind::kForward || s->kind == SpanKind::kBackward)) {
      compute.push_back(s);
    }
  }
  std::sort(compute.begin(), compute.end(),
            [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
  std::vector<GanttLabel> labels;
  const Span* previous = nullptr;
  for (const Span* s : compute) {
    if (previous != nullptr && previous->micro == s->micro && previous->kind == s->kind) {
      labels.back().end_ns = std::max(labels.back().end_ns, s->end_ns);
    } else {
      labels.push_back({.start_ns = s->start_ns,
                        .end_ns = s->end_ns,
                        .text = (s->kind == SpanKind::kForward ? "F" : "B") +
                                std::to_string(s->micro)});
    }
    previous = s;
  }
  return labels;
}

GanttInput gantt_for_step(const Timeline& timeline, int step, int max_ranks,
                          const std::string& label, int& ranks_total) {
  std::map<int, std::vector<const Span*>> by_rank;
  for (const Span& s : timeline.spans) {
    if (s.step == step && s.lane != Lane::kIdle) by_rank[s.rank].push_back(&s);
  }
  ranks_total = static_cast<int>(by_rank.size());
  GanttInput in;
  in.label = label;
  in.t0_ns = INT64_MAX;
  in.t1_ns = INT64_MIN;
  for (const auto& [rank, spans] : by_rank) {
    if (static_cast<int>(in.ranks.size()) >= max_ranks) break;
    GanttRank row{.rank = rank, .spans = {}, .overlap = overlap_of(spans)};
    for (const Span* s : spans) {
      in.t0_ns = std::min(in.t0_ns, s->start_ns);
      in.t1_ns = std::max(in.t1_ns, s->end_ns);
      row.spans.push_back({.lane = static_cast<int>(s->lane),
                           .start_ns = s->start_ns,
                           .end_ns = s->end_ns,
                           .issue_ns = s->issue_ns,
                           .bytes = s->bytes,
                           .name = chrome_event_name(timeline, *s)});
    }
    row.labels = micro_batch_labels(spans);
    in.ranks.push_back(std::move(row));
  }
  if (in.ranks.empty()) in.t0_ns = in.t1_ns = 0;
  return in;
}

IntervalSet overlap_any_rank(const Timeline& timeline) {
  std::map<int, std::vector<const Span*>> by_rank;
  for (const Span& s : timeline.spans) by_rank[s.rank].push_back(&s);
  IntervalSet all;
  for (const auto& [rank, spans] : by_rank) all = unite(all, overlap_of(spans));
  return all;
}

std::string ranks_note(const GanttInput& gantt, int ranks_total) {
  const int drawn = static_cast<int>(gantt.ranks.size());
  if (drawn >= ranks_total) return "";
  return "ranks " + std::to_string(gantt.ranks.front().rank) + "–" +
         std::to_string(gantt.ranks.back().rank) + " of " + std::to_string(ranks_total) +
         " drawn (the others ran the same iteration; see trace.json in Perfetto for all)";
}

std::string config_table(const nlohmann::json& config) {
  std::vector<std::vector<std::string>> rows;
  if (config.is_object()) {
    for (const auto& [key, value] : config.items()) rows.push_back({key, json_cell(value)});
  }
  return table({"setting", "value"}, rows, -1, "kv");
}

std::string machine_table(const nlohmann::json& machine, const std::string& created) {
  std::vector<std::vector<std::string>> rows;
  static const std::pair<const char*, const char*> kFields[] = {
      {"cpu", "CPU"},       {"cores", "cores"},  {"memory_gib", "memory (GiB)"},
      {"gpu", "GPU"},       {"blas", "BLAS"},    {"compiler", "compiler"},
      {"kernel", "kernel"}, {"hostname", "host"}};
  std::set<std::string> shown;
  if (machine.is_object()) {
    for (const auto& [key, label] : kFields) {
      if (!machine.contains(key)) continue;
      shown.insert(key);
      const nlohmann::json& v = machine[key];
      std::string text = json_cell(v);
      if (std::string(key) == "gpu" && v.is_null()) text = "none detected";
      if (std::string(key) == "memory_gib" && v.is_number()) {
        text = std::to_string(static_cast<int>(v.get<double>() + 0.5));
      }
      rows.push_back({label, text});
    }
    for (const auto& [key, value] : machine.items()) {
      if (!shown.count(key) && key != "date") rows.push_back({key, json_cell(value)});
    }
  }
  rows.push_back({"results created", created.empty() ? "not recorded" : created});
  return table({"", ""}, rows, -1, "kv");
}

std::string render_report(const std::filesystem::path& results_dir, const ReportOptions& options) {
  Results results = load_results(results_dir);
  results.shown = options.shown_as.empty() ? results_dir : options.shown_as;
  std::string title, body;
  switch (results.command) {
    case ResultsCommand::kTrain:
      title = "tandem train report";
      body = train_body(results, options);
      break;
    case ResultsCommand::kAnalyze:
      title = "tandem analyze report";
      body = analyze_body(results, options);
      break;
    case ResultsCommand::kTune:
      title = "tandem tune report";
      body = tune_body(results, options);
      break;
    case ResultsCommand::kCharacterize:
      title = "tandem characterize report";
      body = characterize_body(results, options);
      break;
  }
  return page(title + " — " + results.shown.filename().string(), body);
}

std::filesystem::path write_report(const std::filesystem::path& results_dir,
                                   const ReportOptions& options, const std::filesystem::path& out) {
  const std::filesystem::path path = out.empty() ? results_dir / "report.html" : out;
  write_file_atomic(path, render_report(results_dir, options));
  return path;
}

}  // namespace tandem::html
