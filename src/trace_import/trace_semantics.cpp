#include "trace_import/trace_semantics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "core/memory.h"
#include "core/parse.h"
#include "trace_import/bounded_json.h"

namespace tandem {
namespace {

using namespace std::string_view_literals;

// Where the parser is: one frame per open object or array. kSkip covers every value the
// reader does not use, however deep, so unknown content costs one byte of stack per level.
enum class Frame : std::uint8_t {
  kTop,
  kEvents,
  kEvent,
  kArgs,
  kDistributed,
  kOtherData,
  kTandem,
  kSkip
};

// The keys the reader uses; anything else is kNone and its value is skipped.
enum class Field : std::uint8_t {
  kNone,
  kTraceEvents,
  kDistributedInfo,
  kOtherData,
  kBaseTime,  // top level
  kPh,
  kCat,
  kName,
  kPid,
  kTid,
  kTs,
  kDur,
  kArgs,  // event
  kCorrelation,
  kStep,
  kTag,
  kBytes,
  kFlops,
  kQueued,
  kStream,
  kDevice,
  kCollective,
  kInElements,
  kOutElements,
  kGroupSize,
  kDtype,  // event args
  kProcessGroup,
  kWaitOnStream,  // cuda_sync's Stream Wait Event
  kWaitOnRecord,
  kRank,
  kTandemTrace,
  kT0,
  kRanks,  // nested metadata
};

// string_view comparisons check the length before the bytes; std::string == "literal"
// always calls memcmp, which showed up at 10% of the parse profile.
Field field_of(Frame frame, std::string_view key) {
  switch (frame) {
    case Frame::kTop:
      if (key == "traceEvents"sv) return Field::kTraceEvents;
      if (key == "distributedInfo"sv) return Field::kDistributedInfo;
      if (key == "otherData"sv) return Field::kOtherData;
      if (key == "baseTimeNanoseconds"sv) return Field::kBaseTime;
      return Field::kNone;
    case Frame::kEvent:
      if (key.size() > 4) return Field::kNone;  // Kineto's many args-level keys, quickly
      if (key == "ph"sv) return Field::kPh;
      if (key == "cat"sv) return Field::kCat;
      if (key == "name"sv) return Field::kName;
      if (key == "pid"sv) return Field::kPid;
      if (key == "tid"sv) return Field::kTid;
      if (key == "ts"sv) return Field::kTs;
      if (key == "dur"sv) return Field::kDur;
      if (key == "args"sv) return Field::kArgs;
      return Field::kNone;
    case Frame::kArgs:
      if (key == "correlation"sv) return Field::kCorrelation;
      if (key == "step"sv) return Field::kStep;
      if (key == "layer"sv || key == "bucket"sv || key == "tag"sv) return Field::kTag;
      if (key == "bytes"sv) return Field::kBytes;
      if (key == "flops"sv) return Field::kFlops;
      if (key == "queued_ns"sv) return Field::kQueued;
      if (key == "stream"sv) return Field::kStream;
      if (key == "device"sv) return Field::kDevice;
      if (key == "Collective name"sv) return Field::kCollective;
      if (key == "In msg nelems"sv) return Field::kInElements;
      if (key == "Out msg nelems"sv) return Field::kOutElements;
      if (key == "Group size"sv) return Field::kGroupSize;
      if (key == "dtype"sv) return Field::kDtype;
      if (key == "Process Group Name"sv) return Field::kProcessGroup;
      if (key == "wait_on_stream"sv) return Field::kWaitOnStream;
      if (key == "wait_on_cuda_event_record_corr_id"sv) return Field::kWaitOnRecord;
      return Field::kNone;
    case Frame::kDistributed:
      return key == "rank"sv ? Field::kRank : Field::kNone;
    case Frame::kOtherData:
      return key == "tandem_trace"sv ? Field::kTandemTrace : Field::kNone;
    case Frame::kTandem:
      if (key == "t0_ns"sv) return Field::kT0;
      if (key == "ranks"sv) return Field::kRanks;
      return Field::kNone;
    default:
      return Field::kNone;
  }
}

const char* field_name(Field f) {
  switch (f) {
    case Field::kTraceEvents:
      return "traceEvents";
    case Field::kDistributedInfo:
      return "distributedInfo";
    case Field::kOtherData:
      return "otherData";
    case Field::kBaseTime:
      return "baseTimeNanoseconds";
    case Field::kPh:
      return "ph";
    case Field::kCat:
      return "cat";
    case Field::kName:
      return "name";
    case Field::kPid:
      return "pid";
    case Field::kTid:
      return "tid";
    case Field::kTs:
      return "ts";
    case Field::kDur:
      return "dur";
    case Field::kArgs:
      return "args";
    case Field::kCorrelation:
      return "args.correlation";
    case Field::kStep:
      return "args.step";
    case Field::kTag:
      return "args.layer/bucket/tag";
    case Field::kBytes:
      return "args.bytes";
    case Field::kFlops:
      return "args.flops";
    case Field::kQueued:
      return "args.queued_ns";
    case Field::kStream:
      return "args.stream";
    case Field::kDevice:
      return "args.device";
    case Field::kCollective:
      return "args.\"Collective name\"";
    case Field::kInElements:
      return "args.\"In msg nelems\"";
    case Field::kOutElements:
      return "args.\"Out msg nelems\"";
    case Field::kGroupSize:
      return "args.\"Group size\"";
    case Field::kDtype:
      return "args.dtype";
    case Field::kProcessGroup:
      return "args.\"Process Group Name\"";
    case Field::kWaitOnStream:
      return "args.wait_on_stream";
    case Field::kWaitOnRecord:
      return "args.wait_on_cuda_event_record_corr_id";
    case Field::kRank:
      return "distributedInfo.rank";
    case Field::kTandemTrace:
      return "otherData.tandem_trace";
    case Field::kT0:
      return "tandem_trace.t0_ns";
    case Field::kRanks:
      return "tandem_trace.ranks";
    case Field::kNone:
      break;
  }
  return "?";
}

using Value = JsonScalar;

// The event being read; reset at each '{' in traceEvents.
struct EventFields {
  std::string name, cat;  // reused buffers: no allocation per event once warm
  std::string collective, dtype, process_group;
  bool complete = false;  // "ph":"X"
  bool has_name = false, has_ts = false, has_dur = false;
  bool has_cat = false;
  bool name_cut = false;
  bool has_args = false;  // one of CollectiveArgs' fields
  RawEvent raw;
  CollectiveArgs args;
  std::int64_t dur_ns = 0;
  std::int64_t wait_on_stream = -1, wait_on_record = -1;  // a Stream Wait Event's
  void reset() {
    complete = has_name = has_ts = has_dur = has_cat = name_cut = has_args = false;
    name.clear();
    cat.clear();
    collective.clear();
    dtype.clear();
    process_group.clear();
    raw = RawEvent{};
    args = CollectiveArgs{};
    dur_ns = 0;
    wait_on_stream = wait_on_record = -1;
  }
};

// An int64 that fits int32, else -1 (a field the reader only compares).
std::int32_t as_int32(std::int64_t v) {
  return v >= std::numeric_limits<std::int32_t>::min() && v <= std::numeric_limits<std::int32_t>::max()
             ? static_cast<std::int32_t>(v)
             : -1;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.starts_with(prefix); }

}  // namespace

class TraceSemantics::Impl {
 public:
  Impl(std::string_view source, NameTable& names, RawTrace& out, std::function<std::string()> where)
      : source_(source), where_(std::move(where)), names_(names), out_(out) {
    frames_.reserve(64);
  }

