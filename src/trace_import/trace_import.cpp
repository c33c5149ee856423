#include "trace_import/trace_import.h"

#include <algorithm>
#include <filesystem>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <limits>
#include <map>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/error.h"
#include "timeline/chrome_trace.h"
#include "trace_import/trace_reader.h"

namespace tandem {

// The helpers of TraceImporter's parts (trace_import.h names them in its private
// declarations, so they are not in an anonymous namespace).

// ProfilerStep windows sorted by start, searched for the window holding a time point.
class StepFinder {
 public:
  explicit StepFinder(std::vector<StepWindow> windows) : windows_(std::move(windows)) {
    std::sort(windows_.begin(), windows_.end(),
              [](const StepWindow& a, const StepWindow& b) { return a.start_ns < b.start_ns; });
  }
  bool empty() const { return windows_.empty(); }
  // The step whose [start, end) holds t, -1 if none. Windows do not nest in practice; if
  // they overlap, the latest-starting one wins.
  std::int32_t step_at(std::int64_t t) const {
    auto it = std::upper_bound(windows_.begin(), windows_.end(), t,
                               [](std::int64_t v, const StepWindow& w) { return v < w.start_ns; });
    if (it == windows_.begin()) return -1;
    --it;
    return t < it->end_ns ? it->step : -1;
  }

 private:
  std::vector<StepWindow> windows_;
};

namespace {

namespace fs = std::filesystem;

// Gives the heap's free memory back to the system. The reader's growing vectors and HTA's
// temporary interval lists are freed below glibc's mmap threshold, so their pages stay
// resident until trimmed; the spans allocated next would come on top of them (a 1 GB
// trace peaked 57 MB higher without this: docs/PERFORMANCE.md).
void release_free_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

Span role_span(EventRole role, std::string_view name) {
  Span s;
  switch (role) {
    case EventRole::kCompute:
      s.lane = Lane::kCompute;
      s.kind = SpanKind::kKernel;
      break;
    case EventRole::kComm:
      s.lane = Lane::kComm;
      s.kind = guess_comm_kind(name);
      break;
    case EventRole::kMemory:
    case EventRole::kIgnored:
      s.lane = Lane::kIdle;
      s.kind = SpanKind::kMemory;
      break;
  }
  return s;
}

}  // namespace

TraceImporter::TraceImporter(const ClassificationRules& rules) : classifier_(rules) {}

void TraceImporter::add_file(const std::string& path, int file_index) {
  TraceBytes bytes(path);
  add(bytes, path, file_index);
}

void TraceImporter::add_bytes(std::string_view data, const std::string& source, int file_index) {
  TraceBytes bytes(data);
  add(bytes, source, file_index);
}

void TraceImporter::add(TraceBytes& bytes, const std::string& source, int file_index) {
  RawTrace raw = read_raw_trace(bytes, source, *result_.timeline.names);
  interpret(std::move(raw), source, file_index);
}

void TraceImporter::add_files(const std::vector<std::string>& paths) {
  if (paths.size() == 1) {
    add_file(paths[0], 0);
    return;
  }
  // Read on up to one thread per core, interpret here in input order: the result and the
  // error (the first failing file in input order) are those of a sequential read. Each
  // file is read with its own names, mapped into the timeline's before interpretation.
  struct Slot {
    NameTable names;
    RawTrace raw;
    std::exception_ptr error;
    bool done = false;
  };
  const std::size_t n = paths.size();
  const std::size_t threads =
      std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::unique_ptr<Slot>> slots(n);
  for (auto& slot : slots) slot = std::make_unique<Slot>();
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t next = 0;         // the next file a reader takes
  std::size_t interpreted = 0;  // files interpreted (and freed) so far
  bool stop = false;
  const auto reader = [&] {
    std::unique_lock lock(mutex);
    for (;;) {
      // At most `threads` files read ahead of the interpretation: memory stays that of
      // `threads` raw traces, however many files there are.
      changed.wait(lock, [&] { return stop || next >= n || next < interpreted + threads; });
      if (stop || next >= n) return;
      const std::size_t i = next++;
      lock.unlock();
      Slot& slot = *slots[i];
      try {
        TraceBytes bytes(paths[i]);
        slot.raw = read_raw_trace(bytes, paths[i], slot.names);
      } catch (...) {
        slot.error = std::current_exception();
      }
      lock.lock();
      slot.done = true;
      changed.notify_all();
    }
  };
  std::vector<std::jthread> pool;
  for (std::size_t t = 0; t < threads; ++t) pool.emplace_back(reader);
  const auto stop_readers = [&] {
    {
      std::lock_guard guard(mutex);
      stop = true;
    }
    changed.notify_all();
    pool.clear();  // joins
  };
  try {
    for (std::size_t i = 0; i < n; ++i) {
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return slots[i]->done; });
      }
      Slot& slot = *slots[i];
      if (slot.error) std::rethrow_exception(slot.error);
      remap_names(slot.raw, slot.names, *result_.timeline.names);
      interpret(std::move(slot.raw), paths[i], static_cast<int>(i));
      slots[i].reset();
      {
        std::lock_guard guard(mutex);
        ++interpreted;
      }
      changed.notify_all();
    }
  } catch (...) {
    stop_readers();
    throw;
  }
  stop_readers();
}

