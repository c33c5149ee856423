// Sweeps: a grid of configurations from repeatable --sweep KEY=V1,V2,... flags, each
// point with a stable, file-name-safe id (report/sweep_point.h; the results directory is
// ResultsWriter's, report/results_dir.h).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "report/sweep_point.h"  // SweepPoint, point_id, describe

namespace tandem {

inline constexpr std::string_view kSweepKeys =
    "strategy bucket-mb chunks batch model prefetch pipeline schedule micro-batches ranks link "
    "threads precision gemm power-cap overlap-optimizer double-buffer recompute compress tensor "
    "sequence-parallel tp-overlap";

struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};

// "KEY=V1,V2,..."; values are separated by ';' instead when any ';' is present (for
// values that contain commas: link=10GB/s,5us;25GB/s,5us). Throws UsageError naming
// --sweep for an unknown key, an empty list or an empty value.
SweepAxis parse_sweep(std::string_view text);

// The cartesian product, first axis slowest; a single empty point when there are no axes.
// Throws UsageError if a key is swept twice.
std::vector<SweepPoint> expand_grid(const std::vector<SweepAxis>& axes);

}  // namespace tandem