  bool saw_events() const { return saw_events_; }
  bool saw_anything() const { return saw_anything_; }
  bool skipping() const { return !frames_.empty() && frames_.back() == Frame::kSkip; }
  std::size_t depth() const { return frames_.size(); }

  bool key(std::string_view k) {
    pending_ = field_of(frames_.back(), k);
    return pending_ != Field::kNone;
  }

  void start_object() {
    check_depth();
    frames_.push_back(child_frame(/*is_object=*/true));
    pending_ = Field::kNone;
    if (frames_.back() == Frame::kEvent) event_.reset();
  }
  void end_object() {
    const Frame done = frames_.back();
    frames_.pop_back();
    if (done == Frame::kEvent) {
      if (!event_.has_ts) out_.fractional_ts = true;  // HTA: a missing ts is a NaN
      finish_event();
    }
  }
  void start_array() {
    check_depth();
    frames_.push_back(child_frame(/*is_object=*/false));
    pending_ = Field::kNone;
  }
  void end_array() { frames_.pop_back(); }

  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError(std::string(source_) + ": " + what + where_());
  }

  void scalar(const Value& v) { (void)scalar_(v); }

 private:

  // A byte a level here and a bit in the parser: bounded (a file of '[' is not a trace).
  void check_depth() const {
    if (frames_.size() >= static_cast<std::size_t>(kMaxJsonDepth)) {
      fail("nested deeper than 1000 levels");
    }
  }

