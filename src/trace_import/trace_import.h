// Profiler traces -> a tandem Timeline, so other people's training runs get the same
// metrics and reports as tandem's own (docs/ANALYZE.md).
//
// Two input formats, told apart by content, plain or gzip:
//   - PyTorch profiler (Kineto) Chrome traces, one file per rank. The rank is
//     distributedInfo.rank, else the file's position in the input list.
//   - tandem's own trace.json (otherData.tandem_trace): read back with the semantics of
//     read_chrome_trace (pid = rank, tid = lane, cat = kind, args.step).
//
// Kineto events become spans (rank, lane, kind, name, step):
//   compute kernels   -> Lane::kCompute, SpanKind::kKernel
//   comm kernels      -> Lane::kComm, the collective guessed from the name, else kOther
//   memcpy / memset   -> Lane::kIdle, SpanKind::kMemory: drawn in the trace, but neither
//                        compute nor communication for the metrics
//   gloo:* CPU ops    -> Lane::kComm (CPU-side collectives)
//   cpu_op intervals  -> Lane::kCompute, only in a trace without GPU events (a CPU job):
//                        the outermost operator intervals of each thread, collectives'
//                        own ops (record_param_comms, c10d::*) left out
// A file without distributedInfo whose GPU events name several devices (args.device, else
// the pid) becomes one rank per device: ranks r, r+1, ... in device order, r the file's
// rank; CPU-side spans go to its first device. A distributed job's file is one rank. Communication spans carry the collective and its size
// (collectives.h) in ImportResult::comm.
// Step: the ProfilerStep#N window (CPU side) containing the launch of the kernel (found
// through args.correlation), else the kernel's own start; -1 outside every window. A
// file without ProfilerStep annotations is one iteration, step 0.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "timeline/recorder.h"
#include "trace_import/classify.h"
#include "trace_import/collectives.h"
#include "trace_import/hta_overlap.h"

namespace tandem {

struct TraceFileInfo {
  std::string path;
  std::string format;       // "kineto" or "tandem"
  std::int32_t rank = -1;   // kineto: the rank its spans got; tandem: -1 (several)
  std::string rank_source;  // "distributedInfo.rank", "file order", "trace (pid)"
  std::uint64_t bytes = 0;  // bytes read (decompressed)
  std::size_t trace_events = 0;
  std::size_t compute = 0, comm = 0, memory = 0;  // spans by role
  std::size_t ignored = 0;                        // GPU events no rule classified (--compute-regex)
  std::size_t outside_steps = 0;                  // spans in no ProfilerStep window (step -1)
  std::size_t step_windows = 0;                   // ProfilerStep#N annotations
  std::size_t names_cut = 0;  // events kept whose name was longer than 64 KiB (cut to it)
  std::size_t odd_devices = 0;  // events whose args.device is no device (kept on the file's)
  std::size_t odd_nelems = 0;   // collectives whose nelems is no count (size unknown)
  std::size_t devices = 0;    // distinct GPUs of its events (kineto)
  // A file split into a rank per device (several GPUs, no distributedInfo): HTA's number
  // for the whole file, which is what HTA reports for it.
  std::optional<HtaRankModes> hta_file;
};

// One rank of the timeline that came from a Kineto trace: the file, and the GPU when the
// file holds several (each GPU of a file is a rank of its own).
struct ImportedRank {
  std::int32_t rank = 0;
  std::string file;
  std::int32_t device = -1;  // -1: the file's only device, or none (a CPU-only trace)
  HtaRankModes hta;          // HTA's overlap of this rank (hta_overlap.h)
};

// Where an imported span ran and when it was asked for, for a replay
// (experiment/profile_replay.h): the in-order queue it ran on (a GPU stream, or a CPU
// thread) and the CPU launch that issued it.
struct SpanOrigin {
  static constexpr std::int64_t kCpuThread = std::int64_t{1} << 40;  // + tid: a CPU thread
  std::int64_t queue = -1;      // args.stream of a GPU event, kCpuThread + tid of a CPU one
  std::int64_t launch_ns = -1;  // the launch's start (args.correlation), span clock; -1: none
};

// A stream's wait for another stream's event (a "cuda_sync" Stream Wait Event whose
// runtime calls the trace holds): `queue`'s first work launched after `wait_ns` runs after
// `producer`'s last work launched before `record_ns` (CPU times, span clock).
struct ImportedStreamWait {
  std::int32_t rank = 0;
  std::int64_t queue = -1, producer = -1;
  std::int64_t record_ns = 0, wait_ns = 0;
};

struct ImportResult {
  Timeline timeline;
  std::vector<ImportedStreamWait> stream_waits;
  // By span index, for the Kineto spans; shorter than the spans, or a default entry: a span
  // of tandem's own trace, whose lane is its queue.
  std::vector<SpanOrigin> origins;
  std::vector<TraceFileInfo> files;
  std::vector<ImportedRank> ranks;  // Kineto ranks, in rank order
  std::vector<CommInfo> comm;       // one per communication span of a Kineto trace
  // HTA drops the last ProfilerStep only when the traces hold two or more distinct
  // ProfilerStep names (hta_overlap.h); otherwise both of its modes keep everything.
  bool hta_step_filter = false;
  // HTA's number for a rank (or a whole file) in either mode.
  const HtaOverlap& hta(const HtaRankModes& modes, bool include_last_step) const;
  const HtaOverlap& hta(const ImportedRank& r, bool include_last_step) const {
    return hta(r.hta, include_last_step);
  }
};

class TraceImporter {
 public:
  // Throws UsageError for an invalid regular expression.
  explicit TraceImporter(const ClassificationRules& rules = {});

