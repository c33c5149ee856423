// Streaming reader of Chrome-trace JSON (PyTorch profiler / Kineto, or tandem's own
// trace.json), keeping only the events an overlap analysis can use. No document tree is
// built: memory grows with the kept events, not with the file or its longest string.
//
// Two tokenizers feed one semantic layer (trace_semantics.h, which decides what is
// kept): the fast reader (fast_trace_reader.h: a framer, simdjson over batches of
// events, about 4x the speed; events over 64 KiB through the other tokenizer) reads
// every file it can, and the reference reader (nlohmann's SAX parser over BoundedJson,
// bounded_json.h) reads the rest: odd but valid forms (a key with escapes, an integer
// beyond 64 bits, a top-level value over 64 KiB) and every file with an error, which it
// reports (so errors and their offsets are the reference reader's).
//
// What is kept (everything else is skipped as it streams past):
//   - complete events ("ph":"X") whose category is a GPU one (kernel, gpu_memcpy,
//     gpu_memset) or one of tandem's span kinds, and CPU collectives named "gloo:*";
//   - the collective's arguments that PyTorch records ("Collective name", "In msg
//     nelems", "Out msg nelems", "Group size", "dtype"), of a kept event (an NCCL kernel)
//     or of a CPU op (record_param_comms): CollectiveArgs;
//   - CPU operators (cat cpu_op), merged per thread into their outermost intervals, the
//     compute of a job without GPU events (gloo on CPUs);
//   - launches: other complete events that carry args.correlation (cudaLaunchKernel and
//     friends), as (correlation, start) pairs, to find the step that launched a kernel;
//   - stream waits: cuda_sync events naming the stream and event record they wait on;
//   - ProfilerStep#N windows (CPU-side; the GPU copies, gpu_user_annotation, are not),
//     and every complete event whose name holds "ProfilerStep" (HTA's step marks);
//   - distributedInfo.rank, baseTimeNanoseconds and otherData.tandem_trace.
// Which format the file is in is only known at its end (tandem writes otherData last),
// so interpretation is left to trace_import.
//
// Errors: UsageError("<source>: <what> at byte <offset>") for anything malformed:
// invalid JSON, a wrong type in a field the reader uses, a timestamp out of range, a
// number or nesting beyond BoundedJson's bounds (nesting: kMaxJsonDepth, both readers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "timeline/span.h"
#include "trace_import/trace_bytes.h"