  std::string event_label() const { return "event " + std::to_string(out_.trace_events - 1); }

  Frame child_frame(bool is_object) {
    saw_anything_ = true;
    if (frames_.empty()) {
      // The document itself: {"traceEvents": [...], ...} or the bare array form.
      if (is_object) return Frame::kTop;
      saw_events_ = true;
      return Frame::kEvents;
    }
    const Frame parent = frames_.back();
    const Field f = pending_;
    switch (parent) {
      case Frame::kTop:
        if (f == Field::kTraceEvents) {
          if (is_object) fail("\"traceEvents\" is an object, expected an array");
          saw_events_ = true;
          return Frame::kEvents;
        }
        if (f == Field::kDistributedInfo && is_object) return Frame::kDistributed;
        if (f == Field::kOtherData && is_object) return Frame::kOtherData;
        if (f == Field::kBaseTime) fail("\"baseTimeNanoseconds\" is not a number");
        return Frame::kSkip;
      case Frame::kEvents:
        ++out_.trace_events;
        if (!is_object) fail(event_label() + " is an array, expected an object");
        return Frame::kEvent;
      case Frame::kEvent:
        if (f == Field::kArgs && is_object) return Frame::kArgs;
        if (f == Field::kTs || f == Field::kDur || f == Field::kName || f == Field::kPh ||
            f == Field::kCat) {
          fail(event_label() + ": \"" + field_name(f) + "\" has the wrong type");
        }
        return Frame::kSkip;
      case Frame::kOtherData:
        if (f != Field::kTandemTrace || !is_object) return Frame::kSkip;
        out_.tandem = true;
        return Frame::kTandem;
      case Frame::kDistributed:
        if (f == Field::kRank) fail("\"distributedInfo.rank\" is not an integer");
        return Frame::kSkip;
      default:
        return Frame::kSkip;
    }
  }

