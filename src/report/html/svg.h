// A tiny SVG builder for the HTML report. Every text node and attribute value that comes
// from data goes through escape(), the one escaping function of the report, so a span
// named "<script>" is drawn as text and never becomes markup.
//
// Styling is by CSS class (report.css in report.cpp), not inline attributes, which keeps
// the SVG small when a chart has thousands of elements; numbers are written with at
// most one decimal for the same reason (a tenth of a pixel is below what anyone sees).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::html {

// Escapes & < > " ' for use in HTML/SVG text and attribute values, and writes control
// characters other than tab and newline as the text \xNN.
std::string escape(std::string_view text);

// A coordinate: at most one decimal, no trailing zeros ("12", "12.5", "-0.3").
std::string coord(double value);

using Point = std::pair<double, double>;

class Svg {
 public:
  // width x height user units, drawn at 100% of the container width (viewBox), so the
  // page reflows; `label` is the chart's accessible name.
  Svg(double width, double height, std::string_view css_class, std::string_view label);

  // Shapes. `cls` is a CSS class list (trusted: the report's own constants); `title`
  // becomes a hover tooltip (escaped). Empty title: none.
  void rect(double x, double y, double w, double h, std::string_view cls,
            std::string_view title = {});
  void line(double x1, double y1, double x2, double y2, std::string_view cls);
  void circle(double cx, double cy, double r, std::string_view cls, std::string_view title = {});
  void polyline(const std::vector<Point>& points, std::string_view cls);
  // anchor: "start", "middle" or "end".
  void text(double x, double y, std::string_view content, std::string_view cls = {},
            std::string_view anchor = "start");
  // A group whose children share a class and optionally a tooltip.
  void open_group(std::string_view cls, std::string_view title = {});
  void close_group();

  double width() const { return width_; }
  double height() const { return height_; }
  // The finished <svg> element.
  std::string str() const;

 private:
  double width_;
  double height_;
  std::string head_;
  std::string body_;
  int open_groups_ = 0;
};

}  // namespace tandem::html
