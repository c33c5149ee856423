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

// HTA's merge_kernel_intervals, in place: sorted by start, a row opens a new group when
// it starts after every earlier row has ended; a group spans [its first start, its latest
// end]. The sort is not stable (nor is pandas'): rows tied at one start merge alike
// unless one is inverted, which HTA's order decides too. In place and without a sort
// buffer: a 1 GB trace's kernels are tens of MB of intervals.
void merge(std::vector<UsInterval>& rows) {
  std::sort(rows.begin(), rows.end(), [](const UsInterval& a, const UsInterval& b) {
    return a.ts != b.ts ? a.ts < b.ts : a.end < b.end;
  });
  std::size_t groups = 0;
  double latest_end = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const UsInterval r = rows[k];
    if (groups == 0 || r.ts > latest_end) {
      rows[groups++] = r;
    } else {
      rows[groups - 1].end = std::max(rows[groups - 1].end, r.end);
    }
    latest_end = std::max(latest_end, r.end);
  }
  rows.resize(groups);
}

// The kernel span and busy time of the union of several merged lists (HTA's temporal
// breakdown: last end - first start, less the merged time), walking them in start order
// as merge() would walk their rows, without building the union.
struct Union {
  double first_ts = 0, last_end = 0, busy = 0;
  bool empty = true;
};
Union union_of_merged(const std::vector<const std::vector<UsInterval>*>& lists) {
  std::vector<std::size_t> at(lists.size(), 0);
  Union u;
  UsInterval group{};
  double latest_end = -std::numeric_limits<double>::infinity();
  for (;;) {
    std::size_t best = lists.size();
    for (std::size_t l = 0; l < lists.size(); ++l) {
      if (at[l] < lists[l]->size() &&
          (best == lists.size() || (*lists[l])[at[l]].ts < (*lists[best])[at[best]].ts)) {
        best = l;
      }
    }
    if (best == lists.size()) break;
    const UsInterval r = (*lists[best])[at[best]++];
    if (u.empty || r.ts > latest_end) {
      if (!u.empty) u.busy += group.end - group.ts;
      if (u.empty) u.first_ts = r.ts;
      u.empty = false;
      group = r;
    } else {
      group.end = std::max(group.end, r.end);
    }
    latest_end = std::max(latest_end, r.end);
  }
  if (!u.empty) {
    u.busy += group.end - group.ts;
    u.last_end = group.end;
  }
  return u;
}

double total(const std::vector<UsInterval>& merged) {
  double sum = 0;
  for (const UsInterval& i : merged) sum += i.end - i.ts;
  return sum;
}