  bool scalar_(const Value& v) {
    saw_anything_ = true;
    if (frames_.empty()) fail("not a trace: the document is a single value");
    const Field f = pending_;
    pending_ = Field::kNone;
    switch (frames_.back()) {
      case Frame::kEvents:
        ++out_.trace_events;
        fail(event_label() + " is not an object");
      case Frame::kEvent:
        event_field(f, v);
        break;
      case Frame::kArgs:
        arg_field(f, v);
        break;
      case Frame::kTop:
        if (f == Field::kTraceEvents) fail("\"traceEvents\" is not an array");
        if (f == Field::kBaseTime) {
          if (v.type != Value::kInt || v.i < 0 || v.i > kMaxAbsTsUs * 1000) {
            fail("\"baseTimeNanoseconds\" is not a non-negative integer in range");
          }
          out_.base_time_ns = v.i;
        }
        break;
      case Frame::kDistributed:
        if (f == Field::kRank) {
          if (v.type != Value::kInt || v.i < 0 || v.i > 1'000'000) {
            fail("\"distributedInfo.rank\" is not a rank (an integer 0..1000000)");
          }
          out_.distributed_rank = v.i;
        }
        break;
      case Frame::kTandem:
        if (f == Field::kT0 || f == Field::kRanks) {
          if (v.type != Value::kInt)
            fail(std::string("\"") + field_name(f) + "\" is not an integer");
          if (f == Field::kT0 && (v.i < -kMaxAbsTsUs * 1000 || v.i > kMaxAbsTsUs * 1000)) {
            fail("\"tandem_trace.t0_ns\" out of range");
          }
          if (f == Field::kT0) out_.tandem_t0_ns = v.i;
          if (f == Field::kRanks) out_.tandem_ranks = v.i;
        }
        break;
      default:
        break;
    }
    return true;
  }

  std::int64_t time_ns(Field f, const Value& v, std::int64_t max_abs_us) const {
    if (!v.is_number()) fail(event_label() + ": \"" + field_name(f) + "\" is not a number");
    std::optional<std::int64_t> ns;
    if (v.type == Value::kInt) {
      if (v.i >= -max_abs_us && v.i <= max_abs_us) ns = v.i * 1000;
    } else if (std::fabs(v.d) <= static_cast<double>(max_abs_us)) {
      ns = decimal_us_to_ns(v.text);
      if (!ns) ns = std::llround(v.d * 1e3);  // exponent form: the double is all we have
    }
    if (!ns) {
      fail(event_label() + ": \"" + field_name(f) + "\" out of range (" +
           std::string(v.type == Value::kInt ? std::to_string(v.i) : std::string(v.text)) + " us)");
    }
    return *ns;
  }

  void event_field(Field f, const Value& v) {
    switch (f) {
      case Field::kPh:
      case Field::kCat:
      case Field::kName:
        if (v.type != Value::kString) {
          fail(event_label() + ": \"" + field_name(f) + "\" is not a string");
        }
        if (f == Field::kPh) event_.complete = v.text == "X"sv;
        if (f == Field::kCat) {
          event_.cat.assign(v.text);
          event_.has_cat = true;
        }
        if (f == Field::kName) {
          event_.name.assign(v.text);
          event_.has_name = true;
          event_.name_cut = v.cut;
        }
        break;
      case Field::kPid:
        event_.raw.pid = v.type == Value::kInt ? as_int32(v.i) : -1;  // Kineto writes some as strings
        break;
      case Field::kTid:
        event_.raw.tid = v.type == Value::kInt ? as_int32(v.i) : -1;
        break;
      case Field::kTs:
        event_.raw.start_ns = time_ns(f, v, kMaxAbsTsUs);
        event_.has_ts = true;
        if (v.type != Value::kInt) out_.fractional_ts = true;
        break;
      case Field::kDur:
        event_.dur_ns = time_ns(f, v, kMaxDurUs);
        if (event_.dur_ns < 0) fail(event_label() + ": negative \"dur\"");
        event_.has_dur = true;
        break;
      case Field::kArgs:
        if (v.type != Value::kOther) fail(event_label() + ": \"args\" is not an object");
        break;
      default:
        break;
    }
  }

  std::int32_t small_int(Field f, const Value& v) const {
    if (v.i < -1 || v.i > std::numeric_limits<std::int32_t>::max()) {
      fail(event_label() + ": \"" + field_name(f) + "\" out of range");
    }
    return static_cast<std::int32_t>(v.i);
  }

