// render_report / write_report, and the pieces shared by both page kinds (sections.h).
#include "report/html/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

std::string replay_section(const nlohmann::json& summary, const GanttInput& gantt, int step) {
  const nlohmann::json simulated = summary.value("simulated", nlohmann::json::object());
  char numbers[160];
  std::snprintf(numbers, sizeof numbers,
                "Measured %.3f ms, replayed %.3f ms, with the what-if (%s) %.3f ms.",
                simulated.value("measured_step_ms", NAN), simulated.value("replayed_step_ms", NAN),
                simulated.value("what_if", std::string("?")).c_str(),
                simulated.value("what_if_step_ms", NAN));
  return section("replayed", "The run as replayed, before the what-if",
                 std::string(numbers) +
                     " The timeline above is the what-if's; this one is the run replayed "
                     "with its passes and transfers as measured (" +
                     simulated.value("replay_of", std::string("?")) + ").",
                 gantt.ranks.empty() ? note("replayed.trace.json has no spans of a training step")
                                     : figure(gantt_chart(gantt),
                                              "Step " + std::to_string(step) + " of the replay."));
}

std::string waiting_section(const nlohmann::json& w, const std::string& scope) {
  if (!w.is_object() || !w.contains("ranks")) return "";
  const auto ms = [](const nlohmann::json& o, const char* key) {
    return o.contains(key) && o[key].is_number() ? o[key].get<double>() : NAN;
  };
  // The first ranks, as the Gantt draws them; summary.json has every one.
  constexpr std::size_t kMaxRanks = 8;
  std::vector<StackRow> bars;
  std::vector<std::vector<std::string>> rank_rows;
  for (const nlohmann::json& r : w["ranks"]) {
    if (bars.size() == kMaxRanks) break;
    const std::string rank = "rank " + std::to_string(r.value("rank", -1));
    bars.push_back({rank, {ms(r, "skew_ms"), ms(r, "transfer_ms"), ms(r, "other_ms")}});
    rank_rows.push_back(
        {rank, format_ms(ms(r, "blocked_ms") * 1e6), format_ms(ms(r, "skew_ms") * 1e6),
         format_ms(ms(r, "transfer_ms") * 1e6), format_ms(ms(r, "other_ms") * 1e6),
         std::to_string(r.value("last_arrivals", 0)),
         r.value("last_arrivals", 0) > 0 ? format_ms(ms(r, "late_by_ms") * 1e6) : std::string("")});
  }
  std::vector<std::vector<std::string>> kind_rows;
  for (const nlohmann::json& k : w.value("kinds", nlohmann::json::array())) {
    kind_rows.push_back({k.value("kind", std::string("?")),
                         std::to_string(k.value("collectives", 0)),
                         format_ms(ms(k, "skew_ms") * 1e6), format_ms(ms(k, "transfer_ms") * 1e6),
                         format_ms(ms(k, "arrival_spread_ms") * 1e6)});
  }
  std::string intro =
      "The time a rank was blocked on communication" + scope + " (" +
      w.value("blocked_on", std::string("?")) +
      "), per step, split at each collective's last arrival: skew while some rank had "
      "not yet started the collective (it cannot finish before its last participant starts "
      "it), transfer once all had, other with no collective in flight on the "
      "rank. Mean over ranks: " +
      format_ms(ms(w, "blocked_ms") * 1e6) + " = skew " + format_ms(ms(w, "skew_ms") * 1e6) +
      " + transfer " + format_ms(ms(w, "transfer_ms") * 1e6) + " + other " +
      format_ms(ms(w, "other_ms") * 1e6) + ".";
  if (w.contains("most_often_last") && w["most_often_last"].is_number_integer()) {
    const int last = w["most_often_last"].get<int>();
    for (const nlohmann::json& r : w["ranks"]) {
      if (r.value("rank", -1) != last) continue;
      char text[200];
      std::snprintf(text, sizeof text,
                    " Rank %d arrived last at %d of %d collectives, on average %s after the "
                    "next-latest rank.",
                    last, r.value("last_arrivals", 0), w.value("collectives", 0),
                    format_ms(ms(r, "late_by_ms") * 1e6).c_str());
      intro += text;
    }
  }
  intro += " Arrivals are read from the ranks' clocks: " +
           w.value("clocks", std::string("not recorded")) + ".";
  std::string html =
      figure(stacked_bar_chart(
                 {{"skew", "f-skew"}, {"transfer", "f-transfer"}, {"other", "f-idle"}}, bars,
                 "blocked time per step (ms)", 1, "blocked time per rank: skew, transfer, other"),
             "");
  html +=
      table({"rank", "blocked", "skew", "transfer", "other", "arrived last", "late by"}, rank_rows);
  if (w["ranks"].size() > kMaxRanks) {
    html += note("The first " + std::to_string(kMaxRanks) + " of " +
                 std::to_string(w["ranks"].size()) + " ranks; summary.json has every one.");
  }
  html += table({"collective", "matched", "skew", "transfer", "arrival spread"}, kind_rows);
  return section("waiting", "Waiting explained", intro, html);
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
