#include "ddp/launch_schedule.h"

#include <algorithm>

#include "core/error.h"
#include "ddp/reducer.h"

namespace tandem {

LaunchSchedule::LaunchSchedule(const std::vector<GradParam>& params,
                               const std::vector<Bucket>& buckets) {
  int units = 0;
  for (const auto& p : params) units = std::max(units, p.unit + 1);
  unit_params_of_.resize(static_cast<std::size_t>(units));
  for (std::size_t i = 0; i < params.size(); ++i) {
    unit_params_of_[static_cast<std::size_t>(params[i].unit)].push_back(static_cast<int>(i));
  }
  param_units_.resize(params.size());
  unit_params_.resize(buckets.size());
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    TANDEM_CHECK_EQ(buckets[b].index, static_cast<int>(b));
    for (int p : buckets[b].params) param_units_[p].push_back(static_cast<int>(b));
    unit_params_[b] = static_cast<int>(buckets[b].params.size());
  }
  pending_ = unit_params_;
}

void LaunchSchedule::reset() {
  pending_ = unit_params_;
  next_ = 0;
}

void LaunchSchedule::mark_unit_ready(int unit) {
  TANDEM_CHECK(unit >= 0 && unit < static_cast<int>(unit_params_of_.size()));
  for (int p : unit_params_of_[static_cast<std::size_t>(unit)]) {
    for (int b : param_units_[p]) --pending_[b];
  }
}

int LaunchSchedule::take_ready() {
  if (next_ < pending_.size() && pending_[next_] == 0) return static_cast<int>(next_++);
  return -1;
}

int LaunchSchedule::take_next() {
  if (next_ < pending_.size()) return static_cast<int>(next_++);
  return -1;
}

}  // namespace tandem
