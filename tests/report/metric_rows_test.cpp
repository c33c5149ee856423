// The HTML metrics table shows the catalogue's rows, as the terminal table and the JSON do.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "analysis/metric_catalogue.h"
#include "report/html/sections.h"
#include "report/html/svg.h"

namespace tandem::html {
namespace {

TEST(MetricRowsTest, HtmlTableHasARowPerCatalogueEntryInOrder) {
  ScenarioMetrics m;
  m.compute_slowdown = {.median = 0.25, .p10 = 0.2, .p90 = 0.3, .mean = 0.25};
  const std::string html = metric_rows_table(nlohmann::json(m));
  std::size_t at = 0;
  for (const MetricDef& row : metric_catalogue()) {
    const std::string cell = "<tr><td>" + escape(row.label) + "</td>";
    const std::size_t found = html.find(cell, at);
    ASSERT_NE(found, std::string::npos) << row.key << " missing or out of order";
    at = found + cell.size();
  }
  std::size_t rows = 0;
  for (std::size_t p = html.find("<tr><td>"); p != std::string::npos;
       p = html.find("<tr><td>", p + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, metric_catalogue().size());
  EXPECT_NE(html.find("<td>25.0%</td><td>20.0%</td><td>30.0%</td><td>25.0%</td>"),
            std::string::npos);
  EXPECT_NE(html.find(escape(metric_def(&ScenarioMetrics::compute_slowdown).definition)),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::html
