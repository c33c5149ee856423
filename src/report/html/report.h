// The self-contained HTML report of a results directory: Gantt charts of one iteration,
// E2E and time-breakdown bars per configuration, slowdown against overlap ratio,
// scaling with chunk count and bucket size, power over time, and the metrics,
// configuration and machine tables (docs/REPORT.md says how to read each).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace tandem::html {

struct ReportOptions {
  std::string point;             // the configuration drawn in detail; empty: the first
  std::optional<int> iteration;  // the iteration in the Gantt charts; none: the median one
  int max_ranks = 8;             // ranks drawn per Gantt chart (the rest are noted)
  // How the page names the directory (its path, and its last component in the title);
  // empty: as read. A run writing into DIR.partial names DIR, so that `tandem report DIR`
  // rebuilds the same page.
  std::filesystem::path shown_as;
};

// Reads DIR (a `tandem train`, `characterize` or `analyze --out` directory) and returns
// the page, the kind its summary's "command" says. Throws UsageError("<path>: ...") on a missing or
// corrupt directory, an unknown
// --point or an iteration that was not measured.
std::string render_report(const std::filesystem::path& results_dir,
                          const ReportOptions& options = {});

// Renders and writes atomically to `out` (default DIR/report.html); returns the path.
std::filesystem::path write_report(const std::filesystem::path& results_dir,
                                   const ReportOptions& options = {},
                                   const std::filesystem::path& out = {});

}  // namespace tandem::html