  void arg_field(Field f, const Value& v) {
    if (f == Field::kFlops) {
      if (v.is_number() && std::isfinite(v.d)) event_.raw.flops = v.d;
      return;
    }
    if (f == Field::kCollective || f == Field::kDtype || f == Field::kProcessGroup) {
      if (v.type != Value::kString) return;
      (f == Field::kCollective ? event_.collective
       : f == Field::kDtype    ? event_.dtype
                               : event_.process_group)
          .assign(v.text);
      event_.has_args = true;
      return;
    }
    // A size that is no count: said in the file's summary, the collective's size unknown.
    if ((f == Field::kInElements || f == Field::kOutElements) &&
        (v.is_number() && (v.type != Value::kInt || v.i < 0))) {
      ++out_.odd_nelems;
      event_.has_args = true;
      return;
    }
    // Other integer args with another type are someone else's convention: not ours to judge.
    if (v.type != Value::kInt) return;
    switch (f) {
      case Field::kStream:
        event_.raw.stream = as_int32(v.i);
        break;
      case Field::kDevice:
        event_.raw.device = v.i >= 0 && v.i <= 32767 ? static_cast<std::int16_t>(v.i) : -1;
        if (event_.raw.device < 0) ++out_.odd_devices;
        break;
      case Field::kInElements:
      case Field::kOutElements:
        (f == Field::kInElements ? event_.args.in_elements : event_.args.out_elements) = v.i;
        event_.has_args = true;
        break;
      case Field::kGroupSize:
        if (v.i > 0 && v.i <= 1'000'000) event_.args.group_size = static_cast<std::int32_t>(v.i);
        event_.has_args = true;
        break;
      case Field::kCorrelation:
        event_.raw.correlation = v.i;
        break;
      case Field::kWaitOnStream:
        event_.wait_on_stream = v.i;
        break;
      case Field::kWaitOnRecord:
        event_.wait_on_record = v.i;
        break;
      case Field::kStep:
        event_.raw.step = small_int(f, v);
        break;
      case Field::kTag:
        event_.raw.tag = small_int(f, v);
        break;
      case Field::kBytes:
        event_.raw.bytes = v.i;
        break;
      case Field::kQueued:
        if (v.i >= 0 && v.i <= kMaxDurUs * 1000) event_.raw.queued_ns = v.i;
        break;
      default:
        break;
    }
  }

  std::uint8_t category(const std::string& name) {
    if (last_category_ < out_.categories.size() && out_.categories[last_category_].name == name) {
      return last_category_;
    }
    for (std::size_t i = 0; i < out_.categories.size(); ++i) {
      if (out_.categories[i].name == name) return last_category_ = static_cast<std::uint8_t>(i);
    }
    // A pathological file with hundreds of categories: the rest share one plain entry.
    if (out_.categories.size() >= 255) return last_category_ = 255;
    TraceCategory c{.name = name};
    c.memory = name == "gpu_memcpy" || name == "gpu_memset";
    c.gpu = c.memory || name == "kernel";
    for (int k = 0; k <= static_cast<int>(SpanKind::kOther); ++k) {
      if (to_string(static_cast<SpanKind>(k)) == name) {
        c.tandem_kind = true;
        c.kind = static_cast<SpanKind>(k);
      }
    }
    out_.categories.push_back(std::move(c));
    return last_category_ = static_cast<std::uint8_t>(out_.categories.size() - 1);
  }

  std::int32_t push_args() {
    CollectiveArgs a = event_.args;
    if (!event_.collective.empty()) a.collective = names_.intern(event_.collective);
    if (!event_.dtype.empty()) a.dtype = names_.intern(event_.dtype);
    if (!event_.process_group.empty()) a.process_group = names_.intern(event_.process_group);
    out_.collective_args.push_back(a);
    return static_cast<std::int32_t>(out_.collective_args.size() - 1);
  }