// The GPU devices of a Kineto file: args.device of the GPU events, else their pid
// (Kineto's GPU rows). A file of a distributed job (distributedInfo) is one rank whatever
// devices it names; a file without it that names several is a rank per device, a
// timeline each.
class DeviceSplit {
 public:
  DeviceSplit(const RawTrace& raw, bool one_rank) {
    for (const RawEvent& e : raw.events) {
      if (raw.categories[e.category].gpu) devices_.push_back(device_of(e));
    }
    std::sort(devices_.begin(), devices_.end());
    devices_.erase(std::unique(devices_.begin(), devices_.end()), devices_.end());
    named_ = devices_.size();
    if (one_rank) devices_.clear();
  }
  std::size_t devices_named() const { return named_; }
  std::size_t timelines() const { return std::max<std::size_t>(devices_.size(), 1); }
  bool split() const { return timelines() > 1; }
  std::int32_t device(std::size_t timeline) const { return split() ? devices_[timeline] : -1; }
  std::size_t timeline_of(const RawEvent& e) const {
    if (devices_.size() <= 1) return 0;
    return static_cast<std::size_t>(
        std::lower_bound(devices_.begin(), devices_.end(), device_of(e)) - devices_.begin());
  }

 private:
  static std::int32_t device_of(const RawEvent& e) {
    return e.device >= 0 ? e.device : std::max(e.pid, 0);
  }
  std::vector<std::int32_t> devices_;
  std::size_t named_ = 0;
};

namespace {

// CPU ops carrying a collective's arguments, by start: a comm span without arguments of
// its own takes those of the innermost such op around its CPU-side moment (the launch of
// a kernel, the start of a gloo range), if it is the same collective. NCCL runs send,
// recv and all-to-all as SendRecv kernels: a SendRecv or unnamed span takes the op's
// collective.
class CollectiveOps {
 public:
  CollectiveOps(std::vector<CpuInterval>& ops, const std::vector<CollectiveArgs>& args,
                const NameTable& names)
      : ops_(ops), args_(args), names_(names) {
    std::sort(ops_.begin(), ops_.end(),
              [](const CpuInterval& a, const CpuInterval& b) { return a.start_ns < b.start_ns; });
    for (const CpuInterval& op : ops_) longest_ = std::max(longest_, op.end_ns - op.start_ns);
  }

  const CollectiveArgs* enclosing(std::int64_t t, CollectiveType type) const {
    auto it = std::upper_bound(ops_.begin(), ops_.end(), t,
                               [](std::int64_t v, const CpuInterval& op) { return v < op.start_ns; });
    // Only ops starting within the longest op's length before t can hold t.
    while (it != ops_.begin()) {
      --it;
      if (it->start_ns < t - longest_) break;
      if (it->end_ns < t) continue;
      const CollectiveArgs& a = args_[static_cast<std::size_t>(it->args)];
      const CollectiveType theirs = collective_type(names_.name(a.collective));
      const bool any = type == CollectiveType::kUnknown || type == CollectiveType::kSendRecv;
      return any || theirs == type ? &a : nullptr;
    }
    return nullptr;
  }

