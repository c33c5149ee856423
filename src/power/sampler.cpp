#include <algorithm>

#include "analysis/statistics.h"
#include "core/clock.h"
#include "core/thread_name.h"
#include "power/power.h"

namespace tandem {

void to_json(nlohmann::json& j, const PowerSummary& s) {
  j = {{"source", s.source},         {"average_watts", s.average_watts},
       {"peak_watts", s.peak_watts}, {"energy_joules", s.energy_joules},
       {"samples", s.samples},       {"interval_ms", s.interval_ms},
       {"peak_window_ms", s.peak_window_ms}};
  if (s.counter_step_ms) j["counter_step_ms"] = *s.counter_step_ms;
  if (s.resolution) j["resolution"] = *s.resolution;
  if (s.average_sm_clock_mhz) j["average_sm_clock_mhz"] = *s.average_sm_clock_mhz;
  if (s.peak_temperature_c) j["peak_temperature_c"] = *s.peak_temperature_c;
}

PowerSampler::PowerSampler(std::vector<std::unique_ptr<PowerSource>> sources,
                           std::chrono::milliseconds interval)
    : sources_(std::move(sources)), interval_(interval) {
  last_joules_.resize(sources_.size());
  start_joules_.resize(sources_.size());
  last_change_ns_.resize(sources_.size());
  change_gaps_.resize(sources_.size());
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
      last_change_ns_[i] = 0;
      change_gaps_[i].clear();
    }
    running_ = true;
  }
  if (sources_.empty()) return;
  thread_ = std::thread([this] {
    name_this_thread("tandem power");
    std::unique_lock lock(mutex_);
    while (!cv_.wait_for(lock, interval_, [&] { return !running_; })) {
      lock.unlock();
      sample_now();
      lock.lock();
    }
  });
}

