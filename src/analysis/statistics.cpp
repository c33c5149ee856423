// Percentiles and summaries; see statistics.h.
#include "analysis/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace tandem {
double percentile_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) return kUndefined;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary summarize(std::span<const double> values) {
  std::vector<double> sorted;
  sorted.reserve(values.size());
  for (double v : values) {
    if (!std::isnan(v)) sorted.push_back(v);
  }
  Summary s;
  if (sorted.empty()) return s;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double v : sorted) sum += v;
  s.count = sorted.size();
  s.median = percentile_sorted(sorted, 50);
  s.p10 = percentile_sorted(sorted, 10);
  s.p90 = percentile_sorted(sorted, 90);
  s.mean = sum / static_cast<double>(sorted.size());
  s.min = sorted.front();
  s.max = sorted.back();
  return s;
}

std::vector<double> drop_warmup(std::span<const double> values, std::size_t warmup) {
  if (warmup >= values.size()) return {};
  return std::vector<double>(values.begin() + static_cast<std::ptrdiff_t>(warmup), values.end());
}

nlohmann::json number_or_null(double value) {
  // nlohmann would dump a NaN as null anyway, but an explicit null also reads as null
  // to code that inspects the json object before it is written.
  if (!std::isfinite(value)) return nullptr;
  return value;
}

void to_json(nlohmann::json& j, const Summary& summary) {
  j = nlohmann::json{{"median", number_or_null(summary.median)},
                     {"p10", number_or_null(summary.p10)},
                     {"p90", number_or_null(summary.p90)},
                     {"mean", number_or_null(summary.mean)},
                     {"min", number_or_null(summary.min)},
                     {"max", number_or_null(summary.max)},
                     {"count", summary.count}};
}

}  // namespace tandem
