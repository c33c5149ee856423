// The communication/computation overlap of one rank exactly as Holistic Trace Analysis
// (HTA) computes it, so that `tandem analyze` prints the number a user checks against
// `TraceAnalysis.get_comm_comp_overlap()` (docs/ANALYZE.md, "Per rank, as HTA").
//
// HTA works on a rank's whole trace at once, not per iteration:
//   1. Times. If any traceEvents entry has a "ts" that is not an integer literal (or has
//      none), HTA rounds every event inwards to whole microseconds: ts' = ceil(ts),
//      end' = floor(ts + dur), in float64 arithmetic on the values as written (so a
//      sub-microsecond kernel can end before it starts). Otherwise ts and ts + dur as is.
//   2. Which kernels. When the traces hold at least two distinct names containing
//      "ProfilerStep" (over all ranks), HTA keeps the CPU events that start before the
//      last ProfilerStep mark starts (include_last_profiler_step=True: that start at or
//      before the last mark ends) and the GPU events (a stream >= 0 and a correlation >= 0)
//      whose correlation is one of those CPU events'. The marks include the GPU copies of
//      the ProfilerStep annotations (gpu_user_annotation). Fewer names: everything is kept.
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

// One GPU event as HTA sees it.
struct HtaEvent {
  std::int64_t start_ns = 0;  // as written
  std::int64_t end_ns = 0;
  std::int64_t correlation = -1;
  std::int32_t stream = -1;
  HtaKernelType type = HtaKernelType::kOther;
};

// What HTA reads of one rank's trace.
struct HtaInput {
  std::vector<HtaEvent> events;
  const std::vector<Launch>* launches = nullptr;       // CPU events with a correlation
  const std::vector<StepWindow>* step_marks = nullptr;  // events named *ProfilerStep*
  bool fractional_ts = false;
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

// The rank under HTA's three selections: nothing left out (fewer than two ProfilerStep
// names), the last step left out (HTA's default), and include_last_profiler_step=True.
struct HtaRankModes {
  HtaOverlap unfiltered, last_step_out, last_step_in;
};

HtaRankModes hta_overlap(const HtaInput& input);

// The float64 HTA reads for a time of `ns` nanoseconds written with three decimals of
// microseconds: the double nearest to ns / 1000.
double hta_us(std::int64_t ns);

}  // namespace tandem
