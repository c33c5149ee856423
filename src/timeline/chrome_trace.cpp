// Chrome Trace Event writer and reader; the format and naming rules are in chrome_trace.h.
#include "timeline/chrome_trace.h"

#include <unistd.h>

#include <algorithm>
#include <bitset>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/files.h"

namespace tandem {
namespace {

using nlohmann::json;

constexpr const char* kBookkeepingKey = "tandem_trace";
constexpr int kFormatVersion = 1;

// The args key under which a span's tag is stored, by lane.
const char* tag_key(Lane lane) {
  switch (lane) {
    case Lane::kCompute:
      return "layer";
    case Lane::kComm:
      return "bucket";
    default:
      return "tag";
  }
}

char tag_letter(Lane lane) {
  switch (lane) {
    case Lane::kCompute:
      return 'L';
    case Lane::kComm:
      return 'B';
    default:
      return 'T';
  }
}

// Microseconds relative to t0, as Chrome wants them; doubles keep every nanosecond for
// traces shorter than ~100 days.
double to_us(std::int64_t ns, std::int64_t t0_ns) { return static_cast<double>(ns - t0_ns) / 1e3; }

std::int64_t earliest_ns(const Timeline& timeline, const ChromeTraceOptions& options) {
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
  for (const Span& s : timeline.spans) t0 = std::min(t0, s.start_ns);
  for (const CounterTrack& track : options.counters) {
    for (const CounterSample& sample : track.samples) t0 = std::min(t0, sample.t_ns);
  }
  return t0 == std::numeric_limits<std::int64_t>::max() ? 0 : t0;
}

json other_data(const Timeline& timeline, const ChromeTraceOptions& options, std::int64_t t0) {
  json data = options.other_data.is_object() ? options.other_data : json::object();
  data[kBookkeepingKey] = {{"format", kFormatVersion}, {"t0_ns", t0}, {"ranks", timeline.ranks}};
  return data;
}

json metadata_event(const char* what, int pid, int tid, json args) {
  json e = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

bool has_issue_time(const Span& s) {
  return s.lane == Lane::kComm && s.issue_ns != 0 && s.issue_ns <= s.start_ns;
}

// Where a "bucket ready" arrow leaves the compute lane. Viewers bind a flow start to the
// slice enclosing its timestamp, but a bucket usually becomes ready just after the
// backward kernel that finished it, between slices. So: issue_ns itself when a compute
// slice encloses it, else the last nanosecond of the compute slice that ended last before
// it (the one whose gradients made the bucket ready). The exact issue time stays in the
// comm event's args (queued_ns). nullopt: no compute ran before the issue (an initial
// broadcast), so there is nothing to draw from.
class FlowAnchors {
 public:
  explicit FlowAnchors(const Timeline& timeline) {
    for (const Span& s : timeline.spans) {
      if (s.lane == Lane::kCompute) by_rank_[s.rank].push_back({s.start_ns, s.end_ns});
    }
    for (auto& [rank, spans] : by_rank_) std::sort(spans.begin(), spans.end());
  }

  std::optional<std::int64_t> anchor(int rank, std::int64_t issue_ns) const {
    const auto it = by_rank_.find(rank);
    if (it == by_rank_.end()) return std::nullopt;
    const std::pair<std::int64_t, std::int64_t>* last_ended = nullptr;
    // Sorted by start: only the spans starting at or before issue_ns matter.
    for (const auto& span : it->second) {
      if (span.first > issue_ns) break;
      if (span.second > issue_ns) return issue_ns;  // enclosed
      if (last_ended == nullptr || span.second >= last_ended->second) last_ended = &span;
    }
    if (last_ended == nullptr) return std::nullopt;
    return std::max(last_ended->first, last_ended->second - 1);
  }

 private:
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> by_rank_;
};

// Where a gathered unit's parameters are first used: the first compute span on the same
// rank with the unit's tag (compute spans are tagged with their unit) that starts at or
// after the all-gather ended. nullopt: none does (the run ended first).
class FirstUse {
 public:
  explicit FirstUse(const Timeline& timeline) {
    for (const Span& s : timeline.spans) {
      if (s.lane == Lane::kCompute && s.tag >= 0) starts_[{s.rank, s.tag}].push_back(s.start_ns);
    }
    for (auto& [key, starts] : starts_) std::sort(starts.begin(), starts.end());
  }

  std::optional<std::int64_t> after(int rank, int tag, std::int64_t t_ns) const {
    const auto it = starts_.find({rank, tag});
    if (it == starts_.end()) return std::nullopt;
    const auto next = std::lower_bound(it->second.begin(), it->second.end(), t_ns);
    if (next == it->second.end()) return std::nullopt;
    return *next;
  }

 private:
  std::map<std::pair<int, int>, std::vector<std::int64_t>> starts_;
};

json span_event(const Timeline& timeline, const Span& s, std::int64_t t0) {
  json args = json::object();
  if (s.step >= 0) args["step"] = s.step;
  if (s.tag >= 0) args[tag_key(s.lane)] = s.tag;
  if (s.micro >= 0) args["micro"] = s.micro;
  if (s.bytes != 0) args["bytes"] = s.bytes;
  if (s.flops != 0) args["flops"] = s.flops;
  if (has_issue_time(s)) args["queued_ns"] = s.start_ns - s.issue_ns;
  if (s.group != 0) args["group"] = s.group;
  return json{{"ph", "X"},
              {"name", chrome_event_name(timeline, s)},
              {"cat", to_string(s.kind)},
              {"pid", s.rank},
              {"tid", static_cast<int>(s.lane)},
              {"ts", to_us(s.start_ns, t0)},
              {"dur", to_us(std::max(s.end_ns, s.start_ns), s.start_ns)},
              {"args", std::move(args)}};
}

// Calls emit(event) for every event of the trace: per-rank and per-lane metadata first,
// then the spans in timeline order, then the counter samples.
template <typename Emit>
void for_each_event(const Timeline& timeline, const ChromeTraceOptions& options, std::int64_t t0,
                    Emit emit) {
  // Metadata for the ranks that have spans, not for 0..ranks-1: an imported trace's rank
  // numbers can be sparse (a lone Kineto rank 1000000), and the output must grow with the
  // ranks present, not with the largest number.
  std::map<int, std::bitset<kLaneCount>> lanes_by_rank;
  for (const Span& s : timeline.spans) lanes_by_rank[s.rank].set(static_cast<int>(s.lane));
  for (const auto& [rank, lanes] : lanes_by_rank) {
    emit(metadata_event("process_name", rank, -1, {{"name", "rank " + std::to_string(rank)}}));
    emit(metadata_event("process_sort_index", rank, -1, {{"sort_index", rank}}));
    for (int lane = 0; lane < kLaneCount; ++lane) {
      if (!lanes.test(lane)) continue;
      emit(metadata_event("thread_name", rank, lane,
                          {{"name", to_string(static_cast<Lane>(lane))}}));
      emit(metadata_event("thread_sort_index", rank, lane, {{"sort_index", lane}}));
    }
  }
  for (const Span& s : timeline.spans) emit(span_event(timeline, s, t0));
  // Flow arrows "bucket ready" -> start of its collective (header comment).
  const FlowAnchors anchors(timeline);
  std::int64_t flow_id = 0;
  for (const Span& s : timeline.spans) {
    if (!has_issue_time(s) || !is_collective(s.kind)) continue;
    const std::optional<std::int64_t> from = anchors.anchor(s.rank, s.issue_ns);
    if (!from) continue;
    ++flow_id;
    auto flow = [&](const char* phase, Lane lane, std::int64_t t_ns) {
      return json{{"ph", phase},           {"name", "bucket ready"},
                  {"cat", "flow"},         {"id", flow_id},
                  {"pid", s.rank},         {"tid", static_cast<int>(lane)},
                  {"ts", to_us(t_ns, t0)}, {"bp", "e"}};
    };
    emit(flow("s", Lane::kCompute, *from));
    emit(flow("f", Lane::kComm, s.start_ns));
  }
  // Flow arrows "gathered" -> the compute that first uses a unit's gathered parameters
  // (sharded strategies tag every all-gather with its unit; header comment).
  const FirstUse uses(timeline);
  for (const Span& s : timeline.spans) {
    if (s.lane != Lane::kComm || s.kind != SpanKind::kAllgather || s.tag < 0 || s.step < 0) {
      continue;
    }
    const std::optional<std::int64_t> use = uses.after(s.rank, s.tag, s.end_ns);
    if (!use) continue;
    ++flow_id;
    auto flow = [&](const char* phase, Lane lane, std::int64_t t_ns) {
      return json{{"ph", phase},           {"name", "gathered"}, {"cat", "flow"},
                  {"id", flow_id},         {"pid", s.rank},      {"tid", static_cast<int>(lane)},
                  {"ts", to_us(t_ns, t0)}, {"bp", "e"}};
    };
    emit(flow("s", Lane::kComm, std::max(s.start_ns, s.end_ns - 1)));
    emit(flow("f", Lane::kCompute, *use));
  }
  for (const CounterTrack& track : options.counters) {
    for (const CounterSample& sample : track.samples) {
      emit(json{{"ph", "C"},
                {"name", track.name},
                {"pid", track.pid},
                {"ts", to_us(sample.t_ns, t0)},
                {"args", {{track.series, sample.value}}}});
    }
  }
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Removes the temporary file unless the write committed, so a failed write leaves
// nothing behind.
// Reader helpers: each names the source and the event in its error.
[[noreturn]] void malformed(std::string_view source, std::size_t index, const std::string& what) {
  throw UsageError(std::string(source) + ": event " + std::to_string(index) + ": " + what);
}

std::int64_t int_field(const json& obj, const char* key, std::string_view source,
                       std::size_t index) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) {
    malformed(source, index, std::string("missing or non-integer \"") + key + "\"");
  }
  return it->get<std::int64_t>();
}

std::int64_t optional_int(const json& obj, const char* key, std::int64_t fallback,
                          std::string_view source, std::size_t index) {
  return obj.contains(key) ? int_field(obj, key, source, index) : fallback;
}

std::int64_t us_field_to_ns(const json& obj, const char* key, std::string_view source,
                            std::size_t index) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) {
    malformed(source, index, std::string("missing or non-numeric \"") + key + "\"");
  }
  const double us = it->get<double>();
  // Beyond ~2^53 ns a double no longer holds every nanosecond; no real trace gets there.
  if (!(std::fabs(us) < 9e12))
    malformed(source, index, std::string("\"") + key + "\" out of range");
  return std::llround(us * 1e3);
}