  // Adds one trace file. `file_index` (0-based position in the input list) is the rank of
  // a Kineto trace without distributedInfo. Throws UsageError naming `path`.
  void add_file(const std::string& path, int file_index);
  // The same from bytes in memory; `source` names it in errors.
  void add_bytes(std::string_view data, const std::string& source, int file_index);
  // Every path, file_index = position, read on up to one thread per core (at most that
  // many files read ahead) and interpreted in order: the same result, and the same error
  // (the first failing file in input order), as add_file on each in turn.
  void add_files(const std::vector<std::string>& paths);

  // The result so far; throws UsageError if two inputs claim the same rank.
  ImportResult finish();

 private:
  void add(class TraceBytes& bytes, const std::string& source, int file_index);
  // One file's raw trace into spans (trace_import.cpp): tandem's own, or Kineto's in its
  // parts (HTA's views, the spans with their collectives, CPU-only compute).
  void interpret(struct RawTrace raw, const std::string& source, int file_index);
  void claim_rank(std::int32_t rank, const std::string& source);
  void interpret_tandem(const RawTrace& raw, const std::string& source, TraceFileInfo& info);
  void interpret_kineto(RawTrace& raw, const std::string& source, int file_index,
                        TraceFileInfo& info);
  void add_hta_views(const RawTrace& raw, const class LaunchIndex& launches,
                     const class DeviceSplit& split, const std::string& source,
                     TraceFileInfo& info);
  void add_kineto_spans(RawTrace& raw, const LaunchIndex& launches, const DeviceSplit& split,
                        const class StepFinder& steps, TraceFileInfo& info);
  void add_cpu_compute(RawTrace& raw, const StepFinder& steps, TraceFileInfo& info);

  EventClassifier classifier_;
  ImportResult result_;
  std::map<std::int32_t, std::string> rank_owner_;  // rank -> the file that supplied it
  std::vector<std::string> step_mark_names_;         // distinct, over all files
};

// Convenience: add_files(paths), then finish().
ImportResult import_traces(const std::vector<std::string>& paths,
                           const ClassificationRules& rules = {});

// Files and directories -> trace files: a directory contributes its *.json and *.json.gz
// files sorted by name. Throws UsageError("<flag>: <path>: ...") for a missing or
// unreadable path (a loop of symbolic links included), a directory without traces, and a
// file named twice (compared as canonical paths: "a.json" and "./a.json" are one file).
std::vector<std::string> expand_trace_inputs(const std::vector<std::string>& inputs,
                                             std::string_view flag);

}  // namespace tandem
