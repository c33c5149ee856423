// RAPL sampling against a fixture directory laid out like /sys/class/powercap.
#include <gtest/gtest.h>

#include <fstream>

#include "cli/cli_support.h"
#include "power/power.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}

TEST(RaplTest, DiscoversZonesAndUnwrapsTheCounter) {
  testing::TempDir root;
  write(root.path() / "intel-rapl:0" / "name", "package-0");
  write(root.path() / "intel-rapl:0" / "energy_uj", "999000000");
  write(root.path() / "intel-rapl:0" / "max_energy_range_uj", "1000000000");
  write(root.path() / "intel-rapl:0:0" / "name", "dram");
  write(root.path() / "intel-rapl:0:0" / "energy_uj", "5000000");
  write(root.path() / "intel-rapl:1" / "name", "no-counter");  // skipped: no energy_uj
  write(root.path() / "other" / "energy_uj", "1");               // not a RAPL zone

  auto sources = discover_rapl(root.path());
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0]->name(), "rapl package-0 (intel-rapl:0)");
  EXPECT_EQ(sources[1]->name(), "rapl dram (intel-rapl:0:0)");

  // An hour-long interval: the sampler thread never fires; the test samples by hand.
  PowerSampler sampler(std::move(sources), std::chrono::hours(1));
  ASSERT_TRUE(sampler.available());
  sampler.start();
  // Package counter wraps: 999 J -> 1000 J (range) -> 3 J means 4 J consumed.
  write(root.path() / "intel-rapl:0" / "energy_uj", "3000000");
  write(root.path() / "intel-rapl:0:0" / "energy_uj", "6500000");
  sampler.sample_now();
  write(root.path() / "intel-rapl:0" / "energy_uj", "5000000");
  const auto summaries = sampler.stop();
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_DOUBLE_EQ(summaries[0].energy_joules, 6.0);
  EXPECT_DOUBLE_EQ(summaries[1].energy_joules, 1.5);
  EXPECT_EQ(summaries[0].samples, 2u);  // the manual one and the one at stop
  EXPECT_GT(summaries[0].peak_watts, 0);
  EXPECT_GE(summaries[0].peak_watts, summaries[0].average_watts);
}

TEST(RaplTest, NoPowercapMeansUnavailableNotZero) {
  testing::TempDir root;
  EXPECT_TRUE(discover_rapl(root.path() / "missing").empty());
  PowerSampler sampler(discover_rapl(root.path()), std::chrono::milliseconds(10));
  EXPECT_FALSE(sampler.available());
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// A counter that advances 20 J every 100 ms, read every 50 ms (NVML's counter advances in
// steps like this): 200 W all along.
std::vector<EnergyPoint> stepped_counter() {
  std::vector<EnergyPoint> points;
  for (std::int64_t ms = 0; ms <= 1000; ms += 50) {
    points.push_back({ms * 1'000'000, 20.0 * static_cast<double>(ms / 100)});
  }
  return points;
}

TEST(PowerWindowTest, ACounterThatAdvancesInStepsIsNotReadAsTwiceItsPower) {
  PowerSummary s;
  summarize_energy(stepped_counter(), 0, 1'000'000'000, s);
  EXPECT_DOUBLE_EQ(s.energy_joules, 200.0);
  EXPECT_DOUBLE_EQ(s.average_watts, 200.0);
  // The counter advances every 100 ms: one step is 10% of the second.
  ASSERT_TRUE(s.counter_step_ms.has_value());
  EXPECT_DOUBLE_EQ(*s.counter_step_ms, 100.0);
  ASSERT_TRUE(s.resolution.has_value());
  EXPECT_DOUBLE_EQ(*s.resolution, 0.1);
  // 50 ms differences alone would read 400 W, 250 ms windows up to 240 W (three steps of
  // the counter in one); the peak window is ten steps, here the whole second.
  EXPECT_DOUBLE_EQ(s.peak_window_ms, 1000.0);
  EXPECT_DOUBLE_EQ(s.peak_watts, 200.0);

  // Over three seconds the peak window slides: 2 s at 200 W, then 1 s at 400 W.
  std::vector<EnergyPoint> points;
  for (std::int64_t ms = 0; ms <= 3000; ms += 50) {
    const std::int64_t steps = ms / 100;
    points.push_back({ms * 1'000'000, 20.0 * static_cast<double>(std::min<std::int64_t>(steps, 20)) +
                                          40.0 * static_cast<double>(std::max<std::int64_t>(steps - 20, 0))});
  }
  PowerSummary t;
  summarize_energy(points, 0, 3'000'000'000, t);
  EXPECT_DOUBLE_EQ(t.average_watts, 800.0 / 3);
  EXPECT_DOUBLE_EQ(t.peak_watts, 400.0);
}

TEST(PowerWindowTest, ACounterThatNeverMovesHasNoStepAndTheShortestWindow) {
  PowerSummary s;
  summarize_energy({{0, 5.0}, {500'000'000, 5.0}, {1'000'000'000, 5.0}}, 0, 1'000'000'000, s);
  EXPECT_EQ(s.energy_joules, 0.0);
  EXPECT_FALSE(s.counter_step_ms.has_value());
  EXPECT_FALSE(s.resolution.has_value());
  EXPECT_DOUBLE_EQ(s.peak_window_ms, 250.0);
  nlohmann::json j = s;
  EXPECT_FALSE(j.contains("resolution"));
}

TEST(PowerWindowTest, ASpanInsideTheRunLeavesOutWhatCameBefore) {
  std::vector<EnergyPoint> points = stepped_counter();
  // A setup burst before the measured span: 500 J in the first 100 ms.
  for (EnergyPoint& p : points) p.joules += p.t_ns >= 100'000'000 ? 500.0 : 0.0;
  PowerSummary s;
  summarize_energy(points, 400'000'000, 900'000'000, s);
  EXPECT_DOUBLE_EQ(s.energy_joules, 680.0 - 580.0);
  EXPECT_DOUBLE_EQ(s.average_watts, 200.0);
  EXPECT_LE(s.peak_watts, 240.0);
  // An end between samples is interpolated: the counter reads 80 J at 400 and 450 ms,
  // so at 425 ms too.
  PowerSummary t;
  summarize_energy(points, 425'000'000, 1'000'000'000, t);
  EXPECT_DOUBLE_EQ(t.energy_joules, 700.0 - 580.0);
  // A span shorter than the window: the peak is its average.
  PowerSummary u;
  summarize_energy(points, 500'000'000, 600'000'000, u);
  EXPECT_DOUBLE_EQ(u.peak_watts, u.average_watts);
  EXPECT_DOUBLE_EQ(u.energy_joules, 20.0);
}

}  // namespace
}  // namespace tandem