  // A cpu_op: extends the outermost interval open on its thread, or opens one. Kept only
  // while the trace has shown no GPU event (a GPU job's compute is its kernels).
  void add_cpu_op() {
    if (gpu_seen_) return;
    // Ops nested in the open one (the common case: a thread's ops arrive in start order)
    // extend it; anything else opens an interval, and trace_import merges per thread.
    const RawEvent& e = event_.raw;
    const auto [it, fresh] = open_cpu_ops_.try_emplace(e.tid, out_.cpu_ops.size());
    if (!fresh) {
      CpuInterval& open = out_.cpu_ops[it->second];
      if (e.start_ns >= open.start_ns && e.start_ns < open.end_ns) {
        open.end_ns = std::max(open.end_ns, e.end_ns);
        return;
      }
      it->second = out_.cpu_ops.size();
    }
    out_.cpu_ops.push_back({e.start_ns, e.end_ns, e.tid, names_.intern(event_.name), -1});
  }

  void finish_event() {
    if (!event_.complete) return;  // metadata, instants, flows, counters
    const std::string_view name = event_.name;
    const bool step_mark = name.find("ProfilerStep"sv) != std::string_view::npos;
    const bool step_window =
        name.starts_with("ProfilerStep#"sv) && std::string_view(event_.cat) != "gpu_user_annotation"sv;
    std::uint8_t cat = category(event_.cat);
    const bool plain = cat == 255;
    const bool gpu = !plain && out_.categories[cat].gpu;
    if (!gpu && event_.has_dur) ++out_.cpu_events;
    const bool span = gpu || (!plain && out_.categories[cat].tandem_kind) || name.starts_with("gloo:"sv);
    // A stream's wait for another's event (PyTorch's enable_cuda_sync_events): GPU-side,
    // under the correlation of the runtime call that asked for it.
    const bool sync = std::string_view(event_.cat) == "cuda_sync"sv;
    if (sync && event_.wait_on_stream >= 0 && event_.wait_on_record >= 0 &&
        event_.raw.stream >= 0 && event_.raw.correlation >= 0) {
      out_.stream_waits.push_back({.stream = event_.raw.stream,
                                   .wait_on_stream = as_int32(event_.wait_on_stream),
                                   .record_correlation = event_.wait_on_record,
                                   .correlation = event_.raw.correlation,
                                   .pid = event_.raw.pid,
                                   .device = event_.raw.device});
      return;
    }
    // Launches are CPU-side; GPU-side annotations can carry correlations too.
    const bool launch =
        !span && !sync && event_.raw.correlation >= 0 && !starts_with(event_.cat, "gpu_");
    // PyTorch's legacy autograd profiler (a build without Kineto) writes its operators
    // without a category: CPU ops too, but for its ProfilerStep ranges.
    const bool cpu_op = !span && (std::string_view(event_.cat) == "cpu_op"sv ||
                                  (!event_.has_cat && !step_mark && !step_window));
    const bool collective_op = !span && event_.has_args && !event_.collective.empty();
    if (!span && !launch && !step_window && !step_mark && !cpu_op && !collective_op) return;
    if (!event_.has_ts) fail(event_label() + ": missing \"ts\"");
    if (launch) {
      out_.launches.push_back({event_.raw.correlation, event_.raw.start_ns});
      return;
    }
    if (!event_.has_dur) fail(event_label() + ": missing \"dur\"");
    event_.raw.end_ns = event_.raw.start_ns + event_.dur_ns;
    if (step_mark) {
      out_.step_marks.push_back({0, event_.raw.start_ns, event_.raw.end_ns});
      if (out_.step_mark_names.size() < 2) {
        const NameId id = names_.intern(name);
        if (std::find(out_.step_mark_names.begin(), out_.step_mark_names.end(), id) ==
            out_.step_mark_names.end()) {
          out_.step_mark_names.push_back(id);
        }
      }
    }
    if (step_window) {
      std::int64_t n = 0;
      const std::string_view digits = name.substr(13);
      bool number = !digits.empty();
      for (char c : digits) {
        if (c < '0' || c > '9' || n > 100'000'000) {  // not ProfilerStep#<number>
          number = false;
          break;
        }
        n = n * 10 + (c - '0');
      }
      if (number) {
        out_.steps.push_back({static_cast<std::int32_t>(n), event_.raw.start_ns, event_.raw.end_ns});
      }
    }
    if (collective_op) {
      out_.collective_ops.push_back(
          {event_.raw.start_ns, event_.raw.end_ns, event_.raw.tid, kNoName, push_args()});
    }
    if (cpu_op) add_cpu_op();
    if (!span) return;
    if (!event_.has_name) fail(event_label() + ": missing \"name\"");
    if (gpu && !gpu_seen_) {
      gpu_seen_ = true;
      out_.cpu_ops.clear();
      out_.cpu_ops.shrink_to_fit();
      open_cpu_ops_.clear();
    }
    if (event_.has_args) event_.raw.args = push_args();
    event_.raw.category = cat;
    event_.raw.name = names_.intern(event_.name);
    out_.names_cut += event_.name_cut;
    if (out_.events.size() == out_.events.capacity()) check_room_to_grow();
    out_.events.push_back(event_.raw);
  }

