// SVG building; see svg.h for why everything goes through escape() and coord().
#include "report/html/svg.h"

#include <cmath>
#include <cstdio>

#include "core/parse.h"

namespace tandem::html {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters (a NUL or a terminal escape in a kernel name) are not text
        // HTML may carry: they are shown as \xNN, the way the name was spelled in C.
        append_visible(out, c, /*keep_whitespace=*/true);
    }
  }
  return out;
}

std::string coord(double value) {
  if (!std::isfinite(value)) return "0";
  const double rounded = std::round(value * 10) / 10;
  char buf[32];
  if (rounded == std::floor(rounded)) {
    std::snprintf(buf, sizeof buf, "%.0f", rounded == 0 ? 0.0 : rounded);  // no "-0"
  } else {
    std::snprintf(buf, sizeof buf, "%.1f", rounded);
  }
  return buf;
}

namespace {

std::string title_element(std::string_view title) {
  return title.empty() ? std::string() : "<title>" + escape(title) + "</title>";
}

std::string class_attr(std::string_view cls) {
  return cls.empty() ? std::string() : " class=\"" + escape(cls) + "\"";
}

}  // namespace

Svg::Svg(double width, double height, std::string_view css_class, std::string_view label)
    : width_(width), height_(height) {
  head_ = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + coord(width) + " " +
          coord(height) + "\"" + class_attr(css_class) + " role=\"img\" aria-label=\"" +
          escape(label) + "\">";
}

void Svg::rect(double x, double y, double w, double h, std::string_view cls,
               std::string_view title) {
  body_ += "<rect x=\"" + coord(x) + "\" y=\"" + coord(y) + "\" width=\"" + coord(w) +
           "\" height=\"" + coord(h) + "\"" + class_attr(cls);
  body_ += title.empty() ? "/>" : ">" + title_element(title) + "</rect>";
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view cls) {
  body_ += "<line x1=\"" + coord(x1) + "\" y1=\"" + coord(y1) + "\" x2=\"" + coord(x2) +
           "\" y2=\"" + coord(y2) + "\"" + class_attr(cls) + "/>";
}

void Svg::circle(double cx, double cy, double r, std::string_view cls, std::string_view title) {
  body_ += "<circle cx=\"" + coord(cx) + "\" cy=\"" + coord(cy) + "\" r=\"" + coord(r) + "\"" +
           class_attr(cls);
  body_ += title.empty() ? "/>" : ">" + title_element(title) + "</circle>";
}

void Svg::polyline(const std::vector<Point>& points, std::string_view cls) {
  body_ += "<polyline points=\"";
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (i > 0) body_ += ' ';
    body_ += coord(points[i].first) + "," + coord(points[i].second);
  }
  body_ += "\"" + class_attr(cls) + "/>";
}

void Svg::text(double x, double y, std::string_view content, std::string_view cls,
               std::string_view anchor) {
  body_ += "<text x=\"" + coord(x) + "\" y=\"" + coord(y) + "\"" + class_attr(cls);
  if (anchor != "start") body_ += " text-anchor=\"" + escape(anchor) + "\"";
  body_ += ">" + escape(content) + "</text>";
}

void Svg::open_group(std::string_view cls, std::string_view title) {
  body_ += "<g" + class_attr(cls) + ">" + title_element(title);
  ++open_groups_;
}

void Svg::close_group() {
  if (open_groups_ == 0) return;
  body_ += "</g>";
  --open_groups_;
}

std::string Svg::str() const {
  std::string out = head_ + body_;
  for (int i = 0; i < open_groups_; ++i) out += "</g>";
  return out + "</svg>";
}

}  // namespace tandem::html
