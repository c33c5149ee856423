// Linear scales, "nice" tick values and labelled axes shared by every chart.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "report/html/svg.h"

namespace tandem::html {

// Maps the data interval [d0, d1] onto the pixel interval [r0, r1].
struct LinearScale {
  double d0 = 0, d1 = 1, r0 = 0, r1 = 1;
  double operator()(double v) const {
    return d1 == d0 ? (r0 + r1) / 2 : r0 + (v - d0) / (d1 - d0) * (r1 - r0);
  }
};

// About `target` round tick values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// The upper end of the tick range: the smallest nice tick >= hi (hi itself if none).
double nice_max(double hi, int target = 5);

// A tick label with as many decimals as the step needs ("0.5", "12", "2.25").
std::string tick_label(double value, double step);

// Horizontal axis along y = `y` from scale.r0 to scale.r1 with ticks, grid lines up to
// `grid_top`, and a centred title under it.
void x_axis(Svg& svg, const LinearScale& scale, const std::vector<double>& ticks, double y,
            double grid_top, std::string_view title);
// Vertical axis at x = `x` with ticks, grid lines to `grid_right`, and a rotated title.
void y_axis(Svg& svg, const LinearScale& scale, const std::vector<double>& ticks, double x,
            double grid_right, std::string_view title);

// One legend entry per (class, label), laid out left to right from (x, y).
struct LegendEntry {
  std::string cls;  // swatch class: a fill class, or "line ..." for a line series
  std::string label;
};
void legend(Svg& svg, double x, double y, const std::vector<LegendEntry>& entries);

}  // namespace tandem::html