  // What a comm event is: its collective, group, dtype and bytes, from its own
  // arguments or an enclosing op's.
  CommInfo describe(const RawEvent& e, std::int64_t cpu_time, std::size_t span) const {
    CommInfo c{.span = span};
    const CollectiveArgs* args = e.args >= 0 ? &args_[static_cast<std::size_t>(e.args)] : nullptr;
    c.type = collective_type(args != nullptr && args->collective != kNoName
                                 ? names_.name(args->collective)
                                 : names_.name(e.name));
    if (args == nullptr) {
      args = enclosing(cpu_time, c.type);
      if (args != nullptr && args->collective != kNoName) {
        c.type = collective_type(names_.name(args->collective));
      }
    }
    if (args != nullptr) {
      c.group_size = args->group_size;
      c.dtype = args->dtype;
      c.process_group = args->process_group;
      const std::optional<int> element = dtype_bytes(names_.name(c.dtype));
      const std::int64_t elements = std::max(args->in_elements, args->out_elements);
      // A size beyond int64 is not a real collective's: unknown rather than wrapped.
      if (element && elements >= 0 &&
          elements <= std::numeric_limits<std::int64_t>::max() / *element) {
        c.bytes = elements * *element;
      }
    }
    return c;
  }

 private:
  std::vector<CpuInterval>& ops_;
  const std::vector<CollectiveArgs>& args_;
  const NameTable& names_;
  std::int64_t longest_ = 0;
};

}  // namespace

// The body of add: one file's raw trace, names in the timeline's table, into spans.
void TraceImporter::interpret(RawTrace raw, const std::string& source, int file_index) {
  release_free_memory();  // what the reader's growing vectors left behind
  TraceFileInfo info{.path = source,
                     .bytes = raw.bytes_read,
                     .trace_events = raw.trace_events,
                     .step_windows = raw.steps.size(),
                     .names_cut = raw.names_cut,
                     .odd_devices = raw.odd_devices,
                     .odd_nelems = raw.odd_nelems};
  if (raw.tandem) {
    interpret_tandem(raw, source, info);
  } else {
    interpret_kineto(raw, source, file_index, info);
  }
  result_.files.push_back(std::move(info));
}

void TraceImporter::claim_rank(std::int32_t rank, const std::string& source) {
  std::string& owner = rank_owner_[rank];
  if (!owner.empty() && owner != source) {
    throw UsageError(source + ": rank " + std::to_string(rank) + " is also in " + owner +
                     " (one trace per rank)");
  }
  owner = source;
  result_.timeline.ranks = std::max(result_.timeline.ranks, rank + 1);
}

// tandem's own trace: the meaning read_chrome_trace gives it.
void TraceImporter::interpret_tandem(const RawTrace& raw, const std::string& source,
                                     TraceFileInfo& info) {
  Timeline& timeline = result_.timeline;
  const NameTable& names = *timeline.names;
  info.format = "tandem";
  info.rank_source = "trace (pid)";
  for (const RawEvent& e : raw.events) {
    const TraceCategory& cat = raw.categories[e.category];
    if (!cat.tandem_kind) continue;
    if (e.tid < 0 || e.tid >= kLaneCount || e.pid < 0 || e.pid > 1'000'000) {
      throw UsageError(source + ": a span has pid " + std::to_string(e.pid) + ", tid " +
                       std::to_string(e.tid) + ", which is not a tandem rank and lane");
    }
    Span s{.rank = static_cast<std::int32_t>(e.pid),
           .lane = static_cast<Lane>(e.tid),
           .kind = cat.kind,
           .name = kNoName,
           .step = e.step,
           .tag = e.tag,
           .start_ns = e.start_ns + raw.tandem_t0_ns,
           .end_ns = e.end_ns + raw.tandem_t0_ns,
           .bytes = e.bytes,
           .flops = e.flops};
    if (e.queued_ns >= 0 && s.lane == Lane::kComm) s.issue_ns = s.start_ns - e.queued_ns;
    // A name equal to the generated label carries no information of its own.
    if (names.name(e.name) != chrome_event_name(timeline, s)) s.name = e.name;
    claim_rank(s.rank, source);
    info.compute += s.lane == Lane::kCompute;
    info.comm += s.lane == Lane::kComm;
    info.memory += s.lane == Lane::kIdle && s.kind == SpanKind::kMemory;  // a give-back
    timeline.spans.push_back(s);
  }
  // The run's rank count, also for ranks that recorded nothing; claimed only through
  // spans, so that the work here grows with the spans, not with the count.
  if (raw.tandem_ranks > 0 && raw.tandem_ranks <= 1'000'000) {
    timeline.ranks = std::max(timeline.ranks, static_cast<int>(raw.tandem_ranks));
  }
}

