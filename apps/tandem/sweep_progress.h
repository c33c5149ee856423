// The terminal side of `tandem characterize`'s sweep: a progress bar on a terminal and a
// line per finished point (experiment/sweep_runner.h's SweepObserver).
#pragma once

#include <cstddef>
#include <string>

#include "experiment/sweep_runner.h"

namespace tandem::cli {

class TerminalProgress : public SweepObserver {
 public:
  // `out`: the results directory, named when resuming; `enabled`: draw the bar (only on
  // a terminal).
  TerminalProgress(std::string out, bool enabled);

  void sweep_started(std::size_t total, std::size_t finished) override;
  void scenario_started(std::size_t index, const SweepPoint& point, Scenario scenario) override;
  void point_finished(std::size_t index, const SweepPoint& point,
                      const Characterization& c) override;

 private:
  std::string out_;
  bool tty_;
  std::size_t total_ = 0;
};

}  // namespace tandem::cli
