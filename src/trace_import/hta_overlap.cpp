#include "trace_import/hta_overlap.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace tandem {
namespace {

// An interval in HTA's float64 microseconds.
struct UsInterval {
  double ts = 0;
  double end = 0;
};

// HTA's merge_kernel_intervals: sorted by start, a row opens a new group when it starts
// after every earlier row has ended; a group spans [its first start, its latest end].
std::vector<UsInterval> merge(std::vector<UsInterval> rows) {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const UsInterval& a, const UsInterval& b) { return a.ts < b.ts; });
  std::vector<UsInterval> merged;
  double latest_end = -std::numeric_limits<double>::infinity();
  for (const UsInterval& r : rows) {
    if (merged.empty() || r.ts > latest_end) {
      merged.push_back(r);
    } else {
      merged.back().end = std::max(merged.back().end, r.end);
    }
    latest_end = std::max(latest_end, r.end);
  }
  return merged;
}

double total(const std::vector<UsInterval>& merged) {
  double sum = 0;
  for (const UsInterval& i : merged) sum += i.end - i.ts;
  return sum;
}

// HTA's sweep: +1/-1 at communication starts/ends, +2/-2 at compute's; the time during
// which the running sum is 3. Ties at one instant add nothing whatever their order.
double overlap(const std::vector<UsInterval>& comm, const std::vector<UsInterval>& comp) {
  std::vector<std::pair<double, int>> points;
  points.reserve(2 * (comm.size() + comp.size()));
  for (const UsInterval& i : comm) {
    points.emplace_back(i.ts, 1);
    points.emplace_back(i.end, -1);
  }
  for (const UsInterval& i : comp) {
    points.emplace_back(i.ts, 2);
    points.emplace_back(i.end, -2);
  }
  std::stable_sort(points.begin(), points.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  double sum = 0;
  int running = 0;
  for (std::size_t k = 0; k + 1 < points.size(); ++k) {
    running += points[k].second;
    if (running == 3) sum += points[k + 1].first - points[k].first;
  }
  return sum;
}

bool starts_with_nccl_kernel(std::string_view name) {
  return name.starts_with("nccl") && name.find("Kernel", 4) != std::string_view::npos;
}

}  // namespace

HtaKernelType hta_kernel_type(std::string_view name) {
  if (starts_with_nccl_kernel(name)) return HtaKernelType::kCommunication;
  if (name.starts_with("Memcpy") || name.starts_with("Memset") || name.starts_with("dma")) {
    return HtaKernelType::kMemory;
  }
  if (name.find("Memcpy") != std::string_view::npos || name.find("Sync") != std::string_view::npos) {
    return HtaKernelType::kOther;
  }
  return HtaKernelType::kComputation;
}

double hta_us(std::int64_t ns) {
  // Below 2^53 the int64 is exact as a double and IEEE division rounds correctly: the
  // double nearest ns / 1000, as Python's float() of the text.
  constexpr std::int64_t kExact = std::int64_t{1} << 53;
  if (ns > -kExact && ns < kExact) return static_cast<double>(ns) / 1000.0;
  // Python's float() of the decimal text: from_chars rounds correctly, as it does.
  char text[40];
  const unsigned long long magnitude =
      ns < 0 ? 0ULL - static_cast<unsigned long long>(ns) : static_cast<unsigned long long>(ns);
  const int n = std::snprintf(text, sizeof text, "%s%llu.%03llu", ns < 0 ? "-" : "",
                              magnitude / 1000, magnitude % 1000);
  double value = 0;
  std::from_chars(text, text + n, value);
  return value;
}

namespace {

UsInterval hta_interval(bool round, std::int64_t start_ns, std::int64_t end_ns) {
  const double ts = hta_us(start_ns);
  const double dur = hta_us(end_ns - start_ns);
  if (round) return UsInterval{std::ceil(ts), std::floor(ts + dur)};
  return UsInterval{ts, ts + dur};
}

}  // namespace

HtaCpuSide::HtaCpuSide(const std::vector<Launch>& launches,
                       const std::vector<StepWindow>& step_marks, bool fractional_ts,
                       bool has_cpu_events)
    : last_start_(-std::numeric_limits<double>::infinity()),
      last_end_(std::numeric_limits<double>::infinity()),
      fractional_ts_(fractional_ts),
      filters_(has_cpu_events) {
  if (!step_marks.empty()) last_end_ = -std::numeric_limits<double>::infinity();
  for (const StepWindow& m : step_marks) {
    const UsInterval i = hta_interval(fractional_ts, m.start_ns, m.end_ns);
    last_start_ = std::max(last_start_, i.ts);
    last_end_ = std::max(last_end_, i.end);
  }
  launches_.reserve(launches.size());
  for (const Launch& l : launches) {
    const double ts = hta_us(l.start_ns);
    launches_.emplace_back(l.correlation, fractional_ts ? std::ceil(ts) : ts);
  }
  std::sort(launches_.begin(), launches_.end());
}

template <typename Keep>
bool HtaCpuSide::launched(std::int64_t correlation, Keep&& keep) const {
  // The earliest start of the correlation's CPU events: a later one passes only if it does.
  auto it = std::lower_bound(launches_.begin(), launches_.end(),
                             std::pair{correlation, -std::numeric_limits<double>::infinity()});
  return it != launches_.end() && it->first == correlation && keep(it->second);
}

HtaRankModes hta_overlap(const HtaInput& input) {
  const HtaCpuSide& cpu = *input.cpu;
  const bool round = cpu.fractional_ts();
  // HTA's gpu_kernels (stream != -1), their times in HTA's arithmetic once for both modes.
  std::vector<std::pair<const HtaEvent*, UsInterval>> kernels;
  kernels.reserve(input.events.size());
  for (const HtaEvent& e : input.events) {
    if (e.stream != -1) kernels.emplace_back(&e, hta_interval(round, e.start_ns, e.end_ns));
  }
  const auto compute_mode = [&](auto&& keep_cpu) {
    HtaOverlap out;
    std::vector<UsInterval> comm, comp, all;
    for (const auto& [event, i] : kernels) {
      const HtaEvent& e = *event;
      if (cpu.filters()) {
        const bool gpu = e.stream >= 0 && e.correlation >= 0;
        if (gpu ? !cpu.launched(e.correlation, keep_cpu) : !keep_cpu(i.ts)) continue;
      }
      ++out.kernels;
      all.push_back(i);
      if (e.type == HtaKernelType::kCommunication) comm.push_back(i);
      if (e.type == HtaKernelType::kComputation) comp.push_back(i);
    }
    const std::vector<UsInterval> comm_merged = merge(std::move(comm));
    const std::vector<UsInterval> comp_merged = merge(std::move(comp));
    const std::vector<UsInterval> all_merged = merge(std::move(all));
    out.comm_us = total(comm_merged);
    out.compute_us = total(comp_merged);
    out.overlap_us = overlap(comm_merged, comp_merged);
    if (!all_merged.empty()) {
      out.idle_us = (all_merged.back().end - all_merged.front().ts) - total(all_merged);
    }
    out.defined = out.comm_us != 0;
    if (out.defined) out.hidden_pct = std::nearbyint(100 * (out.overlap_us / out.comm_us) * 100) / 100;
    return out;
  };
  HtaRankModes modes;
  modes.last_step_out = compute_mode([&](double ts) { return ts < cpu.last_start(); });
  modes.last_step_in = compute_mode([&](double ts) { return ts <= cpu.last_end(); });
  return modes;
}

}  // namespace tandem
