// Power and energy sampling. A PowerSource reads one kind of sensor (RAPL powercap for
// CPUs, power/nvml.h for NVIDIA GPUs); a PowerSampler polls sources on a thread of its
// own at a fixed interval and keeps the samples. No sensor means "unavailable", never 0.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

struct PowerSample {
  std::int64_t t_ns = 0;  // steady clock, the spans' clock
  // The average over the peak window (peak_window_ns) before t_ns, or since start() where
  // that is shorter: an energy counter advances in steps (NVML's every 100 ms on an
  // H200), so the difference between two 50 ms samples alone reads 0 W, then twice the
  // power.
  double watts = 0;
  double joules = 0;  // the source's energy since start()
  int source = 0;     // index into the sampler's sources
  // Read with the energy where the source has them (GPUs: NVML); absent elsewhere.
  std::optional<double> sm_clock_mhz;
  std::optional<double> temperature_c;
};

// Readings besides energy that some sources have.
struct PowerGauges {
  std::optional<double> sm_clock_mhz;
  std::optional<double> temperature_c;
};

class PowerSource {
 public:
  virtual ~PowerSource() = default;
  virtual std::string name() const = 0;  // "rapl package-0", "nvml gpu0"
  // Cumulative energy in joules since an arbitrary origin (wrap-around handled by the
  // source), read now.
  virtual double energy_joules() = 0;
  // The source's other readings now; none by default (RAPL has none).
  virtual PowerGauges gauges() { return {}; }
};

// RAPL zones under a powercap root (/sys/class/powercap, or a test fixture with the
// same layout): every directory "intel-rapl:N" (package) and "intel-rapl:N:M"
// (sub-zones such as dram) that has a readable energy_uj. Counters wrap at
// max_energy_range_uj; each source unwraps its own.
std::vector<std::unique_ptr<PowerSource>> discover_rapl(
    const std::filesystem::path& root = "/sys/class/powercap");

// Peak power is the highest average over a window of ten steps of the source's counter,
// and at least this long (docs/METRICS.md, "Power").
inline constexpr std::chrono::milliseconds kPeakWindow{250};
inline constexpr int kPeakWindowSteps = 10;
// The window for a counter that advances every `counter_step_ns` (0: not known).
std::int64_t peak_window_ns(std::int64_t counter_step_ns);

struct PowerSummary {
  std::string source;
  double average_watts = 0;  // energy_joules over the summarized span
  double peak_watts = 0;     // the highest average over the peak window in it (>= average)
  double energy_joules = 0;  // over the summarized span
  // How often the source's counter advanced (the median time between changes of its
  // reading over the whole interval; absent where it changed fewer than 3 times), the
  // peak window that gives, and the energy's resolution over the span: one step of the
  // counter against the span's length (a relative error bound).
  std::optional<double> counter_step_ms;
  double peak_window_ms = 0;
  std::optional<double> resolution;
  std::size_t samples = 0;
  double interval_ms = 0;
  // Over the samples, where the source reads them (written to JSON only then).
  std::optional<double> average_sm_clock_mhz;
  std::optional<double> peak_temperature_c;
};
void to_json(nlohmann::json& j, const PowerSummary& s);

// One source's cumulative energy at a time on the steady clock.
struct EnergyPoint {
  std::int64_t t_ns = 0;
  double joules = 0;
};
// Energy, average and peak power over [begin_ns, end_ns] from `points` (sorted by time,
// covering the span), with the counter's step and the resolution: the ends' energy
// interpolated linearly between points, the peak the highest average over a peak window
// ending at a point (the span's average where the span is shorter, and never below the
// average). Other fields are left as they are.
void summarize_energy(const std::vector<EnergyPoint>& points, std::int64_t begin_ns,
                      std::int64_t end_ns, PowerSummary& out);

class PowerSampler {
 public:
  PowerSampler(std::vector<std::unique_ptr<PowerSource>> sources,
               std::chrono::milliseconds interval);
  ~PowerSampler();

  bool available() const { return !sources_.empty(); }
  const std::vector<std::unique_ptr<PowerSource>>& sources() const { return sources_; }
  std::chrono::milliseconds interval() const { return interval_; }

  // Begins a measured interval (clears samples, starts the polling thread).
  void start();
  // Ends it; returns one summary per source over the whole interval.
  std::vector<PowerSummary> stop();
  // One summary per source over [begin_ns, end_ns] of the last interval (clamped to it):
  // energy interpolated between samples, so a span that starts after start() (the steps
  // after warm-up, say) leaves out the setup before it.
  std::vector<PowerSummary> summarize(std::int64_t begin_ns, std::int64_t end_ns) const;
  // One poll of every source now (the thread calls this; tests call it directly).
  void sample_now();
  std::vector<PowerSample> samples() const;

 private:
  std::vector<std::unique_ptr<PowerSource>> sources_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool running_ = false;
  std::thread thread_;
  std::vector<PowerSample> samples_;
  std::vector<double> last_joules_;  // the sources' readings at the last sample
  std::vector<double> start_joules_;
  // Per source: when its reading last changed, and the latest gaps between changes (the
  // samples' trailing window follows their median).
  std::vector<std::int64_t> last_change_ns_;
  std::vector<std::vector<std::int64_t>> change_gaps_;
  std::int64_t last_t_ns_ = 0;
  std::int64_t start_t_ns_ = 0;
};

}  // namespace tandem
