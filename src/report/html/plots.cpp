// Bars, stacked bars, scatter, lines and power over time (charts.h). Bar charts are
// horizontal so that long configuration labels stay readable and the chart grows
// downwards with the number of configurations instead of squeezing the bars.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "report/html/axes.h"
#include "report/html/charts.h"

namespace tandem::html {

namespace {

constexpr double kWidth = 1100;
constexpr double kLabelW = 240;  // configuration labels of bar charts
constexpr double kRight = 24;
constexpr std::size_t kLabelChars = 36;

// Long labels are cut for the axis; the full text is in the row's tooltip.
std::string short_label(const std::string& label) {
  if (label.size() <= kLabelChars) return label;
  std::size_t cut = kLabelChars - 1;
  while (cut > 0 && (static_cast<unsigned char>(label[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
  return label.substr(0, cut) + "…";
}

std::string fmt(double value, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

double finite_or(double v, double fallback) { return std::isfinite(v) ? v : fallback; }

}  // namespace

std::string format_ms(double ns) { return std::isfinite(ns) ? fmt(ns / 1e6, "%.3f ms") : "n/a"; }

std::string format_us(double ns) { return std::isfinite(ns) ? fmt(ns / 1e3, "%.1f µs") : "n/a"; }

std::string format_percent(double frac) {
  return std::isfinite(frac) ? fmt(100 * frac, "%.1f%%") : "n/a";
}

std::string format_bytes_exact(std::int64_t bytes) {
  std::string digits = std::to_string(bytes);
  for (int i = static_cast<int>(digits.size()) - 3; i > (bytes < 0 ? 1 : 0); i -= 3) {
    digits.insert(static_cast<std::size_t>(i), ",");
  }
  const double b = static_cast<double>(bytes);
  std::string human;
  if (b >= 1 << 30) {
    human = fmt(b / (1 << 30), "%.1f GiB");
  } else if (b >= 1 << 20) {
    human = fmt(b / (1 << 20), "%.1f MiB");
  } else if (b >= 1 << 10) {
    human = fmt(b / (1 << 10), "%.1f KiB");
  }
  return digits + " B" + (human.empty() ? "" : " (" + human + ")");
}

namespace {

// One legend entry per series, above the bars.
void series_legend(Svg& svg, const std::vector<Series>& series) {
  std::vector<LegendEntry> entries;
  for (const Series& s : series) entries.push_back({s.cls, s.name});
  legend(svg, kLabelW, 16, entries);
}

}  // namespace

std::string grouped_bar_chart(const std::vector<Series>& series,
                              const std::vector<BarGroup>& groups, std::string_view x_title,
                              double unit_scale, std::string_view label) {
  constexpr double kTop = 34, kBarH = 10, kBarGap = 2, kGroupGap = 12, kBottom = 46;
  const double group_h = static_cast<double>(series.size()) * (kBarH + kBarGap) - kBarGap;
  const double height = kTop + static_cast<double>(groups.size()) * (group_h + kGroupGap) + kBottom;
  Svg svg(kWidth, height, "chart bars", label);
  series_legend(svg, series);

  double max_v = 0;
  for (const BarGroup& g : groups) {
    for (const BarValue& v : g.values) {
      max_v = std::max({max_v, finite_or(v.median, 0), finite_or(v.p90, 0)});
    }
  }
  const double top = nice_max(max_v / unit_scale);
  const LinearScale x{.d0 = 0, .d1 = top, .r0 = kLabelW, .r1 = kWidth - kRight};
  const double axis_y = height - kBottom + 6;
  x_axis(svg, x, nice_ticks(0, top, 8), axis_y, kTop - 4, x_title);

  double y = kTop;
  for (const BarGroup& g : groups) {
    svg.open_group("row", g.label);
    svg.text(kLabelW - 8, y + group_h / 2 + 4, short_label(g.label), "row-label", "end");
    for (std::size_t i = 0; i < series.size() && i < g.values.size(); ++i) {
      const BarValue& v = g.values[i];
      const double by = y + static_cast<double>(i) * (kBarH + kBarGap);
      if (!std::isfinite(v.median)) {
        svg.text(x(0) + 4, by + kBarH - 1, series[i].name + ": n/a", "na");
        continue;
      }
      const double m = v.median / unit_scale;
      svg.rect(x(0), by, std::max(0.6, x(m) - x(0)), kBarH, series[i].cls,
               series[i].name + ": " + fmt(m, "%.3f") + " (p10 " + fmt(v.p10 / unit_scale, "%.3f") +
                   ", p90 " + fmt(v.p90 / unit_scale, "%.3f") + ")");
      if (std::isfinite(v.p10) && std::isfinite(v.p90)) {
        const double wy = by + kBarH / 2;
        svg.line(x(v.p10 / unit_scale), wy, x(v.p90 / unit_scale), wy, "whisker");
        svg.line(x(v.p10 / unit_scale), wy - 3, x(v.p10 / unit_scale), wy + 3, "whisker");
        svg.line(x(v.p90 / unit_scale), wy - 3, x(v.p90 / unit_scale), wy + 3, "whisker");
      }
    }
    svg.close_group();
    y += group_h + kGroupGap;
  }
  return svg.str();
}

std::string stacked_bar_chart(const std::vector<Series>& series, const std::vector<StackRow>& rows,
                              std::string_view x_title, double unit_scale, std::string_view label) {
  constexpr double kTop = 34, kBarH = 16, kGap = 8, kBottom = 46;
  const double height = kTop + static_cast<double>(rows.size()) * (kBarH + kGap) + kBottom;
  Svg svg(kWidth, height, "chart stacked", label);
  series_legend(svg, series);

  double max_v = 0;
  for (const StackRow& r : rows) {
    double total = 0;
    for (const double p : r.parts) total += std::max(0.0, finite_or(p, 0));
    max_v = std::max(max_v, total);
  }
  const double top = nice_max(max_v / unit_scale);
  const LinearScale x{.d0 = 0, .d1 = top, .r0 = kLabelW, .r1 = kWidth - kRight};
  x_axis(svg, x, nice_ticks(0, top, 8), height - kBottom + 6, kTop - 4, x_title);

  double y = kTop;
  for (const StackRow& r : rows) {
    svg.text(kLabelW - 8, y + kBarH / 2 + 4, short_label(r.label), "row-label", "end");
    double at = 0;
    for (std::size_t i = 0; i < series.size() && i < r.parts.size(); ++i) {
      const double v = std::max(0.0, finite_or(r.parts[i], 0)) / unit_scale;
      if (v <= 0) continue;
      svg.rect(x(at), y, x(at + v) - x(at), kBarH, series[i].cls,
               r.label + " · " + series[i].name + ": " + fmt(v, "%.3f"));
      at += v;
    }
    y += kBarH + kGap;
  }
  return svg.str();
}

std::string scatter_chart(const std::vector<ScatterPoint>& points, std::string_view x_title,
                          std::string_view y_title, std::string_view label, ScatterStyle style) {
  constexpr double kW = 760, kH = 400, kL = 70, kR = 24, kT = 36, kB = 50;
  const double scale = style.percent ? 100 : 1;
  Svg svg(kW, kH, "chart scatter", label);
  double x_max = 0, y_min = 0, y_max = 0;
  for (const ScatterPoint& p : points) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
    x_max = std::max(x_max, scale * p.x);
    y_min = std::min(y_min, scale * p.y);
    y_max = std::max(y_max, scale * p.y);
  }
  if (style.diagonal) x_max = y_max = std::max(x_max, y_max);  // the same scale both ways
  const double x_top = nice_max(std::max(x_max, 1e-3));
  // Widen the range to whole tick steps so no dot sits on the frame.
  y_max = std::max(y_max, y_min + 1e-3);
  const std::vector<double> rough = nice_ticks(y_min, y_max, 6);
  const double step = rough.size() > 1 ? rough[1] - rough[0] : 1;
  const double y_lo = !style.percent && y_min >= 0 ? 0.0 : std::floor(y_min / step - 1e-9) * step;
  const double y_hi = std::ceil(y_max / step + 1e-9) * step;
  const std::vector<double> y_ticks = nice_ticks(y_lo, y_hi, 6);
  const LinearScale x{.d0 = 0, .d1 = x_top, .r0 = kL, .r1 = kW - kR};
  const LinearScale y{.d0 = y_lo, .d1 = y_hi, .r0 = kH - kB, .r1 = kT};
  x_axis(svg, x, nice_ticks(0, x_top, 8), kH - kB, kT, x_title);
  y_axis(svg, y, y_ticks, kL, kW - kR, y_title);
  if (y_lo < 0) svg.line(kL, y(0), kW - kR, y(0), "zero");
  if (style.diagonal) {
    const double end = std::min(x_top, y_hi);
    svg.line(x(0), y(0), x(end), y(end), "zero");
  }
  const auto value = [&](double v, std::string_view title) {
    if (style.percent) return format_percent(v);
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return std::string(title) + " " + buf;
  };
  const bool label_points = style.labels && points.size() <= 12;
  for (const ScatterPoint& p : points) {
    if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
    const double px = x(scale * p.x), py = y(scale * p.y);
    svg.circle(px, py, 4.5, "pt",
               style.percent
                   ? p.label + ": overlap ratio " + value(p.x, "") + ", slowdown " + value(p.y, "")
                   : p.label + ": " + value(p.x, x_title) + ", " + value(p.y, y_title));
    if (label_points) svg.text(px + 7, py - 5, short_label(p.label), "pt-label");
  }
  return svg.str();
}

std::string line_chart(const std::vector<LineSeries>& lines, std::string_view x_title,
                       std::string_view y_title, double y_unit_scale, std::string_view label) {
  constexpr double kW = 1100, kH = 360, kL = 70, kR = 24, kT = 56, kB = 50;
  Svg svg(kW, kH, "chart lines", label);
  std::vector<LegendEntry> entries;
  double x_min = INFINITY, x_max = -INFINITY, y_max = 0;
  for (const LineSeries& l : lines) {
    entries.push_back({"line " + l.series.cls, l.series.name});
    for (const auto& [px, py] : l.points) {
      if (!std::isfinite(px) || !std::isfinite(py)) continue;
      x_min = std::min(x_min, px);
      x_max = std::max(x_max, px);
      y_max = std::max(y_max, py / y_unit_scale);
    }
  }
  legend(svg, kL, 16, entries);
  if (!std::isfinite(x_min)) x_min = 0, x_max = 1;
  const std::vector<double> x_ticks = nice_ticks(x_min, x_max, 8);
  const double x_lo = std::min(x_min, x_ticks.empty() ? x_min : x_ticks.front());
  const double x_hi = std::max(x_max, x_ticks.empty() ? x_max : x_ticks.back());
  const double y_top = nice_max(y_max);
  const LinearScale x{.d0 = x_lo, .d1 = x_hi, .r0 = kL + 10, .r1 = kW - kR};
  const LinearScale y{.d0 = 0, .d1 = y_top, .r0 = kH - kB, .r1 = kT};
  x_axis(svg, x, x_ticks, kH - kB, kT, x_title);
  y_axis(svg, y, nice_ticks(0, y_top, 6), kL, kW - kR, y_title);
  for (const LineSeries& l : lines) {
    std::vector<Point> pts;
    for (const auto& [px, py] : l.points) {
      if (std::isfinite(px) && std::isfinite(py)) pts.push_back({px, py / y_unit_scale});
    }
    std::sort(pts.begin(), pts.end());
    std::vector<Point> screen;
    for (const auto& [px, py] : pts) screen.push_back({x(px), y(py)});
    svg.polyline(screen, "line " + l.series.cls);
    for (std::size_t i = 0; i < pts.size(); ++i) {
      svg.circle(
          screen[i].first, screen[i].second, 3.5, "mk " + l.series.cls,
          l.series.name + " at " + fmt(pts[i].first, "%g") + ": " + fmt(pts[i].second, "%.3f"));
    }
  }
  return svg.str();
}

std::string power_chart(const std::vector<PowerTrack>& tracks, const IntervalSet& overlap,
                        std::int64_t t0_ns, std::int64_t t1_ns, std::string_view label) {
  constexpr double kW = 1100, kH = 260, kL = 70, kR = 24, kT = 46, kB = 50;
  static constexpr const char* kTrackClasses[] = {"l-ovl", "l-seq", "l-ideal", "l-other"};
  Svg svg(kW, kH, "chart power", label);
  std::vector<LegendEntry> entries{{"ovl-swatch", "overlapped (compute ∩ comm, any rank)"}};
  double w_max = 0;
  for (std::size_t i = 0; i < tracks.size(); ++i) {
    entries.push_back({std::string("line ") + kTrackClasses[i % 4], tracks[i].name});
    for (const auto& [t, w] : tracks[i].samples) w_max = std::max(w_max, finite_or(w, 0));
  }
  legend(svg, kL, 16, entries);
  const double span_ms = std::max(1e-3, static_cast<double>(t1_ns - t0_ns) / 1e6);
  const LinearScale x{.d0 = 0, .d1 = span_ms, .r0 = kL, .r1 = kW - kR};
  const double w_top = nice_max(std::max(w_max, 1.0));
  const LinearScale y{.d0 = 0, .d1 = w_top, .r0 = kH - kB, .r1 = kT};
  auto tx = [&](double t_ns) { return x((t_ns - static_cast<double>(t0_ns)) / 1e6); };
  for (const Interval& o : overlap) {
    const double a = std::max(kL, tx(static_cast<double>(o.start_ns)));
    const double b = std::min(kW - kR, tx(static_cast<double>(o.end_ns)));
    if (b > a) svg.rect(a, kT, std::max(0.6, b - a), kH - kB - kT, "ovl");
  }
  x_axis(svg, x, nice_ticks(0, span_ms, 8), kH - kB, kT, "time since the scenario started (ms)");
  y_axis(svg, y, nice_ticks(0, w_top, 5), kL, kW - kR, "power (W)");
  for (std::size_t i = 0; i < tracks.size(); ++i) {
    std::vector<Point> pts;
    for (const auto& [t, w] : tracks[i].samples) {
      if (std::isfinite(w)) pts.push_back({tx(t), y(w)});
    }
    svg.polyline(pts, std::string("line ") + kTrackClasses[i % 4]);
  }
  return svg.str();
}

}  // namespace tandem::html