  // Note [events in memory]: the events a trace keeps grow with the trace, whatever its
  // file's size (a 5.6 MB .json.gz held 63 M kernels). Before the list doubles, the memory
  // left (MemAvailable, the cgroups' limits, the address-space limit) must hold the new
  // list and as much again for the spans made from it; else one line, not bad_alloc or the
  // OOM killer. Checked at each doubling only: a handful of reads of /proc per file.
  void check_room_to_grow() const {
    const auto grown = static_cast<std::int64_t>(
        std::max<std::size_t>(out_.events.capacity() * 2, 1 << 16) * sizeof(out_.events[0]));
    const std::int64_t need = 2 * grown;
    AvailableMemory left = available_memory();
    if (const std::int64_t as = address_space_headroom();
        as >= 0 && (left.bytes < 0 || as < left.bytes)) {
      left = {.bytes = as, .source = "the address-space limit"};
    }
    if (left.bytes < 0 || left.bytes >= need) return;
    fail("its events do not fit in the memory left: " + std::to_string(out_.events.size()) +
         " kept so far, and " + format_bytes(static_cast<double>(need)) +
         " needed to go on where " + format_bytes(static_cast<double>(left.bytes)) + " is left (" +
         left.source + "); profile fewer steps or kernels");
  }

  std::string_view source_;
  std::function<std::string()> where_;
  NameTable& names_;
  RawTrace& out_;
  std::vector<Frame> frames_;
  Field pending_ = Field::kNone;
  EventFields event_;
  std::uint8_t last_category_ = 0;
  std::unordered_map<std::int64_t, std::size_t> open_cpu_ops_;  // tid -> its last cpu_ops entry
  bool gpu_seen_ = false;
  bool saw_events_ = false;
  bool saw_anything_ = false;
};

TraceSemantics::TraceSemantics(std::string_view source, NameTable& names, RawTrace& out,
                               std::function<std::string()> where)
    : impl_(std::make_unique<Impl>(source, names, out, std::move(where))) {}
TraceSemantics::~TraceSemantics() = default;
void TraceSemantics::start_object() { impl_->start_object(); }
void TraceSemantics::end_object() { impl_->end_object(); }
void TraceSemantics::start_array() { impl_->start_array(); }
void TraceSemantics::end_array() { impl_->end_array(); }
bool TraceSemantics::key(std::string_view k) { return impl_->key(k); }
void TraceSemantics::scalar(const JsonScalar& v) { impl_->scalar(v); }
bool TraceSemantics::skipping() const { return impl_->skipping(); }
std::size_t TraceSemantics::depth() const { return impl_->depth(); }
bool TraceSemantics::saw_events() const { return impl_->saw_events(); }
bool TraceSemantics::saw_anything() const { return impl_->saw_anything(); }
void TraceSemantics::fail(const std::string& what) const { impl_->fail(what); }

}  // namespace tandem