// A Kineto trace: its ranks, HTA's overlap per rank, its spans with their collectives,
// and for a job without GPU events the CPU operators as compute.
void TraceImporter::interpret_kineto(RawTrace& raw, const std::string& source, int file_index,
                                     TraceFileInfo& info) {
  info.format = "kineto";
  info.rank = raw.distributed_rank ? static_cast<std::int32_t>(*raw.distributed_rank) : file_index;
  info.rank_source = raw.distributed_rank ? "distributedInfo.rank" : "file order";
  const DeviceSplit split(raw, raw.distributed_rank.has_value());
  info.devices = split.devices_named();
  for (std::size_t d = 0; d < split.timelines(); ++d) {
    claim_rank(info.rank + static_cast<std::int32_t>(d), source);
  }
  const LaunchIndex launches(std::move(raw.launches));
  add_hta_views(raw, launches, split, source, info);
  release_free_memory();
  const StepFinder steps(std::move(raw.steps));
  add_kineto_spans(raw, launches, split, steps, info);
  if (info.devices == 0) add_cpu_compute(raw, steps, info);
  // Stream waits whose two runtime calls the trace holds: the replay's explicit edges.
  const std::int64_t base_ns = raw.base_time_ns.value_or(0);
  for (const StreamWait& w : raw.stream_waits) {
    const Launch* record = launches.find(w.record_correlation);
    const Launch* wait = launches.find(w.correlation);
    if (record == nullptr || wait == nullptr) continue;
    RawEvent where;
    where.pid = w.pid;
    where.device = w.device;
    result_.stream_waits.push_back(
        {.rank = info.rank + static_cast<std::int32_t>(split.timeline_of(where)),
         .queue = w.stream,
         .producer = w.wait_on_stream,
         .record_ns = record->start_ns + base_ns,
         .wait_ns = wait->start_ns + base_ns});
  }
}

// HTA's view (hta_overlap.h): per timeline, and for a file split by device also the whole
// file, which is what HTA itself reports for it.
void TraceImporter::add_hta_views(const RawTrace& raw, const LaunchIndex& launches,
                                  const DeviceSplit& split, const std::string& source,
                                  TraceFileInfo& info) {
  const NameTable& names = *result_.timeline.names;
  for (NameId id : raw.step_mark_names) {
    const std::string_view mark = names.name(id);
    if (step_mark_names_.size() < 2 &&
        std::find(step_mark_names_.begin(), step_mark_names_.end(), mark) == step_mark_names_.end()) {
      step_mark_names_.emplace_back(mark);
    }
  }
  const HtaCpuSide cpu(launches, raw.step_marks, raw.fractional_ts, raw.cpu_events > 0);
  // Per event its HTA kernel type (GPU events) once; each timeline selects its own.
  // Kernel names repeat: the type is worked out once per name.
  std::vector<std::uint8_t> types(raw.events.size(), kNotHere);
  std::vector<std::uint8_t> type_of_name(names.size(), kNotHere);
  for (std::size_t k = 0; k < raw.events.size(); ++k) {
    const RawEvent& e = raw.events[k];
    if (!raw.categories[e.category].gpu) continue;
    std::uint8_t& type = type_of_name[e.name];
    if (type == kNotHere) type = static_cast<std::uint8_t>(hta_kernel_type(names.name(e.name)));
    types[k] = type;
  }
  // A file split by device: each timeline's GPU events by index, and the whole file's
  // number (what HTA reports for it).
  std::vector<std::vector<std::uint32_t>> subsets(split.split() ? split.timelines() : 0);
  if (split.split()) {
    for (std::size_t k = 0; k < raw.events.size(); ++k) {
      if (types[k] != kNotHere) {
        subsets[split.timeline_of(raw.events[k])].push_back(static_cast<std::uint32_t>(k));
      }
    }
    info.hta_file = hta_overlap({&raw.events, &types, &cpu, nullptr});
  }
  for (std::size_t d = 0; d < split.timelines(); ++d) {
    result_.ranks.push_back({.rank = info.rank + static_cast<std::int32_t>(d),
                             .file = source,
                             .device = split.device(d),
                             .hta = hta_overlap({&raw.events, &types, &cpu,
                                                 split.split() ? &subsets[d] : nullptr})});
  }
}

