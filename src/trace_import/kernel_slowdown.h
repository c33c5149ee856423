// Which compute kernels contention slows, and under which collectives: `tandem analyze
// --baseline` at kernel level (docs/ANALYZE.md, "Kernels slowed by overlap").
//
// The run's and the baseline's measured iterations are paired in order, per rank (the
// run's first measured iteration of rank r with the baseline's first of rank r, ...).
// Within a pair, compute kernels are matched by name and occurrence: the k-th launch of
// "sm90_xmma_gemm..." in the run's iteration with the k-th in the baseline's. A kernel
// that occurs more often in one of them leaves its extra occurrences unmatched (counted,
// not compared). Per kernel name: the time alone (baseline), the time under overlap (run)
// and slowdown = under / alone - 1; for each, the collectives whose spans on the same rank
// overlapped its matched occurrences, by collective and size, with the time they did.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace_import/collectives.h"

namespace tandem {

struct ContendingCollective {
  CollectiveType type = CollectiveType::kUnknown;
  std::int64_t bytes = -1;
  std::int64_t overlap_ns = 0;  // Σ time it ran over the kernel's matched occurrences
};

struct KernelSlowdown {
  std::string name;
  std::size_t count = 0;           // matched occurrences
  std::int64_t alone_ns = 0;       // Σ baseline durations
  std::int64_t overlapped_ns = 0;  // Σ run durations
  std::int64_t under_comm_ns = 0;  // Σ time any collective ran over them
  std::vector<ContendingCollective> collectives;  // longest overlap first
  double slowdown() const;         // overlapped / alone - 1
  std::int64_t added_ns() const { return overlapped_ns - alone_ns; }
};

struct KernelSlowdownReport {
  std::vector<KernelSlowdown> kernels;  // most time added first
  std::size_t iterations_paired = 0;    // (rank, iteration) pairs compared
  std::size_t unmatched_run = 0;        // occurrences only the run has
  std::size_t unmatched_baseline = 0;   // occurrences only the baseline has
  std::size_t names_only_run = 0;       // kernel names never in the baseline
  std::size_t names_only_baseline = 0;
};

// `run_steps` / `baseline_steps`: the measured steps of each (sorted); `run_comm` types
// the run's comm spans.
KernelSlowdownReport kernel_slowdown(const Timeline& run, const std::vector<CommInfo>& run_comm,
                                     const std::vector<std::int32_t>& run_steps,
                                     const Timeline& baseline,
                                     const std::vector<std::int32_t>& baseline_steps);

}  // namespace tandem
