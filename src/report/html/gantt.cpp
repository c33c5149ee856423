// The Gantt chart: per rank, compute / comm / wait lanes for one iteration, overlapped
// time shaded across the compute and comm lanes, bucket-ready ticks on the comm lane.
#include <algorithm>

#include "report/html/axes.h"
#include "report/html/charts.h"

namespace tandem::html {

namespace {

constexpr double kWidth = 1100;
constexpr double kLeft = 112;  // rank and lane labels
constexpr double kRight = 16;
constexpr double kTop = 30;  // legend
constexpr double kLaneH = 13;
constexpr double kLaneGap = 2;
constexpr double kRankGap = 12;
constexpr double kBottom = 44;  // axis
constexpr const char* kLaneNames[] = {"compute", "comm", "wait"};
constexpr const char* kLaneClasses[] = {"f-comp", "f-comm", "f-wait"};

double rank_height() { return 3 * kLaneH + 2 * kLaneGap; }

std::string span_title(const GanttSpan& s) {
  std::string title = s.name + " · " + format_us(static_cast<double>(s.end_ns - s.start_ns));
  if (s.bytes > 0) title += " · " + format_bytes_exact(s.bytes);
  if (s.issue_ns > 0 && s.issue_ns <= s.start_ns) {
    title += " · queued " + format_us(static_cast<double>(s.start_ns - s.issue_ns)) +
             " after its bucket was ready";
  }
  return title;
}

}  // namespace

std::string gantt_chart(const GanttInput& in) {
  const double rows = static_cast<double>(in.ranks.size());
  const double height = kTop + rows * (rank_height() + kRankGap) + kBottom;
  Svg svg(kWidth, height, "chart gantt", in.label);
  legend(svg, kLeft, 16,
         {{"f-comp", "compute"},
          {"f-comm", "communication"},
          {"f-wait", "wait (blocked on comm)"},
          {"ovl-swatch", "overlapped (compute ∩ comm)"},
          {"line ready", "bucket ready → collective start"}});

  const double span_ns = static_cast<double>(std::max<std::int64_t>(1, in.t1_ns - in.t0_ns));
  const double max_ms = span_ns / 1e6;
  const std::vector<double> ticks = nice_ticks(0, max_ms, 8);
  const LinearScale x{.d0 = 0, .d1 = max_ms, .r0 = kLeft, .r1 = kWidth - kRight};
  auto px = [&](std::int64_t t_ns) { return x(static_cast<double>(t_ns - in.t0_ns) / 1e6); };

  // Backgrounds and labels first, then the grid, then the spans on top of both.
  double y = kTop;
  for (const GanttRank& rank : in.ranks) {
    svg.text(4, y + rank_height() / 2 + 4, "rank " + std::to_string(rank.rank), "rank-label");
    for (int lane = 0; lane < 3; ++lane) {
      const double ly = y + lane * (kLaneH + kLaneGap);
      svg.rect(kLeft, ly, kWidth - kRight - kLeft, kLaneH, "lane-bg");
      svg.text(kLeft - 4, ly + kLaneH - 3, kLaneNames[lane], "lane-label", "end");
    }
    y += rank_height() + kRankGap;
  }
  x_axis(svg, x, ticks, y, kTop, "time since the iteration started (ms)");

  y = kTop;
  for (const GanttRank& rank : in.ranks) {
    for (const GanttSpan& s : rank.spans) {
      if (s.lane < 0 || s.lane > 2) continue;
      const double ly = y + s.lane * (kLaneH + kLaneGap);
      const double x0 = px(s.start_ns);
      // Sub-pixel spans still show as a hairline, so nothing silently disappears.
      const double w = std::max(0.6, px(s.end_ns) - x0);
      svg.rect(x0, ly, w, kLaneH, kLaneClasses[s.lane], span_title(s));
    }
    // Micro-batch labels ("F3", "B3") over the compute lane, where the run is wide enough.
    for (const GanttLabel& l : rank.labels) {
      const double x0 = px(l.start_ns), x1 = px(l.end_ns);
      if (x1 - x0 < 7.0 * static_cast<double>(l.text.size()) + 2) continue;
      svg.text((x0 + x1) / 2, y + kLaneH - 3, l.text, "micro-label");
    }
    // Overlap shading on top of the spans: a hatch over compute and comm lanes.
    for (const Interval& o : rank.overlap) {
      svg.rect(px(o.start_ns), y, std::max(0.6, px(o.end_ns) - px(o.start_ns)),
               2 * kLaneH + kLaneGap, "ovl",
               "overlapped: " + format_us(static_cast<double>(o.length())));
    }
    // Bucket ready: a tick at the issue time and a dotted lead to the collective's start.
    const double comm_y = y + kLaneH + kLaneGap;
    for (const GanttSpan& s : rank.spans) {
      if (s.lane != 1 || s.issue_ns <= 0 || s.issue_ns > s.start_ns) continue;
      if (s.issue_ns < in.t0_ns) continue;
      svg.open_group("ready", s.name + " ready; started " +
                                  format_us(static_cast<double>(s.start_ns - s.issue_ns)) +
                                  " later");
      svg.line(px(s.issue_ns), comm_y - 2, px(s.issue_ns), comm_y + kLaneH + 2, "");
      svg.line(px(s.issue_ns), comm_y + kLaneH / 2, px(s.start_ns), comm_y + kLaneH / 2, "lead");
      svg.close_group();
    }
    y += rank_height() + kRankGap;
  }
  return svg.str();
}

}  // namespace tandem::html
