// Scales, ticks, axes and legends (axes.h).
#include "report/html/axes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tandem::html {

namespace {

double nice_step(double span, int target) {
  if (!(span > 0) || !std::isfinite(span)) return 1;
  const double raw = span / std::max(1, target);
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10 * magnitude;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) hi = lo + 1;
  const double step = nice_step(hi - lo, target);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
    if (ticks.size() > 50) break;  // guards against a degenerate step
  }
  return ticks;
}

double nice_max(double hi, int target) {
  if (!(hi > 0) || !std::isfinite(hi)) return 1;
  const double step = nice_step(hi, target);
  return std::ceil(hi / step - 1e-9) * step;
}

std::string tick_label(double value, double step) {
  int decimals = 0;
  while (decimals < 6 && std::abs(step * std::pow(10, decimals) -
                                  std::round(step * std::pow(10, decimals))) > 1e-6) {
    ++decimals;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

void x_axis(Svg& svg, const LinearScale& scale, const std::vector<double>& ticks, double y,
            double grid_top, std::string_view title) {
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (const double t : ticks) {
    const double x = scale(t);
    svg.line(x, grid_top, x, y, "grid");
    svg.text(x, y + 14, tick_label(t, step), "tick", "middle");
  }
  svg.line(scale.r0, y, scale.r1, y, "axis");
  svg.text((scale.r0 + scale.r1) / 2, y + 32, title, "axis-title", "middle");
}

void y_axis(Svg& svg, const LinearScale& scale, const std::vector<double>& ticks, double x,
            double grid_right, std::string_view title) {
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (const double t : ticks) {
    const double y = scale(t);
    svg.line(x, y, grid_right, y, "grid");
    svg.text(x - 5, y + 4, tick_label(t, step), "tick", "end");
  }
  svg.line(x, scale.r0, x, scale.r1, "axis");
  // Rotated title: a group transform would need an attribute the builder does not have,
  // so the title sits above the axis instead, which also reads better in print.
  svg.text(std::max(2.0, x - 40), std::min(scale.r0, scale.r1) - 12, title, "axis-title");
}

void legend(Svg& svg, double x, double y, const std::vector<LegendEntry>& entries) {
  for (const LegendEntry& e : entries) {
    if (e.cls.starts_with("line")) {
      svg.line(x, y - 4, x + 22, y - 4, e.cls);
      x += 28;
    } else {
      svg.rect(x, y - 10, 14, 12, e.cls);
      x += 19;
    }
    svg.text(x, y, e.label, "legend");
    x += 7.0 * static_cast<double>(e.label.size()) + 18;
  }
}

}  // namespace tandem::html
