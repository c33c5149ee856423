// Kernel spans of one GPU on the spans' steady clock, from CUPTI activity records when
// CUPTI can be initialized and from CUDA events bracketing the caller's regions when it
// cannot. Every output that shows these spans says which source made them (source_name).
//
// CUPTI (preferred): CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL records every kernel's start
// and end on the GPU, whoever launched it (cuBLAS, NCCL, tandem's own). Timestamps are
// moved onto the steady clock by an offset measured at start() and at stop()
// (cuptiGetTimestamp read between two host clock reads, the tightest of a few tries),
// interpolated between the two so a drift cancels. Kernels are classified by name: NCCL's
// (ncclKernel_*, ncclDevKernel_*), the emulated ring's (tandem_emulated_ring*) and the
// shared-GPU backend's (tandem_shared_*) are
// communication (lane comm, kind allreduce), the rest compute (lane compute, kind kernel).
// The name is kept as the span's name when the caller passes a name table.
//
// Events (fallback): begin()/end() record a pair of CUDA events on the caller's stream;
// each pair becomes one span with the lane, kind, tag and flops given to begin().
// In CUPTI mode begin()/end() cost nothing and make no span (CUPTI sees the kernels);
// marker() makes one in both modes.
//
// Steps: mark_step() records an event on a stream at the start of a step; at stop() every
// span gets the step of the last mark at or before its midpoint (CUPTI's clock and the
// events' agree within the anchors' few microseconds, not exactly).
//
// CUPTI's activity API is global to the process; timers of different devices share it
// (rank threads of one process, one GPU each); a second timer on the same device falls
// back to events and says so.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "timeline/span.h"

namespace tandem {

class NameTable;

enum class KernelTimingSource : std::uint8_t { kCupti, kEvents };

struct KernelTimerOptions {
  int device = 0;
  bool prefer_cupti = true;  // false: CUDA events even where CUPTI works
};

class KernelTimer {
 public:
  explicit KernelTimer(KernelTimerOptions options);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

  KernelTimingSource source() const { return source_; }
  // "cupti (activity records)" or "cuda events (CUPTI unavailable: <why>)".
  std::string source_name() const;

  // Starts collecting; clears what an earlier start() collected. Throws RuntimeError.
  void start();
  // Records the start of `step` on `stream`.
  void mark_step(cudaStream_t stream, std::int32_t step);
  // Events mode: brackets the work enqueued on `stream` between begin and end.
  struct Region {
    std::size_t index = static_cast<std::size_t>(-1);
  };
  Region begin(cudaStream_t stream, Lane lane, SpanKind kind, std::int32_t tag = -1,
               double flops = 0);
  void end(cudaStream_t stream, Region region);
  // A zero-length span where `stream` is now, in both modes (for instance the end of an
  // iteration, after the compute stream waited for communication).
  void marker(cudaStream_t stream, Lane lane, SpanKind kind);
  // Waits for the device, stops collecting, and returns the spans sorted by start (rank
  // 0: the caller sets the rank). Kernel names go into `names` when given.
  std::vector<Span> stop(NameTable* names = nullptr);

  // The classification used for CUPTI records (exposed for tests).
  static bool is_comm_kernel(const std::string& name);

 private:
  Region add_region(cudaStream_t stream, Lane lane, SpanKind kind, std::int32_t tag, double flops,
                    bool marker);
  void stop_collecting();

  struct State;
  std::unique_ptr<State> state_;
  KernelTimingSource source_ = KernelTimingSource::kEvents;
  std::string fallback_reason_;
};

}  // namespace tandem
