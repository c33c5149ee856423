// The sweep of `tandem characterize`: each grid point's four scenarios in grid order,
// each finished point committed to the results directory (its traces, then result.json,
// docs/CHARACTERIZE.md) and summary.json, iterations.csv and trace.json rebuilt after it,
// so a sweep killed at any moment resumes with exactly the points not done.
//
// The runner never prints and never decides who writes: progress goes to a SweepObserver
// and results to a ResultsWriter, and either may be absent. A multi-process job runs the
// same sweep on every rank (every rank takes part in every scenario) and hands the writer
// and the observer to rank 0 only, with rank 0's finished points broadcast into
// SweepOptions::finished so that every rank skips the same ones (`tandem characterize`
// under mpirun, docs/MPI.md).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "experiment/characterize.h"
#include "experiment/sweep.h"
#include "report/results_dir.h"

namespace tandem {

struct SweepItem {
  SweepPoint point;                    // its values; point_id(point) names its directory
  std::unique_ptr<Workload> workload;  // built, and so validated, before the sweep starts
};

struct SweepOptions {
  std::vector<SweepAxis> axes;     // the grid's axes, for summary.json's "sweep"
  std::set<std::string> finished;  // ids of points to skip (--resume): finished_points()
  int warmup = 2;                  // per scenario (CharacterizeOptions)
  int iterations = 25;
  PowerSampler* power = nullptr;
  Job* job = nullptr;  // where the ranks run; null: threads of this process
  // Called before a point's scenarios run, with what the workload does not apply itself
  // (a power-cap sweep sets the GPUs' limit); none: nothing to do.
  std::function<void(const SweepPoint&)> before_point;
};

// What a sweep tells whoever watches it (the CLI's progress bar and lines).
class SweepObserver {
 public:
  virtual ~SweepObserver() = default;
  // Before the first point: `finished` of the `total` points are skipped.
  virtual void sweep_started(std::size_t total, std::size_t finished) = 0;
  // Point `index` (0-based, grid order) starts one of its scenarios.
  virtual void scenario_started(std::size_t index, const SweepPoint& point, Scenario scenario) = 0;
  // Point `index` is measured (and, with a writer, committed).
  virtual void point_finished(std::size_t index, const SweepPoint& point,
                              const Characterization& result) = 0;
};

struct SweepOutcome {
  std::size_t ran = 0;                   // points measured by this call
  std::size_t skipped = 0;               // points in SweepOptions::finished
  std::optional<Characterization> last;  // the last point measured, if any
};

// Runs every job whose id is not in options.finished, in grid order. With `results`,
// commits each point and rebuilds the directory's summary files after it and at the end
// (also when nothing ran, so --resume of a finished sweep rewrites its summary).
SweepOutcome run_sweep(std::span<SweepItem> jobs, const SweepOptions& options,
                       ResultsWriter* results, SweepObserver* observer);

}  // namespace tandem