std::string string_field(const json& obj, const char* key, std::string_view source,
                         std::size_t index) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    malformed(source, index, std::string("missing or non-string \"") + key + "\"");
  }
  return it->get<std::string>();
}

}  // namespace

std::string chrome_event_name(const Timeline& timeline, const Span& span) {
  std::string name(timeline.name_of(span));
  const bool has_own_name = span.name != kNoName && !timeline.names->name(span.name).empty();
  if (!has_own_name && span.lane == Lane::kComm && span.micro >= 0) {
    name += " micro-batch " + std::to_string(span.micro);  // a pipeline transfer
  } else if (!has_own_name && span.tag >= 0) {
    name += ' ';
    name += tag_letter(span.lane);
    name += std::to_string(span.tag);
  }
  return name;
}

json to_chrome_trace(const Timeline& timeline, const ChromeTraceOptions& options) {
  const std::int64_t t0 = earliest_ns(timeline, options);
  json events = json::array();
  for_each_event(timeline, options, t0, [&](json e) { events.push_back(std::move(e)); });
  return json{{"traceEvents", std::move(events)},
              {"displayTimeUnit", "ns"},
              {"otherData", other_data(timeline, options, t0)}};
}

void write_chrome_trace(const Timeline& timeline, const std::string& path,
                        const ChromeTraceOptions& options) {
  const std::int64_t t0 = earliest_ns(timeline, options);
  AtomicFile file(path);
  // Streamed one event per line: no whole-document copy in memory, and diffable.
  file.write("{\"traceEvents\":[\n");
  bool first = true;
  for_each_event(timeline, options, t0, [&](const json& e) {
    file.write(first ? "" : ",\n");
    file.write(dump(e));
    first = false;
  });
  file.write("\n],\"displayTimeUnit\":\"ns\",\"otherData\":");
  file.write(dump(other_data(timeline, options, t0)));
  file.write("}\n");
  file.commit();
}

