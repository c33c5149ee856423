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