// HTA's sweep: +1/-1 at communication starts/ends, +2/-2 at compute's; the time during
// which the running sum is 3. Ties at one instant add nothing whatever their order.
double overlap(const std::vector<UsInterval>& comm, const std::vector<UsInterval>& comp) {
  const auto ends_sorted = [](const std::vector<UsInterval>& v) {
    return std::is_sorted(v.begin(), v.end(),
                          [](const UsInterval& a, const UsInterval& b) { return a.end < b.end; });
  };
  if (ends_sorted(comm) && ends_sorted(comp)) {
    // The usual case (no inverted group): starts and ends of both lists are four sorted
    // sequences; walk them in time order instead of sorting the points.
    struct Seq {
      const std::vector<UsInterval>* v;
      bool end;
      int delta;
      std::size_t at = 0;
      double time() const { return end ? (*v)[at].end : (*v)[at].ts; }
      bool done() const { return at >= v->size(); }
    };
    Seq seqs[4] = {{&comm, false, 1}, {&comm, true, -1}, {&comp, false, 2}, {&comp, true, -2}};
    const auto next = [&]() -> Seq* {
      Seq* best = nullptr;
      for (Seq& s : seqs) {
        if (!s.done() && (best == nullptr || s.time() < best->time())) best = &s;
      }
      return best;
    };
    double sum = 0;
    int running = 0;
    Seq* at = next();
    while (at != nullptr) {
      const double t = at->time();
      running += at->delta;
      ++at->at;
      at = next();
      if (at != nullptr && running == 3) sum += at->time() - t;
    }
    return sum;
  }
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
  std::sort(points.begin(), points.end());  // ties add nothing, whatever their order
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

LaunchIndex::LaunchIndex(std::vector<Launch> launches) : launches_(std::move(launches)) {
  std::sort(launches_.begin(), launches_.end(), [](const Launch& a, const Launch& b) {
    return a.correlation != b.correlation ? a.correlation < b.correlation : a.start_ns < b.start_ns;
  });
}

const Launch* LaunchIndex::find(std::int64_t correlation) const {
  auto it = std::lower_bound(launches_.begin(), launches_.end(), correlation,
                             [](const Launch& l, std::int64_t c) { return l.correlation < c; });
  return it != launches_.end() && it->correlation == correlation ? &*it : nullptr;
}

HtaCpuSide::HtaCpuSide(const LaunchIndex& launches, const std::vector<StepWindow>& step_marks,
                       bool fractional_ts, bool has_cpu_events)
    : launches_(launches),
      last_start_(-std::numeric_limits<double>::infinity()),
      last_end_(std::numeric_limits<double>::infinity()),
      fractional_ts_(fractional_ts),
      filters_(has_cpu_events) {
  if (!step_marks.empty()) last_end_ = -std::numeric_limits<double>::infinity();
  for (const StepWindow& m : step_marks) {
    const UsInterval i = hta_interval(fractional_ts, m.start_ns, m.end_ns);
    last_start_ = std::max(last_start_, i.ts);
    last_end_ = std::max(last_end_, i.end);
  }
}

HtaRankModes hta_overlap(const HtaInput& input) {
  const HtaCpuSide& cpu = *input.cpu;
  const bool round = cpu.fractional_ts();
  const std::vector<RawEvent>& events = *input.events;
  const std::vector<std::uint8_t>& types = *input.types;
  const auto compute_mode = [&](auto&& keep_cpu) {
    HtaOverlap out;
    // Compute and communication kernels; the rest (memory, other) only for idle time.
    std::vector<UsInterval> comm, comp, rest;
    const std::size_t n = input.subset != nullptr ? input.subset->size() : events.size();
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t k = input.subset != nullptr ? (*input.subset)[j] : j;
      const RawEvent& e = events[k];
      if (types[k] == kNotHere || e.stream == -1) continue;  // HTA's gpu_kernels: stream != -1
      const UsInterval i = hta_interval(round, e.start_ns, e.end_ns);
      if (cpu.filters()) {
        const bool gpu = e.stream >= 0 && e.correlation >= 0;
        if (gpu) {
          // The earliest CPU event carrying the correlation: a later one passes only if it does.
          const Launch* l = cpu.launches().find(e.correlation);
          if (l == nullptr) continue;
          const double ts = hta_us(l->start_ns);
          if (!keep_cpu(round ? std::ceil(ts) : ts)) continue;
        } else if (!keep_cpu(i.ts)) {
          continue;
        }
      }
      ++out.kernels;
      const auto type = static_cast<HtaKernelType>(types[k]);
      (type == HtaKernelType::kCommunication   ? comm
       : type == HtaKernelType::kComputation ? comp
                                              : rest)
          .push_back(i);
    }
    merge(comm);
    merge(comp);
    merge(rest);
    out.comm_us = total(comm);
    out.compute_us = total(comp);
    out.overlap_us = overlap(comm, comp);
    // Every kernel merged: the merged lists together (the same union as merging every
    // kernel at once, except around inverted intervals, which HTA's order decides anyway).
    const Union all = union_of_merged({&comm, &comp, &rest});
    if (!all.empty) out.idle_us = (all.last_end - all.first_ts) - all.busy;
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