// Every GPU event (and gloo's CPU ranges) as a span of its role, comm spans with their
// collective (CollectiveOps).
void TraceImporter::add_kineto_spans(RawTrace& raw, const LaunchIndex& launches,
                                     const DeviceSplit& split, const StepFinder& steps,
                                     TraceFileInfo& info) {
  Timeline& timeline = result_.timeline;
  const NameTable& names = *timeline.names;
  const std::int64_t base_ns = raw.base_time_ns.value_or(0);
  const CollectiveOps collectives(raw.collective_ops, raw.collective_args, names);
  timeline.spans.reserve(timeline.spans.size() + raw.events.size());
  for (const RawEvent& e : raw.events) {
    const TraceCategory& cat = raw.categories[e.category];
    EventRole role;
    if (cat.gpu) {
      role = classifier_.classify(e.name, cat.memory, names);
    } else if (names.name(e.name).starts_with("gloo:")) {
      role = EventRole::kComm;
    } else {
      continue;  // a tandem span kind in a Kineto trace: not an event Kineto writes
    }
    if (role == EventRole::kIgnored) {
      ++info.ignored;
      continue;
    }
    Span s = role_span(role, names.name(e.name));
    s.rank = info.rank + static_cast<std::int32_t>(cat.gpu ? split.timeline_of(e) : 0);
    s.name = e.name;
    s.start_ns = e.start_ns + base_ns;
    s.end_ns = e.end_ns + base_ns;
    const Launch* launch = cat.gpu && e.correlation >= 0 ? launches.find(e.correlation) : nullptr;
    const std::int64_t cpu_time = launch != nullptr ? launch->start_ns : e.start_ns;
    s.step = steps.empty() ? 0 : steps.step_at(cpu_time);
    if (role == EventRole::kComm) {
      CommInfo c = collectives.describe(e, cpu_time, timeline.spans.size());
      if (c.type != CollectiveType::kUnknown) s.kind = span_kind(c.type);
      if (c.bytes >= 0) s.bytes = c.bytes;
      if (c.process_group != kNoName) s.group = group_id(timeline.names->name(c.process_group));
      result_.comm.push_back(std::move(c));
    }
    info.compute += role == EventRole::kCompute;
    info.comm += role == EventRole::kComm;
    info.memory += role == EventRole::kMemory;
    info.outside_steps += s.step < 0;
    result_.origins.resize(timeline.spans.size());
    result_.origins.push_back({.queue = cat.gpu ? std::int64_t{e.stream >= 0 ? e.stream : e.tid}
                                                : SpanOrigin::kCpuThread + e.tid,
                               .launch_ns = launch != nullptr ? launch->start_ns + base_ns : -1});
    timeline.spans.push_back(s);
  }
}

