// Timeline <-> Chrome Trace Event JSON, the format chrome://tracing and Perfetto open.
//
// Layout: one process per rank (pid = rank, named "rank N", sorted by rank), one thread
// per lane (tid = the Lane's index, named "compute"/"comm"/"wait"/"idle"), one complete
// event ("ph":"X") per span. ts and dur are microseconds (fractional, so nanoseconds
// survive) relative to the earliest span or counter sample, whose absolute time is kept
// in otherData.tandem_trace.t0_ns so that read_chrome_trace restores absolute times.
//
// Event name: Timeline::name_of(span) (the interned name, else the kind's name). A span
// without an interned name but with a tag gets the tag appended, so the Gantt shows which
// layer or bucket it is: "backward L3" (compute: layer), "allreduce B2" (comm: bucket),
// "<kind> T<tag>" on other lanes. cat = the kind's name. args: step (when >= 0), the tag
// as "layer" (compute) / "bucket" (comm) / "tag" (other lanes) when >= 0, and bytes and
// flops when non-zero, and for a comm span that knows when it was issued, queued_ns (start
// minus issue time: how long the ready bucket waited for its collective to start).
//
// Flow arrows: every collective comm span with an issue time gets a flow ("bucket ready")
// from the compute lane at the issue time ("ph":"s") to the start of the collective on the
// comm lane ("ph":"f"); both bind to the enclosing slice ("bp":"e"). When no compute slice
// encloses the issue time, the arrow leaves the last nanosecond of the compute slice that
// ended last before it; with no compute before it at all, there is no arrow. Every
// all-gather of a step with a tag (a sharded strategy's unit) also gets a flow
// ("gathered") from its last nanosecond on the comm lane to the start of the first compute
// span of the same rank and tag that starts after it ended: where the prefetched
// parameters are used.
//
// Every string goes through nlohmann::json, which escapes it; invalid UTF-8 (possible in
// imported names) is replaced by U+FFFD rather than failing the write.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "timeline/recorder.h"

namespace tandem {

struct CounterSample {
  std::int64_t t_ns = 0;  // on the same clock as the spans
  double value = 0;
};

// A counter track ("ph":"C"), e.g. power in watts, drawn under process `pid`.
struct CounterTrack {
  std::string name;              // track name, e.g. "power gpu0"
  std::string series = "value";  // the args key, e.g. "watts"
  std::int32_t pid = 0;
  std::vector<CounterSample> samples;
};

struct ChromeTraceOptions {
  // Run configuration, written as "otherData" (viewers show it as trace metadata).
  // The key "tandem_trace" is reserved for the writer's own bookkeeping.
  nlohmann::json other_data = nlohmann::json::object();
  std::vector<CounterTrack> counters;
};

// The label a span is drawn with (the rule in the header comment).
std::string chrome_event_name(const Timeline& timeline, const Span& span);

// The whole trace as one JSON document (the writer streams the same content).
nlohmann::json to_chrome_trace(const Timeline& timeline, const ChromeTraceOptions& options = {});

// Writes atomically (core/files.h's AtomicFile): "<path>.tmp.<pid>", then rename, so
// `path` always holds a complete trace or nothing. Throws UsageError("cannot write
// '<path>': <reason>").
void write_chrome_trace(const Timeline& timeline, const std::string& path,
                        const ChromeTraceOptions& options = {});

// Reads a trace written by write_chrome_trace back into a Timeline (pid -> rank,
// tid -> lane, cat -> kind, args -> step/tag/bytes/flops; names that equal the generated
// label come back as kNoName, args.queued_ns -> issue_ns). Metadata, counter and flow
// events are skipped. Accepts the object form {"traceEvents": [...]} and the bare array
// form. Throws UsageError naming the file on unreadable or malformed input.
Timeline read_chrome_trace(const std::string& path);
// The same from an already parsed document; `source` names it in errors.
Timeline parse_chrome_trace(const nlohmann::json& trace, std::string_view source);

}  // namespace tandem
