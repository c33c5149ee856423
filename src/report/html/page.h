// The page around the charts: one self-contained HTML document (inline CSS and SVG, no
// script, nothing fetched), plus the small HTML pieces the report is assembled from.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::html {

// <!doctype html> ... with the stylesheet and the shared SVG patterns; `body` is trusted
// markup built from escaped pieces.
std::string page(std::string_view title, std::string_view body);

// <section> with a heading and an optional one-paragraph explanation (both escaped).
std::string section(std::string_view id, std::string_view heading, std::string_view intro,
                    std::string_view content);
// A note in muted text (escaped).
std::string note(std::string_view text);
// A <figure> around a chart with an escaped caption.
std::string figure(std::string_view svg, std::string_view caption);

// A table; every header and cell is escaped. `highlight_row` (if >= 0) is emphasized.
std::string table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows, int highlight_row = -1,
                  std::string_view css_class = "");
// Key/value cards at the top of the page.
std::string cards(const std::vector<std::pair<std::string, std::string>>& items);

}  // namespace tandem::html
