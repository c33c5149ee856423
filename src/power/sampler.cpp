#include "analysis/statistics.h"
#include "core/clock.h"
#include "power/power.h"

namespace tandem {

void to_json(nlohmann::json& j, const PowerSummary& s) {
  j = {{"source", s.source},         {"average_watts", s.average_watts},
       {"peak_watts", s.peak_watts}, {"energy_joules", s.energy_joules},
       {"samples", s.samples},       {"interval_ms", s.interval_ms}};
  if (s.average_sm_clock_mhz) j["average_sm_clock_mhz"] = *s.average_sm_clock_mhz;
  if (s.peak_temperature_c) j["peak_temperature_c"] = *s.peak_temperature_c;
}

PowerSampler::PowerSampler(std::vector<std::unique_ptr<PowerSource>> sources,
                           std::chrono::milliseconds interval)
    : sources_(std::move(sources)), interval_(interval) {
  last_joules_.resize(sources_.size());
  start_joules_.resize(sources_.size());
}

PowerSampler::~PowerSampler() {
  if (thread_.joinable()) stop();
}

void PowerSampler::start() {
  {
    std::lock_guard lock(mutex_);
    samples_.clear();
    start_t_ns_ = last_t_ns_ = now_ns();
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      start_joules_[i] = last_joules_[i] = sources_[i]->energy_joules();
    }
    running_ = true;
  }
  if (sources_.empty()) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!cv_.wait_for(lock, interval_, [&] { return !running_; })) {
      lock.unlock();
      sample_now();
      lock.lock();
    }
  });
}

void PowerSampler::sample_now() {
  std::lock_guard lock(mutex_);
  const std::int64_t t = now_ns();
  const double dt_s = static_cast<double>(t - last_t_ns_) / 1e9;
  if (dt_s <= 0) return;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const double joules = sources_[i]->energy_joules();
    const PowerGauges g = sources_[i]->gauges();
    samples_.push_back({.t_ns = t,
                        .watts = (joules - last_joules_[i]) / dt_s,
                        .source = static_cast<int>(i),
                        .sm_clock_mhz = g.sm_clock_mhz,
                        .temperature_c = g.temperature_c});
    last_joules_[i] = joules;
  }
  last_t_ns_ = t;
}

std::vector<PowerSummary> PowerSampler::stop() {
  {
    std::lock_guard lock(mutex_);
    running_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  sample_now();
  std::lock_guard lock(mutex_);
  std::vector<PowerSummary> out;
  const double seconds = static_cast<double>(last_t_ns_ - start_t_ns_) / 1e9;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    PowerSummary s{.source = sources_[i]->name(),
                   .interval_ms = static_cast<double>(interval_.count())};
    s.energy_joules = last_joules_[i] - start_joules_[i];
    s.average_watts = seconds > 0 ? s.energy_joules / seconds : 0;
    double clock_sum = 0;
    std::size_t clock_samples = 0;
    for (const auto& sample : samples_) {
      if (sample.source != static_cast<int>(i)) continue;
      s.peak_watts = std::max(s.peak_watts, sample.watts);
      ++s.samples;
      if (sample.sm_clock_mhz) {
        clock_sum += *sample.sm_clock_mhz;
        ++clock_samples;
      }
      if (sample.temperature_c) {
        s.peak_temperature_c =
            std::max(s.peak_temperature_c.value_or(*sample.temperature_c), *sample.temperature_c);
      }
    }
    if (clock_samples > 0) s.average_sm_clock_mhz = clock_sum / static_cast<double>(clock_samples);
    out.push_back(s);
  }
  return out;
}

std::vector<PowerSample> PowerSampler::samples() const {
  std::lock_guard lock(mutex_);
  return samples_;
}

}  // namespace tandem
