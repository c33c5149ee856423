// The metric catalogue: every ScenarioMetrics field once, keys and labels unique and the
// same as the JSON and the terminal table show, and each row wired to the value it names.
#include "analysis/metric_catalogue.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace tandem {
namespace {

using SM = ScenarioMetrics;

// The published schema (docs/CHARACTERIZE.md) and the terminal labels, pinned: a change
// here is a visible change for every reader of summary.json and of the table.
struct Expected {
  const char* key;
  const char* label;
  Summary SM::*field;
};
const Expected kExpected[] = {
    {"t_comp_iso_ns", "T_comp_iso (compute-only)", &SM::t_comp_iso_ns},
    {"t_comp_ovl_ns", "T_comp_ovl (overlapped)", &SM::t_comp_ovl_ns},
    {"t_comm_iso_ns", "T_comm_iso (comm-only)", &SM::t_comm_iso_ns},
    {"t_comm_ovl_ns", "T_comm_ovl (overlapped)", &SM::t_comm_ovl_ns},
    {"t_ovl_ns", "T_ovl", &SM::t_ovl_ns},
    {"compute_slowdown", "compute slowdown S (eq. 1)", &SM::compute_slowdown},
    {"overlap_ratio", "overlap ratio R (eq. 2)", &SM::overlap_ratio},
    {"e2e_ovl_ns", "E2E_ovl (eq. 3, measured)", &SM::e2e_ovl_ns},
    {"e2e_ideal_ns", "E2E_ideal (eq. 4)", &SM::e2e_ideal_ns},
    {"e2e_seq_ns", "E2E_seq (measured)", &SM::e2e_seq_ns},
    {"e2e_seq_model_ns", "E2E_seq_model (eq. 5)", &SM::e2e_seq_model_ns},
    {"e2e_seq_model_error_ns", "  model - measured", &SM::e2e_seq_model_error_ns},
    {"hidden_share", "hidden share of comm", &SM::hidden_share},
    {"exposed_comm_ns", "exposed comm", &SM::exposed_comm_ns},
    {"overlap_benefit_ns", "overlap benefit (seq - ovl)", &SM::overlap_benefit_ns},
    {"contention_loss_ns", "contention loss (ovl - ideal)", &SM::contention_loss_ns},
    {"overlap_efficiency", "overlap efficiency", &SM::overlap_efficiency},
};

TEST(MetricCatalogueTest, EveryScenarioMetricOnceWithItsKeyAndLabel) {
  const auto catalogue = metric_catalogue();
  ASSERT_EQ(catalogue.size(), std::size(kExpected));
  ASSERT_EQ(catalogue.size() * sizeof(Summary), sizeof(SM)) << "a field without a row";
  std::set<std::string_view> keys, labels;
  for (std::size_t i = 0; i < catalogue.size(); ++i) {
    const MetricDef& m = catalogue[i];
    EXPECT_EQ(m.key, kExpected[i].key) << i;
    EXPECT_EQ(m.label, kExpected[i].label) << i;
    EXPECT_TRUE(m.summary == kExpected[i].field) << m.key;
    EXPECT_EQ(&metric_def(kExpected[i].field), &m) << m.key;
    EXPECT_NE(m.input == nullptr, m.derived == nullptr) << m.key << ": measured or derived";
    EXPECT_FALSE(m.definition.empty()) << m.key;
    EXPECT_EQ(m.unit == MetricUnit::kNanoseconds, m.key.ends_with("_ns")) << m.key;
    keys.insert(m.key);
    labels.insert(m.label);
  }
  EXPECT_EQ(keys.size(), catalogue.size());
  EXPECT_EQ(labels.size(), catalogue.size());
}

// Distinct values per series: a row wired to the wrong input or derived field shows.
TEST(MetricCatalogueTest, RowsReadTheValuesTheyName) {
  ScenarioInputs in;
  in.t_comp_iso_ns = {100};
  in.t_comm_iso_ns = {70};
  in.e2e_seq_ns = {190};
  in.t_comp_ovl_ns = {120};
  in.t_comm_ovl_ns = {80};
  in.t_ovl_ns = {50};
  in.e2e_ovl_ns = {160};
  const SM m = compute_scenario_metrics(in);
  const DerivedMetrics d = derive(100, 70, 190, 120, 80, 50, 160);
  for (const MetricDef& row : metric_catalogue()) {
    const double expected = row.input ? (in.*row.input).front() : d.*row.derived;
    EXPECT_DOUBLE_EQ((m.*row.summary).median, expected) << row.key;
  }
  EXPECT_DOUBLE_EQ(m.compute_slowdown.median, 0.2);  // by hand: (120 - 100) / 100
  EXPECT_DOUBLE_EQ(m.e2e_ideal_ns.median, 140);      // 160 - 20
  EXPECT_DOUBLE_EQ(m.t_comm_iso_ns.median, 70);
}

TEST(MetricCatalogueTest, JsonAndTerminalTableShowTheSameRows) {
  SM m;
  m.compute_slowdown.median = 0.25;
  m.e2e_ovl_ns.median = 2.5e6;
  const nlohmann::json j = m;
  std::set<std::string> json_keys;
  for (const auto& [key, value] : j.items()) json_keys.insert(key);
  std::set<std::string> catalogue_keys;
  for (const MetricDef& row : metric_catalogue()) catalogue_keys.insert(std::string(row.key));
  EXPECT_EQ(json_keys, catalogue_keys);
  EXPECT_DOUBLE_EQ(j["compute_slowdown"]["median"].get<double>(), 0.25);

  std::istringstream table(format_metrics_table(m));
  std::string line;
  std::getline(table, line);
  EXPECT_NE(line.find("metric"), std::string::npos) << line;
  for (const MetricDef& row : metric_catalogue()) {
    ASSERT_TRUE(std::getline(table, line)) << row.key;
    EXPECT_EQ(line.rfind("  " + std::string(row.label), 0), 0u) << line;
  }
  EXPECT_FALSE(std::getline(table, line)) << "extra row: " << line;

  const nlohmann::json derived = DerivedMetrics{};
  std::size_t derived_rows = 0;
  for (const MetricDef& row : metric_catalogue()) {
    derived_rows += row.derived != nullptr;
    if (row.derived) {
      EXPECT_TRUE(derived.contains(row.key)) << row.key;
    }
  }
  EXPECT_EQ(derived.size(), derived_rows);
}

TEST(MetricCatalogueTest, FormatsByUnit) {
  EXPECT_EQ(format_metric(2.5e6, MetricUnit::kNanoseconds), "2.500 ms");
  EXPECT_EQ(format_metric(0.25, MetricUnit::kFraction), "25.0%");
  EXPECT_EQ(format_metric(0.5, MetricUnit::kRatio), "0.500");
  EXPECT_EQ(format_metric(kUndefined, MetricUnit::kRatio), "n/a");
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

Summary median_only(double value) {
  Summary s;
  s.count = 1;
  s.median = value;
  return s;
}

// The story states the medians' sums in words, and says which way each one went.
TEST(OverlapStoryTest, SaysWhatOverlapSavedAndWhatContentionCost) {
  ScenarioMetrics m;
  m.hidden_share = median_only(0.658);
  m.e2e_ovl_ns = median_only(39.45e6);
  m.e2e_seq_ns = median_only(42.57e6);
  m.e2e_ideal_ns = median_only(36.84e6);
  m.compute_slowdown = median_only(0.075);
  EXPECT_EQ(overlap_story(m),
            "Overlap hid 65.8% of the communication: an iteration took 39.5 ms overlapped "
            "against 42.6 ms with the communication after backward (sequential), 3.12 ms "
            "saved. Communication running beside compute slowed compute by 7.5%: without "
            "that contention the overlapped iteration would take 36.8 ms (ideal), 2.61 ms "
            "less.");
  m.e2e_seq_ns = median_only(38e6);  // overlap lost time
  m.compute_slowdown = median_only(-0.01);
  EXPECT_NE(overlap_story(m).find("1.45 ms lost"), std::string::npos) << overlap_story(m);
  EXPECT_NE(overlap_story(m).find("sped up compute by 1.0%"), std::string::npos);
  m.e2e_seq_ns = median_only(kUndefined);  // no sequential scenario: no story
  EXPECT_EQ(overlap_story(m), "");
}

}  // namespace
}  // namespace tandem