// A job without GPU events: its compute is the CPU operators (the reader kept their
// outermost intervals per thread; merged here once more, in case a thread's ops came out
// of start order), less the collectives' own ops.
void TraceImporter::add_cpu_compute(RawTrace& raw, const StepFinder& steps, TraceFileInfo& info) {
  const NameTable& names = *result_.timeline.names;
  const std::int64_t base_ns = raw.base_time_ns.value_or(0);
  std::stable_sort(raw.cpu_ops.begin(), raw.cpu_ops.end(),
                   [](const CpuInterval& a, const CpuInterval& b) {
                     return a.tid != b.tid ? a.tid < b.tid : a.start_ns < b.start_ns;
                   });
  std::vector<CpuInterval> outermost;
  for (const CpuInterval& op : raw.cpu_ops) {
    if (!outermost.empty() && outermost.back().tid == op.tid &&
        op.start_ns < outermost.back().end_ns) {
      outermost.back().end_ns = std::max(outermost.back().end_ns, op.end_ns);
    } else {
      outermost.push_back(op);
    }
  }
  for (const CpuInterval& op : outermost) {
    const std::string_view name = names.name(op.name);
    if (name.starts_with("record_param_comms") || name.starts_with("c10d::") ||
        name.starts_with("gloo:")) {
      continue;
    }
    Span s{.rank = info.rank, .lane = Lane::kCompute, .kind = SpanKind::kKernel, .name = op.name};
    s.start_ns = op.start_ns + base_ns;
    s.end_ns = op.end_ns + base_ns;
    s.step = steps.empty() ? 0 : steps.step_at(op.start_ns);
    ++info.compute;
    info.outside_steps += s.step < 0;
    result_.origins.resize(result_.timeline.spans.size());
    result_.origins.push_back({.queue = SpanOrigin::kCpuThread + op.tid});
    result_.timeline.spans.push_back(s);
  }
}

ImportResult TraceImporter::finish() {
  result_.hta_step_filter = step_mark_names_.size() >= 2;
  std::sort(result_.ranks.begin(), result_.ranks.end(),
            [](const ImportedRank& a, const ImportedRank& b) { return a.rank < b.rank; });
  return std::move(result_);
}

const HtaOverlap& ImportResult::hta(const HtaRankModes& modes, bool include_last_step) const {
  return include_last_step || !hta_step_filter ? modes.last_step_in : modes.last_step_out;
}

ImportResult import_traces(const std::vector<std::string>& paths,
                           const ClassificationRules& rules) {
  TraceImporter importer(rules);
  importer.add_files(paths);
  return importer.finish();
}

namespace {

// Why `path` cannot be read, in words: a loop of symbolic links is not "no such file".
std::string unreadable(const std::error_code& ec) {
  if (ec == std::errc::too_many_symbolic_link_levels) return "a loop of symbolic links";
  if (!ec || ec == std::errc::no_such_file_or_directory) return "no such file or directory";
  return ec.message();
}

}  // namespace

std::vector<std::string> expand_trace_inputs(const std::vector<std::string>& inputs,
                                             std::string_view flag) {
  std::vector<std::string> files;
  const std::string prefix = flag.empty() ? "" : std::string(flag) + ": ";
  // Every filesystem call here takes an error_code: a broken link or a loop inside a
  // directory is one line naming it, never an exception's text.
  std::map<fs::path, std::string> given_as;  // canonical path -> the name first given
  const auto add = [&](const std::string& file) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(file, ec);
    if (ec) throw UsageError(prefix + file + ": " + unreadable(ec));
    const auto [at, fresh] = given_as.emplace(canonical, file);
    if (!fresh) {
      throw UsageError(prefix + file + ": the same file as " + at->second +
                       " (each trace once; one trace per rank)");
    }
    files.push_back(file);
  };
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status status = fs::status(input, ec);
    if (ec || !fs::exists(status)) throw UsageError(prefix + input + ": " + unreadable(ec));
    if (!fs::is_directory(status)) {
      add(input);
      continue;
    }
    std::vector<std::string> found;
    fs::directory_iterator it(input, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.ends_with(".json") && !name.ends_with(".json.gz")) continue;
      std::error_code entry_ec;
      const bool regular = it->is_regular_file(entry_ec);
      if (entry_ec) throw UsageError(prefix + it->path().string() + ": " + unreadable(entry_ec));
      if (regular) found.push_back(it->path().string());
    }
    if (ec) throw UsageError(prefix + input + ": cannot list: " + ec.message());
    if (found.empty()) throw UsageError(prefix + input + ": no *.json or *.json.gz traces in it");
    std::sort(found.begin(), found.end());
    for (const std::string& file : found) add(file);
  }
  return files;
}

}  // namespace tandem