namespace tandem {

// Timestamps are bounded so that every sum the importer forms fits in int64 ns:
// ts within ±3e15 us (beyond the year 2060 since the epoch), dur within [0, 1e12] us.
inline constexpr std::int64_t kMaxAbsTsUs = 3'000'000'000'000'000;
inline constexpr std::int64_t kMaxDurUs = 1'000'000'000'000;

struct TraceCategory {
  std::string name;
  bool gpu = false;          // kernel, gpu_memcpy, gpu_memset
  bool memory = false;       // gpu_memcpy, gpu_memset
  bool tandem_kind = false;  // names a SpanKind (tandem's own traces)
  SpanKind kind = SpanKind::kOther;
};

// What PyTorch records about a collective (torch.profiler, record_param_comms): element
// counts of the input and output, the group size and the element type.
struct CollectiveArgs {
  NameId collective = kNoName;  // "Collective name": "allreduce", "_allgather_base", ...
  NameId dtype = kNoName;       // "dtype": "Float", "BFloat16", ...
  // "Process Group Name": "0", "3", ... (PyTorch numbers its groups in creation order,
  // the same on every rank): which communicator ran it (Span::group).
  NameId process_group = kNoName;
  std::int64_t in_elements = -1;
  std::int64_t out_elements = -1;
  std::int32_t group_size = -1;
};

struct RawEvent {
  std::int64_t start_ns = 0;  // ts as written, in ns (no base time added)
  std::int64_t end_ns = 0;
  std::int64_t correlation = -1;
  std::int64_t bytes = 0;
  std::int64_t queued_ns = -1;  // args.queued_ns (tandem comm spans), -1: absent
  double flops = 0;
  std::int32_t pid = -1;  // -1: absent or not an integer in int32's range
  std::int32_t tid = -1;
  NameId name = kNoName;
  std::int32_t step = -1;  // args.step (tandem traces)
  std::int32_t tag = -1;   // args.layer / args.bucket / args.tag (tandem traces)
  std::int32_t stream = -1;  // args.stream (GPU events); -1: absent or not an integer
  std::int32_t args = -1;    // index into RawTrace::collective_args, -1: none
  std::int16_t device = -1;  // args.device (GPU events), 0..32767; -1: absent or beyond
  std::uint8_t category = 0;
};
// 80 bytes: a GPU event of a large trace costs this until it is a span.
static_assert(sizeof(RawEvent) <= 80);

// A CPU-side interval: a CPU operator (merged per thread) or a collective's CPU op.
struct CpuInterval {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t tid = -1;
  NameId name = kNoName;
  std::int32_t args = -1;  // index into RawTrace::collective_args
};

struct Launch {
  std::int64_t correlation = 0;
  std::int64_t start_ns = 0;
};

// A GPU stream's wait for an event another stream recorded ("cuda_sync" events with
// wait_on_stream and wait_on_cuda_event_record_corr_id, which PyTorch's profiler writes
// with enable_cuda_sync_events): the consumer runs its next work after the producer's
// work launched before the record.
struct StreamWait {
  std::int32_t stream = -1;              // the waiting stream
  std::int32_t wait_on_stream = -1;      // the stream that recorded the event
  std::int64_t record_correlation = -1;  // the cudaEventRecord call's correlation
  std::int64_t correlation = -1;         // the cudaStreamWaitEvent call's
  std::int32_t pid = -1;
  std::int16_t device = -1;
};

struct StepWindow {
  std::int32_t step = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

struct RawTrace {
  std::vector<TraceCategory> categories;
  std::vector<RawEvent> events;
  std::vector<Launch> launches;
  std::vector<StreamWait> stream_waits;
  std::vector<StepWindow> steps;
  // Complete events whose name contains "ProfilerStep", GPU annotations included (HTA
  // finds the last step among them); a few per iteration.
  std::vector<StepWindow> step_marks;
  std::vector<NameId> step_mark_names;  // their distinct names, the first two (HTA asks for two)
  std::size_t cpu_events = 0;           // complete events with a duration, not GPU ones
  std::vector<CollectiveArgs> collective_args;
  std::vector<CpuInterval> collective_ops;  // CPU ops carrying CollectiveArgs
  std::vector<CpuInterval> cpu_ops;         // outermost cpu_op intervals, per thread
  // Some traceEvents entry has a "ts" that is not an integer literal (or none): HTA then
  // rounds every event inwards to whole microseconds (hta_overlap.h).
  bool fractional_ts = false;
  std::optional<std::int64_t> distributed_rank;
  std::optional<std::int64_t> base_time_ns;
  bool tandem = false;  // otherData.tandem_trace present
  std::int64_t tandem_t0_ns = 0;
  std::int64_t tandem_ranks = 0;
  std::size_t trace_events = 0;  // entries of traceEvents, kept or not
  std::size_t names_cut = 0;     // kept events whose name was cut to kMaxJsonStringBytes
  // args.device outside 0..32767 (kept on the file's device), and record_param_comms
  // nelems that are no count (negative, beyond int64, fractional: the size is unknown).
  std::size_t odd_devices = 0;
  std::size_t odd_nelems = 0;
  std::uint64_t bytes_read = 0;
};

// Reads one trace; names of kept events are interned into `names`.
RawTrace read_raw_trace(TraceBytes& bytes, std::string_view source, NameTable& names);
// Moves every NameId in `raw` (events, CPU intervals, collective args, step marks) from
// `from` to `to`, for traces read with a table of their own (TraceImporter::add_files).
// A new NameId field in RawTrace is mapped here too.
void remap_names(RawTrace& raw, const NameTable& from, NameTable& to);
// The same with the reference reader only (tests compare the two).
RawTrace read_raw_trace_reference(TraceBytes& bytes, std::string_view source, NameTable& names);

// "12.3456" (microseconds, as JSON writes it) -> 12346 ns, exactly, rounding half away
// from zero; nullopt for text that is not a plain decimal (exponents) or is out of range.
std::optional<std::int64_t> decimal_us_to_ns(std::string_view text);

}  // namespace tandem