Timeline parse_chrome_trace(const json& trace, std::string_view source) {
  const json* events = nullptr;
  if (trace.is_array()) {
    events = &trace;
  } else if (trace.is_object() && trace.contains("traceEvents") &&
             trace["traceEvents"].is_array()) {
    events = &trace["traceEvents"];
  } else {
    throw UsageError(std::string(source) +
                     ": not a Chrome trace (expected {\"traceEvents\": [...]} or an array)");
  }
  std::int64_t t0 = 0;
  Timeline timeline;
  if (trace.is_object() && trace.contains("otherData") && trace["otherData"].is_object()) {
    const json& data = trace["otherData"];
    if (data.contains(kBookkeepingKey) && data[kBookkeepingKey].is_object()) {
      const json& book = data[kBookkeepingKey];
      if (book.contains("t0_ns") && book["t0_ns"].is_number_integer()) {
        t0 = book["t0_ns"].get<std::int64_t>();
      }
      if (book.contains("ranks") && book["ranks"].is_number_integer()) {
        timeline.ranks = book["ranks"].get<int>();
      }
    }
  }
  for (std::size_t i = 0; i < events->size(); ++i) {
    const json& e = (*events)[i];
    if (!e.is_object()) malformed(source, i, "not an object");
    if (string_field(e, "ph", source, i) != "X") continue;  // metadata, counters, flows
    Span s;
    s.rank = static_cast<std::int32_t>(int_field(e, "pid", source, i));
    const std::int64_t tid = int_field(e, "tid", source, i);
    if (s.rank < 0) malformed(source, i, "negative pid");
    if (tid < 0 || tid >= kLaneCount) {
      malformed(source, i, "tid " + std::to_string(tid) + " is not a tandem lane");
    }
    s.lane = static_cast<Lane>(tid);
    try {
      s.kind = parse_span_kind(string_field(e, "cat", source, i));
    } catch (const UsageError& error) {
      if (std::string_view(error.what()).starts_with(source)) throw;
      malformed(source, i, error.what());
    }
    s.start_ns = t0 + us_field_to_ns(e, "ts", source, i);
    const std::int64_t dur_ns = us_field_to_ns(e, "dur", source, i);
    if (dur_ns < 0) malformed(source, i, "negative \"dur\"");
    s.end_ns = s.start_ns + dur_ns;
    if (e.contains("args")) {
      const json& args = e["args"];
      if (!args.is_object()) malformed(source, i, "\"args\" is not an object");
      s.step = static_cast<std::int32_t>(optional_int(args, "step", -1, source, i));
      s.tag = static_cast<std::int32_t>(optional_int(args, tag_key(s.lane), -1, source, i));
      s.micro = static_cast<std::int32_t>(optional_int(args, "micro", -1, source, i));
      s.bytes = optional_int(args, "bytes", 0, source, i);
      const std::int64_t queued_ns = optional_int(args, "queued_ns", -1, source, i);
      if (queued_ns >= 0 && s.lane == Lane::kComm) s.issue_ns = s.start_ns - queued_ns;
      const std::int64_t group = optional_int(args, "group", 0, source, i);
      if (group < 0 || group > std::numeric_limits<std::uint32_t>::max()) {
        malformed(source, i, "\"group\" out of range");
      }
      s.group = static_cast<std::uint32_t>(group);
      if (args.contains("flops")) {
        if (!args["flops"].is_number()) malformed(source, i, "non-numeric \"flops\"");
        s.flops = args["flops"].get<double>();
      }
    }
    // A name equal to the generated label carries no information of its own.
    const std::string name = string_field(e, "name", source, i);
    if (name != chrome_event_name(timeline, s)) s.name = timeline.names->intern(name);
    timeline.ranks = std::max(timeline.ranks, s.rank + 1);
    timeline.spans.push_back(s);
  }
  return timeline;
}

Timeline read_chrome_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read " + path + ": " + std::strerror(errno));
  json trace;
  try {
    trace = json::parse(in);
  } catch (const json::exception& error) {
    throw UsageError(path + ": not valid JSON: " + error.what());
  }
  return parse_chrome_trace(trace, path);
}

}  // namespace tandem
