// The communication/computation overlap of one rank exactly as Holistic Trace Analysis
// (HTA) computes it, so that `tandem analyze` prints the number a user checks against
// `TraceAnalysis.get_comm_comp_overlap()` (docs/ANALYZE.md, "Per rank, as HTA").
//
// HTA works on a rank's whole trace at once, not per iteration. tandem follows HTA's
// main branch as of 2025 (TraceCollection._filter_irrelevant_gpu_kernels with
// filter_gpu_kernels_with_cpu_correlation; older releases differ in step 2):
//   1. Times. If any traceEvents entry has a "ts" that is not an integer literal (or has
//      none), HTA rounds every event inwards to whole microseconds: ts' = ceil(ts),
//      end' = floor(ts + dur), in float64 arithmetic on the values as written (so a
//      sub-microsecond kernel can end before it starts). Otherwise ts and ts + dur as is.
//   2. Which kernels. GPU events are those with a stream >= 0 and a correlation >= 0; every
//      other event with a duration is a CPU event. A GPU event is kept when a kept CPU
//      event carries its correlation. The CPU events kept: by default those starting
//      before the last ProfilerStep mark starts; with include_last_profiler_step=True (or
//      when the traces hold fewer than two distinct ProfilerStep names, over all ranks)
//      those starting at or before the latest end of a mark (of any CPU event when there
//      is no mark). The marks are the CPU events whose name holds "ProfilerStep", which
//      includes the GPU copies of the annotation (gpu_user_annotation has no stream), so
//      the last mark usually starts after the CPU one. A trace without CPU events keeps
//      every GPU event.
//   3. Kernel types by name: communication ^nccl.*Kernel, memory ^(Memcpy|Memset|dma),
//      other: a name containing Memcpy or Sync, or starting with Memset; compute the rest.
//      Only events with a stream take part.
//   4. Communication and compute intervals are each merged; the overlap is the measure
//      of their intersection; the share is overlap / merged communication, in percent,
//      rounded to two decimals.
// HTA sorts with an unstable sort; with rounding (1.) a tie between an inverted interval
// and another can merge either way in HTA. Here ties keep the trace's order.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "trace_import/trace_reader.h"

namespace tandem {

enum class HtaKernelType : std::uint8_t { kCommunication, kMemory, kComputation, kOther };

HtaKernelType hta_kernel_type(std::string_view name);

// Correlation id -> the earliest CPU event carrying it (a launch), shared by step
// assignment (trace_import) and HTA's kernel selection.
class LaunchIndex {
 public:
  explicit LaunchIndex(std::vector<Launch> launches);
  const Launch* find(std::int64_t correlation) const;  // the earliest; null if none

 private:
  std::vector<Launch> launches_;  // by (correlation, start)
};

// The CPU side of one trace file as HTA sees it, prepared once for all its devices.
class HtaCpuSide {
 public:
  HtaCpuSide(const LaunchIndex& launches, const std::vector<StepWindow>& step_marks,
             bool fractional_ts, bool has_cpu_events);
  bool fractional_ts() const { return fractional_ts_; }
  bool filters() const { return filters_; }  // false: no CPU events, every GPU event kept
  const LaunchIndex& launches() const { return launches_; }
  double last_start() const { return last_start_; }  // -inf without marks
  double last_end() const { return last_end_; }      // +inf without marks

 private:
  const LaunchIndex& launches_;
  double last_start_, last_end_;
  bool fractional_ts_ = false;
  bool filters_ = true;
};

// One rank's GPU events as HTA reads them: the file's raw events, those of this rank
// (`types[i]` its kernel type, or kNotHere), and the file's CPU side. Nothing is copied.
inline constexpr std::uint8_t kNotHere = 0xff;
struct HtaInput {
  const std::vector<RawEvent>* events = nullptr;
  const std::vector<std::uint8_t>* types = nullptr;  // per event: HtaKernelType or kNotHere
  const HtaCpuSide* cpu = nullptr;
  const std::vector<std::uint32_t>* subset = nullptr;  // indices of this rank's; null: all
};

// HTA's per-rank numbers in one selection mode. Times in microseconds (HTA's unit).
struct HtaOverlap {
  double hidden_pct = 0;   // comp_comm_overlap_pctg: 100 overlap / comm, rounded to 0.01
  double compute_us = 0;   // merged compute kernels
  double comm_us = 0;      // merged communication kernels
  double overlap_us = 0;   // their intersection
  double idle_us = 0;      // get_temporal_breakdown's idle: span of all kernels - busy
  std::size_t kernels = 0; // GPU events taking part
  bool defined = false;    // false: no communication time (HTA divides by zero)
};

// The rank under HTA's two selections: the last step left out (HTA's default when the
// traces hold two or more ProfilerStep names), and include_last_profiler_step=True (also
// what HTA does with fewer names).
struct HtaRankModes {
  HtaOverlap last_step_out, last_step_in;
};

HtaRankModes hta_overlap(const HtaInput& input);

// The float64 HTA reads for a time of `ns` nanoseconds written with three decimals of
// microseconds: the double nearest to ns / 1000.
double hta_us(std::int64_t ns);

}  // namespace tandem
