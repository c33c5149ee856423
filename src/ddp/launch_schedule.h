// When the units of a bucket plan may launch: a pending count per unit and a locator
// from each parameter to the units it touches (c10d's vocabulary), with units handed out
// strictly in plan order, so every rank issues the same collectives in the same order.
// It moves no data and knows no backend.
#pragma once

#include <cstddef>
#include <vector>

namespace tandem {

struct GradParam;  // ddp/reducer.h
struct Bucket;

class LaunchSchedule {
 public:
  LaunchSchedule(const std::vector<GradParam>& params, const std::vector<Bucket>& buckets);

  // A new synchronizing backward: every unit waits for all of its parameters again.
  void reset();
  // The unit's parameter gradients are final.
  void mark_unit_ready(int unit);
  // The next unit in plan order if all its parameters are ready, else -1. Each unit is
  // handed out once per reset().
  int take_ready();
  // The next unit in plan order whether ready or not (what is left after backward), or
  // -1 once every unit was handed out.
  int take_next();
  // Units handed out since reset().
  std::size_t taken() const { return next_; }

 private:
  std::vector<std::vector<int>> unit_params_of_;  // unit -> parameter indices
  std::vector<std::vector<int>> param_units_;     // locator: parameter -> units
  std::vector<int> unit_params_;                  // per unit: its parameter count
  std::vector<int> pending_;                      // per unit: parameters not yet ready
  std::size_t next_ = 0;
};

}  // namespace tandem
