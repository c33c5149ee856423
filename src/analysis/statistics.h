// Summary statistics over repeated measurements: tandem reports the median with p10/p90
// and the mean, never a single sample (docs/METRICS.md, "Statistics").
#pragma once

#include <cstddef>
#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <vector>

namespace tandem {

// "Undefined" in every metric: a zero denominator or a missing scenario.
inline constexpr double kUndefined = std::numeric_limits<double>::quiet_NaN();

struct Summary {
  // All NaN when count == 0.
  double median = kUndefined;
  double p10 = kUndefined;
  double p90 = kUndefined;
  double mean = kUndefined;
  double min = kUndefined;
  double max = kUndefined;
  std::size_t count = 0;  // samples that entered the summary (NaN samples do not)
};

// Percentile p in [0, 100] of ascending-sorted values, linearly interpolated between the
// closest ranks (rank = p/100 * (n-1); numpy's default). NaN for an empty input.
double percentile_sorted(std::span<const double> sorted, double p);

// Summarizes the finite-or-infinite samples; NaN samples are skipped, because NaN here
// means "undefined for this iteration" (a zero denominator), not a measurement.
Summary summarize(std::span<const double> values);

// The measured iterations: values without the first `warmup` ones (empty if fewer).
std::vector<double> drop_warmup(std::span<const double> values, std::size_t warmup);

// {"median","p10","p90","mean","min","max","count"}; NaN becomes null.
void to_json(nlohmann::json& j, const Summary& summary);
// A number, or null for NaN and infinities (JSON has neither).
nlohmann::json number_or_null(double value);

}  // namespace tandem
