// The HTML frame, stylesheet and SVG patterns of the report (page.h).
#include "report/html/page.h"

#include "report/html/svg.h"

namespace tandem::html {

namespace {

// Okabe-Ito colours: blue #0072B2 compute / overlapped E2E, orange #E69F00 comm,
// vermillion #D55E00 wait / exposed / sequential, bluish green #009E73 ideal. Patterns
// make the same distinctions survive greyscale print.
constexpr const char* kStyle = R"css(
:root{--ink:#1a1a1a;--muted:#555;--rule:#ccc;--bg:#fff}
*{box-sizing:border-box}
body{margin:0 auto;max-width:1180px;padding:20px 28px 60px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--ink);background:var(--bg)}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:30px 0 6px;padding-top:8px;border-top:1px solid var(--rule)}
h3{font-size:14px;margin:16px 0 4px}
p{margin:4px 0 8px;max-width:72em}
.sub{color:var(--muted);margin:0 0 12px}
.note{color:var(--muted);font-style:italic}
nav a{margin-right:12px;color:#0072B2}
figure{margin:6px 0 14px}
figcaption{color:var(--muted);font-size:12.5px;margin-top:2px}
svg.chart{width:100%;height:auto;display:block}
svg.scatter{max-width:760px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0 4px}
.card{border:1px solid var(--rule);border-radius:6px;padding:6px 12px;min-width:150px}
.card b{display:block;font-size:18px}
.card span{color:var(--muted);font-size:12px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border-bottom:1px solid #e4e4e4;padding:3px 10px;text-align:right;white-space:nowrap}
th{background:#f3f3f3;font-weight:600}
td:first-child,th:first-child{text-align:left}
table.kv td{text-align:left;white-space:normal}
tr.hl td{background:#fff4d6;font-weight:600}
.scroll{max-height:520px;overflow:auto;border:1px solid #eee}
svg text{font-family:system-ui,"DejaVu Sans",sans-serif;fill:var(--ink)}
.tick{font-size:10.5px;fill:#444}
.axis-title{font-size:12px;font-weight:600}
.legend,.row-label,.lane-label,.pt-label,.na{font-size:11px}
.lane-label{fill:var(--muted)}
.rank-label{font-size:12px;font-weight:600}
.micro-label{font-size:9px;text-anchor:middle;fill:#fff;pointer-events:none}
.axis{stroke:#333;stroke-width:1}
.grid{stroke:#e2e2e2;stroke-width:1}
.zero{stroke:#777;stroke-dasharray:3 3}
.lane-bg{fill:#f5f5f5}
.f-comp{fill:#0072B2}
.f-comm{fill:#E69F00}
.gantt .f-comp,.gantt .f-comm{stroke:#fff;stroke-width:.4}
.f-wait{fill:url(#p-wait)}
.f-ovl{fill:#0072B2}
.f-seq{fill:url(#p-seq)}
.f-ideal{fill:url(#p-ideal)}
.f-exposed{fill:#D55E00}
.f-hidden{fill:url(#p-hidden)}
.f-idle{fill:#C8C8C8}
.f-skew{fill:#CC79A7}
.f-transfer{fill:#E69F00}
.ovl{fill:url(#p-ovl);stroke:#000;stroke-opacity:.55;stroke-width:.6}
.ovl-swatch{fill:url(#p-ovl);stroke:#000;stroke-width:.6}
.whisker{stroke:#111;stroke-width:1.2}
.ready line{stroke:#111;stroke-width:1.4}
.ready line.lead{stroke-width:1;stroke-dasharray:2 2}
.line.ready{stroke:#111;stroke-width:1.4}
.pt{fill:#0072B2;stroke:#fff;stroke-width:1}
polyline.line{fill:none;stroke-width:2}
line.line{stroke-width:2}
.l-ovl{stroke:#0072B2;fill:#0072B2}
.l-seq{stroke:#D55E00;fill:#D55E00;stroke-dasharray:7 3}
.l-ideal{stroke:#009E73;fill:#009E73;stroke-dasharray:2 2}
.l-other{stroke:#CC79A7;fill:#CC79A7;stroke-dasharray:9 3 2 3}
.l-s0{stroke:#0072B2;fill:#0072B2}
.l-s1{stroke:#D55E00;fill:#D55E00;stroke-dasharray:7 3}
.l-s2{stroke:#009E73;fill:#009E73;stroke-dasharray:2 2}
.l-s3{stroke:#CC79A7;fill:#CC79A7;stroke-dasharray:9 3 2 3}
.l-s4{stroke:#56B4E9;fill:#56B4E9;stroke-dasharray:4 4}
.l-s5{stroke:#000;fill:#000;stroke-dasharray:1 3}
.mk{stroke:#fff;stroke-width:1;stroke-dasharray:none}
@media print{body{max-width:none;padding:0}.scroll{max-height:none;overflow:visible;border:0}h2{break-after:avoid}figure{break-inside:avoid}nav{display:none}}
)css";

// Shared patterns, referenced by url(#id) from every chart of the page. The holder is
// zero-sized rather than display:none, which would switch the patterns off.
constexpr const char* kPatterns =
    R"svg(<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>)svg"
    R"svg(<pattern id="p-ovl" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff" fill-opacity=".25"/><line x1="0" y1="0" x2="0" y2="6" stroke="#000" stroke-width="2.2"/></pattern>)svg"
    R"svg(<pattern id="p-seq" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#D55E00"/><line x1="0" y1="0" x2="0" y2="6" stroke="#fff" stroke-width="1.6"/></pattern>)svg"
    R"svg(<pattern id="p-ideal" width="5" height="5" patternUnits="userSpaceOnUse"><rect width="5" height="5" fill="#009E73"/><circle cx="2.5" cy="2.5" r="1" fill="#fff"/></pattern>)svg"
    R"svg(<pattern id="p-hidden" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="6" height="6" fill="#E69F00"/><line x1="0" y1="0" x2="0" y2="6" stroke="#000" stroke-width="1.4"/></pattern>)svg"
    R"svg(<pattern id="p-wait" width="5" height="5" patternUnits="userSpaceOnUse"><rect width="5" height="5" fill="#D55E00"/><path d="M0 0L5 5M5 0L0 5" stroke="#fff" stroke-width=".9"/></pattern>)svg"
    R"svg(</defs></svg>)svg";

}  // namespace

std::string page(std::string_view title, std::string_view body) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  out += "<title>" + escape(title) + "</title><style>";
  out += kStyle;
  out += "</style></head><body>\n";
  out += kPatterns;
  out += body;
  out += "\n</body></html>\n";
  return out;
}

std::string section(std::string_view id, std::string_view heading, std::string_view intro,
                    std::string_view content) {
  std::string out = "<section id=\"" + escape(id) + "\"><h2>" + escape(heading) + "</h2>";
  if (!intro.empty()) out += "<p>" + escape(intro) + "</p>";
  out += content;
  return out + "</section>\n";
}

std::string note(std::string_view text) { return "<p class=\"note\">" + escape(text) + "</p>"; }

std::string figure(std::string_view svg, std::string_view caption) {
  std::string out = "<figure>";
  out += svg;
  if (!caption.empty()) out += "<figcaption>" + escape(caption) + "</figcaption>";
  return out + "</figure>";
}

std::string table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows, int highlight_row,
                  std::string_view css_class) {
  std::string out = css_class.empty() ? "<table>" : "<table class=\"" + escape(css_class) + "\">";
  if (!header.empty()) {
    out += "<thead><tr>";
    for (const auto& h : header) out += "<th>" + escape(h) + "</th>";
    out += "</tr></thead>";
  }
  out += "<tbody>";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out += static_cast<int>(r) == highlight_row ? "<tr class=\"hl\">" : "<tr>";
    for (const auto& cell : rows[r]) out += "<td>" + escape(cell) + "</td>";
    out += "</tr>";
  }
  return out + "</tbody></table>";
}

std::string cards(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out = "<div class=\"cards\">";
  for (const auto& [label, value] : items) {
    out +=
        "<div class=\"card\"><b>" + escape(value) + "</b><span>" + escape(label) + "</span></div>";
  }
  return out + "</div>";
}

}  // namespace tandem::html
