// The report's charts, each a function from plain data to one <svg> element. They know
// nothing about results directories; report.cpp turns results into these inputs.
//
// Colours are the Okabe-Ito palette (readable by colour-blind readers) and every fill
// that must be told apart in black-and-white print also has a pattern (report.cpp's
// <defs>): hatching marks overlap and hidden communication, dots the ideal time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/intervals.h"
#include "report/html/svg.h"

namespace tandem::html {

// ---- Gantt: one row per rank, three lanes (compute, comm, wait) --------------------

struct GanttSpan {
  int lane = 0;  // 0 compute, 1 comm, 2 wait
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t issue_ns = 0;  // comm: when its bucket became ready (0: unknown)
  std::int64_t bytes = 0;
  std::string name;
};

// A run of compute spans of one micro-batch's forward or backward: "F3", "B3" (pipelines
// and gradient accumulation), written over the compute lane where it is wide enough.
struct GanttLabel {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::string text;
};

struct GanttRank {
  int rank = 0;
  std::vector<GanttSpan> spans;
  std::vector<GanttLabel> labels;
  IntervalSet overlap;  // ∪compute ∩ ∪comm: shaded across both lanes
};

struct GanttInput {
  std::string label;       // accessible name
  std::int64_t t0_ns = 0;  // the axis origin (iteration start)
  std::int64_t t1_ns = 0;
  std::vector<GanttRank> ranks;  // the ranks to draw (already capped by the caller)
};
std::string gantt_chart(const GanttInput& input);

// ---- Horizontal bars with p10-p90 whiskers, one group of bars per configuration ----

struct Series {
  std::string name;
  std::string cls;  // fill or line class, e.g. "f-ovl"
};

struct BarValue {
  double median = 0, p10 = 0, p90 = 0;  // NaN median: not drawn ("n/a")
};

struct BarGroup {
  std::string label;
  std::vector<BarValue> values;  // one per series
};

// Values are in `unit_scale` units of the raw numbers (e.g. 1e6 for ns -> ms).
std::string grouped_bar_chart(const std::vector<Series>& series,
                              const std::vector<BarGroup>& groups, std::string_view x_title,
                              double unit_scale, std::string_view label);

// ---- Horizontal stacked bars, one bar per configuration ----------------------------

struct StackRow {
  std::string label;
  std::vector<double> parts;  // one per series, >= 0
};
std::string stacked_bar_chart(const std::vector<Series>& series, const std::vector<StackRow>& rows,
                              std::string_view x_title, double unit_scale, std::string_view label);

// ---- Scatter -------------------------------------------------------------------

struct ScatterPoint {
  double x = 0, y = 0;  // NaN: left out
  std::string label;
};
// How a scatter reads its numbers: fractions drawn as percentages (overlap ratio against
// slowdown), or plain values in the titles' units (milliseconds, MiB) with the y axis from
// 0 where nothing is negative; `diagonal` draws y = x (predicted against measured).
struct ScatterStyle {
  bool percent = true;
  bool diagonal = false;
  bool labels = true;  // names beside the dots (at most 12 dots); else only on hover
};
std::string scatter_chart(const std::vector<ScatterPoint>& points, std::string_view x_title,
                          std::string_view y_title, std::string_view label,
                          ScatterStyle style = {});

// ---- Lines over a numeric x (chunk count, bucket size) ----------------------------

struct LineSeries {
  Series series;
  std::vector<Point> points;  // (x, y in raw units); sorted by x by the chart
};
std::string line_chart(const std::vector<LineSeries>& lines, std::string_view x_title,
                       std::string_view y_title, double y_unit_scale, std::string_view label);

// ---- Power over time ----------------------------------------------------------

struct PowerTrack {
  std::string name;
  std::vector<Point> samples;  // (t_ns, watts)
};
// Time is drawn from t0_ns; `overlap` intervals (ns, same clock) are shaded.
std::string power_chart(const std::vector<PowerTrack>& tracks, const IntervalSet& overlap,
                        std::int64_t t0_ns, std::int64_t t1_ns, std::string_view label);

// Human units for tooltips and tables.
std::string format_ms(double ns);                    // "12.345 ms", "n/a" for NaN
std::string format_us(double ns);                    // "321.5 µs"
std::string format_percent(double frac);             // "42.1%", "n/a"
std::string format_bytes_exact(std::int64_t bytes);  // "805,952 B (787.1 KiB)"

}  // namespace tandem::html