namespace {

// The energy at t by linear interpolation between the points around it (points sorted,
// t within their span).
double energy_at(const std::vector<EnergyPoint>& points, std::int64_t t) {
  auto after = std::lower_bound(points.begin(), points.end(), t,
                                [](const EnergyPoint& p, std::int64_t v) { return p.t_ns < v; });
  if (after == points.end()) return points.back().joules;
  if (after == points.begin() || after->t_ns == t) return after->joules;
  const EnergyPoint& before = *(after - 1);
  const double f = static_cast<double>(t - before.t_ns) / static_cast<double>(after->t_ns - before.t_ns);
  return before.joules + f * (after->joules - before.joules);
}

std::int64_t median(std::vector<std::int64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// A counter's step from the gaps between the moments its reading changed: their median,
// 0 (not known) with fewer than two.
std::int64_t step_of(std::vector<std::int64_t> gaps) {
  return gaps.size() >= 2 ? median(std::move(gaps)) : 0;
}

// The counter's step over `points`.
std::int64_t counter_step_ns(const std::vector<EnergyPoint>& points) {
  std::vector<std::int64_t> gaps;
  std::int64_t last_change = -1;
  for (std::size_t j = 1; j < points.size(); ++j) {
    if (points[j].joules == points[j - 1].joules) continue;
    if (last_change >= 0) gaps.push_back(points[j].t_ns - last_change);
    last_change = points[j].t_ns;
  }
  return step_of(std::move(gaps));
}

// The average power over the shortest window of at least `window` ns that ends at
// points[j] (over everything before it where that is shorter).
double trailing_watts(const std::vector<EnergyPoint>& points, std::size_t j, std::int64_t window) {
  std::size_t i = j;
  while (i > 0 && points[j].t_ns - points[i].t_ns < window) --i;
  const double seconds = static_cast<double>(points[j].t_ns - points[i].t_ns) / 1e9;
  return seconds > 0 ? (points[j].joules - points[i].joules) / seconds : 0;
}

constexpr std::size_t kRecentGaps = 15;

}  // namespace

std::int64_t peak_window_ns(std::int64_t counter_step_ns) {
  return std::max<std::int64_t>(std::chrono::nanoseconds(kPeakWindow).count(),
                                kPeakWindowSteps * counter_step_ns);
}

void PowerSampler::sample_now() {
  std::lock_guard lock(mutex_);
  const std::int64_t t = now_ns();
  if (t <= last_t_ns_) return;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const double joules = sources_[i]->energy_joules();
    const PowerGauges g = sources_[i]->gauges();
    if (joules != last_joules_[i]) {
      std::vector<std::int64_t>& gaps = change_gaps_[i];
      if (last_change_ns_[i] != 0) gaps.push_back(t - last_change_ns_[i]);
      if (gaps.size() > kRecentGaps) gaps.erase(gaps.begin());
      last_change_ns_[i] = t;
    }
    // The trailing window: back to this source's newest sample at least a peak window
    // old, or to the start.
    EnergyPoint from{start_t_ns_, 0.0};
    const std::int64_t window = peak_window_ns(step_of(change_gaps_[i]));
    for (auto s = samples_.rbegin(); s != samples_.rend(); ++s) {
      if (s->source == static_cast<int>(i) && t - s->t_ns >= window) {
        from = {s->t_ns, s->joules};
        break;
      }
    }
    const double since = static_cast<double>(t - from.t_ns) / 1e9;
    samples_.push_back({.t_ns = t,
                        .watts = (joules - start_joules_[i] - from.joules) / since,
                        .joules = joules - start_joules_[i],
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
  std::int64_t begin = 0, end = 0;
  {
    std::lock_guard lock(mutex_);
    begin = start_t_ns_;
    end = last_t_ns_;
  }
  return summarize(begin, end);
}

std::vector<PowerSummary> PowerSampler::summarize(std::int64_t begin_ns, std::int64_t end_ns) const {
  std::lock_guard lock(mutex_);
  begin_ns = std::clamp(begin_ns, start_t_ns_, last_t_ns_);
  end_ns = std::clamp(end_ns, begin_ns, last_t_ns_);
  std::vector<PowerSummary> out;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    PowerSummary s{.source = sources_[i]->name(),
                   .interval_ms = static_cast<double>(interval_.count())};
    std::vector<EnergyPoint> all{{start_t_ns_, 0.0}};
    double clock_sum = 0;
    std::size_t clock_samples = 0;
    for (const PowerSample& sample : samples_) {
      if (sample.source != static_cast<int>(i)) continue;
      all.push_back({sample.t_ns, sample.joules});
      if (sample.t_ns < begin_ns || sample.t_ns > end_ns) continue;
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
    summarize_energy(all, begin_ns, end_ns, s);
    if (clock_samples > 0) s.average_sm_clock_mhz = clock_sum / static_cast<double>(clock_samples);
    out.push_back(s);
  }
  return out;
}

void summarize_energy(const std::vector<EnergyPoint>& points, std::int64_t begin_ns,
                      std::int64_t end_ns, PowerSummary& out) {
  if (points.empty() || end_ns < begin_ns) return;
  std::vector<EnergyPoint> span{{begin_ns, energy_at(points, begin_ns)}};
  for (const EnergyPoint& p : points) {
    if (p.t_ns > begin_ns && p.t_ns < end_ns) span.push_back(p);
  }
  span.push_back({end_ns, energy_at(points, end_ns)});
  const double seconds = static_cast<double>(end_ns - begin_ns) / 1e9;
  const std::int64_t step = counter_step_ns(points);
  const std::int64_t window = peak_window_ns(step);
  out.peak_window_ms = static_cast<double>(window) / 1e6;
  if (step > 0) {
    out.counter_step_ms = static_cast<double>(step) / 1e6;
    if (seconds > 0) out.resolution = static_cast<double>(step) / 1e9 / seconds;
  }
  out.energy_joules = span.back().joules - span.front().joules;
  out.average_watts = seconds > 0 ? out.energy_joules / seconds : 0;
  out.peak_watts = out.average_watts;
  for (std::size_t j = 1; j < span.size(); ++j) {
    if (span[j].t_ns - span.front().t_ns >= window) {
      out.peak_watts = std::max(out.peak_watts, trailing_watts(span, j, window));
    }
  }
}

std::vector<PowerSample> PowerSampler::samples() const {
  std::lock_guard lock(mutex_);
  return samples_;
}

}  // namespace tandem
