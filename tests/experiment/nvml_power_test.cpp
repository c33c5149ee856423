// NVML power discovery where the library is missing (as on machines without an NVIDIA
// driver), against a fake libnvidia-ml (tests/fixtures/fake_nvml.cpp), and the sampler's
// handling of the extra GPU readings.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "core/error.h"
#include "power/nvml.h"
#include "power/power.h"

namespace tandem {
namespace {

// What f throws as a usage error (one line for the user).
std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no UsageError";
}

TEST(NvmlPowerTest, MissingLibraryIsUnavailableNotZero) {
  NvmlDiscovery found = discover_nvml("libnvidia-ml-does-not-exist.so.1");
  EXPECT_TRUE(found.sources.empty());
  EXPECT_NE(found.status.find("not found"), std::string::npos) << found.status;

  PowerSampler sampler(std::move(found.sources), std::chrono::milliseconds(10));
  EXPECT_FALSE(sampler.available());
  sampler.start();
  // Unavailable means no summary at all, never a 0 W one.
  EXPECT_TRUE(sampler.stop().empty());
}

TEST(NvmlPowerTest, DefaultDiscoveryNeverThrows) {
  // On a machine with a driver this finds GPUs; without one it says why there are none.
  const NvmlDiscovery found = discover_nvml();
  EXPECT_FALSE(found.status.empty());
  for (const auto& s : found.sources) EXPECT_EQ(s->name().rfind("nvml gpu", 0), 0u) << s->name();
}

// A source with the gauges NVML gives: energy grows 1 J per read, clock and temperature
// change between reads.
class GaugedSource final : public PowerSource {
 public:
  std::string name() const override { return "fake gpu"; }
  double energy_joules() override { return joules_ += 1; }
  PowerGauges gauges() override {
    ++reads_;
    return {.sm_clock_mhz = 1000.0 + 100 * reads_, .temperature_c = 40.0 + reads_};
  }

 private:
  double joules_ = 0;
  int reads_ = 0;
};

TEST(NvmlPowerTest, SamplerSummarizesClockAndTemperature) {
  std::vector<std::unique_ptr<PowerSource>> sources;
  sources.push_back(std::make_unique<GaugedSource>());
  PowerSampler sampler(std::move(sources), std::chrono::hours(1));
  sampler.start();
  sampler.sample_now();                 // gauges read 1: 1100 MHz, 41 C
  const auto summary = sampler.stop();  // gauges read 2: 1200 MHz, 42 C
  ASSERT_EQ(summary.size(), 1u);
  ASSERT_TRUE(summary[0].average_sm_clock_mhz.has_value());
  EXPECT_DOUBLE_EQ(*summary[0].average_sm_clock_mhz, 1150.0);
  ASSERT_TRUE(summary[0].peak_temperature_c.has_value());
  EXPECT_DOUBLE_EQ(*summary[0].peak_temperature_c, 42.0);
  nlohmann::json j = summary[0];
  EXPECT_EQ(j["average_sm_clock_mhz"], 1150.0);

  // RAPL-like sources have no gauges: the JSON has no such keys.
  PowerSummary plain{.source = "rapl"};
  nlohmann::json k = plain;
  EXPECT_FALSE(k.contains("average_sm_clock_mhz"));
  EXPECT_FALSE(k.contains("peak_temperature_c"));
}

}  // namespace
}  // namespace tandem

#ifdef TANDEM_FAKE_NVML
namespace tandem {
namespace {

TEST(NvmlPowerTest, ReadsEnergyCounterOrIntegratesPower) {
  NvmlDiscovery found = discover_nvml(TANDEM_FAKE_NVML);
  ASSERT_EQ(found.sources.size(), 2u) << found.status;
  EXPECT_EQ(found.status, "2 GPU(s)");
  EXPECT_EQ(found.sources[0]->name(), "nvml gpu0 (Fake H100)");
  EXPECT_EQ(found.sources[1]->name(), "nvml gpu1 (Fake H100) [power integrated]");

  // The counter: 1 J more at every read, from 0 at the first.
  PowerSource& counter = *found.sources[0];
  EXPECT_DOUBLE_EQ(counter.energy_joules(), 0.0);
  EXPECT_DOUBLE_EQ(counter.energy_joules(), 1.0);
  EXPECT_DOUBLE_EQ(counter.energy_joules(), 2.0);
  const PowerGauges g = counter.gauges();
  EXPECT_EQ(g.sm_clock_mhz, 1755.0);
  EXPECT_EQ(g.temperature_c, 61.0);

  // Integration: 250 W over the time between reads.
  PowerSource& integrated = *found.sources[1];
  EXPECT_DOUBLE_EQ(integrated.energy_joules(), 0.0);
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const double joules = integrated.energy_joules();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(joules, 0.0);
  EXPECT_LE(joules, 250.0 * (seconds + 0.005));  // the reads bracket the sleep loosely
  EXPECT_GE(joules, 250.0 * 0.040 * 0.9);

  // Through the sampler: summaries with the clock and temperature.
  PowerSampler sampler(std::move(found.sources), std::chrono::hours(1));
  sampler.start();
  sampler.sample_now();
  const auto summary = sampler.stop();
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary[0].average_sm_clock_mhz, 1755.0);
  EXPECT_EQ(summary[1].peak_temperature_c, 61.0);
  EXPECT_GT(summary[0].energy_joules, 0.0);
}

// The fake library's own controls, in the instance NVML's loader opened (dlopen of the
// same path returns it).
struct FakeLimits {
  void* handle = dlopen(TANDEM_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  void allow(bool on) const {
    reinterpret_cast<void (*)(int)>(dlsym(handle, "fake_nvml_allow_limits"))(on ? 1 : 0);
  }
  unsigned int limit_mw(int gpu) const {
    return reinterpret_cast<unsigned int (*)(int)>(dlsym(handle, "fake_nvml_limit_mw"))(gpu);
  }
  ~FakeLimits() {
    allow(false);
    dlclose(handle);
  }
};

TEST(NvmlPowerLimitsTest, RefusedInOneLineWithoutTheRightToChangeThem) {
  FakeLimits fake;
  fake.allow(false);
  const std::string error = usage_error([] { NvmlPowerLimits limits(TANDEM_FAKE_NVML); });
  EXPECT_NE(error.find("--sweep power-cap: may not change gpu0's power limit"), std::string::npos)
      << error;
  EXPECT_NE(error.find("Insufficient Permissions"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
  EXPECT_EQ(fake.limit_mw(0), 700'000u);
  EXPECT_NE(usage_error([] {
              NvmlPowerLimits limits("libtandem-no-such-nvml.so");
            }).find("--sweep power-cap: cannot reach the GPUs' power limits"),
            std::string::npos);
}

TEST(NvmlPowerLimitsTest, SetsEveryGpuAndPutsTheLimitsBackAsFound) {
  FakeLimits fake;
  fake.allow(true);
  {
    NvmlPowerLimits limits(TANDEM_FAKE_NVML);
    ASSERT_EQ(limits.gpus().size(), 2u);
    EXPECT_EQ(limits.gpus()[1].name, "gpu1 (Fake H100)");
    EXPECT_EQ(limits.gpus()[0].found_w, 700.0);
    EXPECT_EQ(limits.gpus()[0].min_w, 200.0);
    EXPECT_EQ(limits.gpus()[0].max_w, 700.0);
    limits.set(350);
    EXPECT_EQ(fake.limit_mw(0), 350'000u);
    EXPECT_EQ(fake.limit_mw(1), 350'000u);
    // Outside a GPU's range: one line naming it, and nothing set.
    const std::string error = usage_error([&] { limits.set(150); });
    EXPECT_EQ(error, "--sweep power-cap: 150 W outside gpu0 (Fake H100)'s range, 200 to 700 W");
    EXPECT_EQ(fake.limit_mw(0), 350'000u);
    limits.restore();
    EXPECT_EQ(fake.limit_mw(0), 700'000u);
    limits.set(250.5);
    EXPECT_EQ(fake.limit_mw(1), 250'500u);
  }
  // Gone: put back.
  EXPECT_EQ(fake.limit_mw(0), 700'000u);
  EXPECT_EQ(fake.limit_mw(1), 700'000u);
  // Also when a failure unwinds.
  try {
    NvmlPowerLimits limits(TANDEM_FAKE_NVML);
    limits.set(400);
    throw RuntimeError("a point failed");
  } catch (const RuntimeError&) {
  }
  EXPECT_EQ(fake.limit_mw(0), 700'000u);
  // The run's GPUs only (by PCI bus id): the other keeps its limit.
  {
    NvmlPowerLimits one(TANDEM_FAKE_NVML, {"00000000:02:00.0"});
    ASSERT_EQ(one.gpus().size(), 1u);
    EXPECT_EQ(one.gpus()[0].name, "cuda device 0 (PCI 00000000:02:00.0) (Fake H100)");
    one.set(300);
    EXPECT_EQ(fake.limit_mw(0), 700'000u);
    EXPECT_EQ(fake.limit_mw(1), 300'000u);
  }
  EXPECT_EQ(fake.limit_mw(1), 700'000u);
  EXPECT_NE(usage_error([] {
              NvmlPowerLimits none(TANDEM_FAKE_NVML, {"00000000:09:00.0"});
            }).find("cannot read cuda device 0 (PCI 00000000:09:00.0)'s power limit: Not Found"),
            std::string::npos);
  // A signal's cleanup: put back, and the sweep's next set is refused.
  NvmlPowerLimits limits(TANDEM_FAKE_NVML);
  limits.set(300);
  limits.close();
  EXPECT_EQ(fake.limit_mw(1), 700'000u);
  EXPECT_THROW(limits.set(300), RuntimeError);
  EXPECT_EQ(fake.limit_mw(1), 700'000u);
}

}  // namespace
}  // namespace tandem
#endif

namespace tandem {
namespace {

TEST(NvmlPowerLimitsTest, WattsAreParsedWithTheirUnit) {
  EXPECT_EQ(parse_watts("300W", "--sweep power-cap"), 300.0);
  EXPECT_EQ(parse_watts("300", "--sweep power-cap"), 300.0);
  EXPECT_EQ(parse_watts("0.45kW", "--sweep power-cap"), 450.0);
  for (const char* bad : {"0W", "-5", "W", "300 W", "1e9", "200kW", "nanW", ""}) {
    const std::string error = usage_error([&] { parse_watts(bad, "--sweep power-cap"); });
    EXPECT_EQ(error.rfind("--sweep power-cap: must be a power", 0), 0u) << bad << ": " << error;
  }
}

}  // namespace
}  // namespace tandem
