// Note [skew and transfer] is in waiting.h.
#include "analysis/waiting.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "analysis/intervals.h"
#include "core/parse.h"

namespace tandem {
namespace {

constexpr std::size_t kKinds = static_cast<std::size_t>(SpanKind::kOther) + 1;

// What identifies one collective across its participants, but for the occurrence.
using CollectiveKey = std::tuple<std::uint32_t, std::int32_t, SpanKind, NameId, std::int32_t>;
CollectiveKey key_of(const Span& s) { return {s.group, s.step, s.kind, s.name, s.tag}; }

// One rank's comm span with the last arrival of its collective.
struct Segmented {
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t last_arrival_ns = 0;  // <= start_ns: no skew
  SpanKind kind = SpanKind::kOther;
};

// The collective instances: spans grouped by key and occurrence. Fills each span's last
// arrival, the ranks' last-arrival counts and the kinds' spreads.
struct Instances {
  std::vector<std::int64_t> last_arrival;  // by index into the comm spans
  std::int32_t collectives = 0;
  std::map<std::int32_t, std::pair<std::int32_t, double>> last_by_rank;  // count, Σ late
  std::array<std::int32_t, kKinds> kind_count{};
  std::array<double, kKinds> kind_spread{};
};

}  // namespace

std::vector<std::vector<std::size_t>> match_collectives(const std::vector<const Span*>& comm) {
  // (key, rank) -> indices in start order, so the n-th of each rank pairs up.
  std::map<CollectiveKey, std::map<std::int32_t, std::vector<std::size_t>>> by_key;
  for (std::size_t i = 0; i < comm.size(); ++i) {
    if (is_collective(comm[i]->kind)) by_key[key_of(*comm[i])][comm[i]->rank].push_back(i);
  }
  std::vector<std::vector<std::size_t>> instances;
  for (auto& [key, ranks] : by_key) {
    std::size_t occurrences = 0;
    for (auto& [rank, indices] : ranks) {
      std::sort(indices.begin(), indices.end(), [&](std::size_t a, std::size_t b) {
        return comm[a]->start_ns < comm[b]->start_ns;
      });
      occurrences = std::max(occurrences, indices.size());
    }
    for (std::size_t n = 0; n < occurrences; ++n) {
      std::vector<std::size_t> members;
      for (const auto& [rank, indices] : ranks) {
        if (n < indices.size()) members.push_back(indices[n]);
      }
      if (members.size() >= 2) instances.push_back(std::move(members));
    }
  }
  return instances;
}

namespace {

Instances match_instances(const std::vector<const Span*>& comm) {
  Instances out;
  out.last_arrival.assign(comm.size(), 0);
  for (std::size_t i = 0; i < comm.size(); ++i) out.last_arrival[i] = comm[i]->start_ns;
  for (const std::vector<std::size_t>& members : match_collectives(comm)) {
    std::size_t last_member = members.front();
    std::int64_t first = comm[last_member]->start_ns;
    for (std::size_t m : members) {
      first = std::min(first, comm[m]->start_ns);
      if (comm[m]->start_ns > comm[last_member]->start_ns) last_member = m;
    }
    const std::int64_t last = comm[last_member]->start_ns;
    std::int64_t next_latest = first;
    for (std::size_t m : members) {
      if (m != last_member) next_latest = std::max(next_latest, comm[m]->start_ns);
    }
    for (std::size_t m : members) out.last_arrival[m] = last;
    ++out.collectives;
    const auto kind = static_cast<std::size_t>(comm[members.front()]->kind);
    ++out.kind_count[kind];
    out.kind_spread[kind] += static_cast<double>(last - first);
    if (last > next_latest) {  // strictly last: a tie keeps nobody waiting on one rank
      auto& [count, late] = out.last_by_rank[comm[last_member]->rank];
      ++count;
      late += static_cast<double>(last - next_latest);
    }
  }
  return out;
}

// Blocked time of one rank by category and kind (Note [skew and transfer]).
struct Attribution {
  std::int64_t blocked = 0, skew = 0, transfer = 0, other = 0;
  std::array<std::int64_t, kKinds> kind_skew{}, kind_transfer{};
};

Attribution attribute(const std::vector<Interval>& blocked, const std::vector<Segmented>& comm) {
  // Boundary events: +1/-1 on the blocked count, and on each kind's skew or transfer count.
  enum class What : std::uint8_t { kBlocked, kSkew, kTransfer };
  struct Event {
    std::int64_t t;
    int delta;
    What what;
    SpanKind kind;
  };
  std::vector<Event> events;
  events.reserve(2 * blocked.size() + 4 * comm.size());
  auto add = [&](std::int64_t from, std::int64_t to, What what, SpanKind kind) {
    if (to <= from) return;
    events.push_back({from, +1, what, kind});
    events.push_back({to, -1, what, kind});
  };
  for (const Interval& b : blocked) add(b.start_ns, b.end_ns, What::kBlocked, SpanKind::kOther);
  for (const Segmented& c : comm) {
    const std::int64_t split = std::clamp(c.last_arrival_ns, c.start_ns, c.end_ns);
    add(c.start_ns, split, What::kSkew, c.kind);
    add(split, c.end_ns, What::kTransfer, c.kind);
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.t < b.t; });

  Attribution out;
  int blocked_depth = 0;
  std::array<int, kKinds> skew_depth{}, transfer_depth{};
  auto first_active = [](const std::array<int, kKinds>& depth) -> int {
    for (std::size_t k = 0; k < kKinds; ++k) {
      if (depth[k] > 0) return static_cast<int>(k);
    }
    return -1;
  };
  for (std::size_t i = 0; i < events.size();) {
    const std::int64_t t = events[i].t;
    for (; i < events.size() && events[i].t == t; ++i) {
      const Event& e = events[i];
      const auto k = static_cast<std::size_t>(e.kind);
      if (e.what == What::kBlocked) blocked_depth += e.delta;
      if (e.what == What::kSkew) skew_depth[k] += e.delta;
      if (e.what == What::kTransfer) transfer_depth[k] += e.delta;
    }
    if (i == events.size() || blocked_depth <= 0) continue;
    const std::int64_t length = events[i].t - t;
    out.blocked += length;
    if (const int k = first_active(skew_depth); k >= 0) {
      out.skew += length;
      out.kind_skew[static_cast<std::size_t>(k)] += length;
    } else if (const int k2 = first_active(transfer_depth); k2 >= 0) {
      out.transfer += length;
      out.kind_transfer[static_cast<std::size_t>(k2)] += length;
    } else {
      out.other += length;
    }
  }
  return out;
}

double ms(double ns) { return ns / 1e6; }

}  // namespace

const RankWaiting* WaitingAnalysis::rank(std::int32_t r) const {
  for (const RankWaiting& w : ranks) {
    if (w.rank == r) return &w;
  }
  return nullptr;
}

WaitingAnalysis explain_waiting(const Timeline& timeline, std::int32_t first_step) {
  WaitingAnalysis out;
  const std::int32_t from = std::max(first_step, 0);
  std::vector<const Span*> comm;
  std::map<std::int32_t, std::vector<Interval>> waits;
  std::map<std::int32_t, std::set<std::int32_t>> steps;  // rank -> measured steps
  for (const Span& s : timeline.spans) {
    if (s.step < from || s.end_ns < s.start_ns) continue;
    steps[s.rank].insert(s.step);
    if (s.lane == Lane::kComm) comm.push_back(&s);
    if (s.lane == Lane::kWait) waits[s.rank].push_back({s.start_ns, s.end_ns});
  }
  if (comm.empty()) return out;
  out.from_wait_spans = !waits.empty();

  const Instances instances = match_instances(comm);
  out.collectives = instances.collectives;
  std::map<std::int32_t, std::vector<Segmented>> per_rank;
  for (std::size_t i = 0; i < comm.size(); ++i) {
    const Span& s = *comm[i];
    per_rank[s.rank].push_back({s.start_ns, s.end_ns, instances.last_arrival[i], s.kind});
    if (!out.from_wait_spans) waits[s.rank].push_back({s.start_ns, s.end_ns});
  }

  std::array<double, kKinds> kind_skew{}, kind_transfer{};
  for (const auto& [rank, rank_steps] : steps) {
    RankWaiting w{.rank = rank, .steps = static_cast<std::int32_t>(rank_steps.size())};
    const Attribution a = attribute(waits[rank], per_rank[rank]);
    const double n = std::max(1, w.steps);
    w.blocked_ns = static_cast<double>(a.blocked) / n;
    w.skew_ns = static_cast<double>(a.skew) / n;
    w.transfer_ns = static_cast<double>(a.transfer) / n;
    w.other_ns = static_cast<double>(a.other) / n;
    if (const auto it = instances.last_by_rank.find(rank); it != instances.last_by_rank.end()) {
      w.last_arrivals = it->second.first;
      w.late_by_ns = it->second.second / it->second.first;
    }
    for (std::size_t k = 0; k < kKinds; ++k) {
      kind_skew[k] += static_cast<double>(a.kind_skew[k]) / n;
      kind_transfer[k] += static_cast<double>(a.kind_transfer[k]) / n;
    }
    out.blocked_ns += w.blocked_ns;
    out.skew_ns += w.skew_ns;
    out.transfer_ns += w.transfer_ns;
    out.other_ns += w.other_ns;
    if (w.last_arrivals > 0 && (out.most_often_last < 0 ||
                                w.last_arrivals > out.rank(out.most_often_last)->last_arrivals)) {
      out.most_often_last = rank;
    }
    out.ranks.push_back(w);
  }
  const double ranks = static_cast<double>(out.ranks.size());
  out.blocked_ns /= ranks;
  out.skew_ns /= ranks;
  out.transfer_ns /= ranks;
  out.other_ns /= ranks;

  std::array<bool, kKinds> seen{};
  for (const Span* s : comm) seen[static_cast<std::size_t>(s->kind)] = true;
  for (std::size_t k = 0; k < kKinds; ++k) {
    if (!seen[k]) continue;
    const std::int32_t count = instances.kind_count[k];
    out.kinds.push_back({.kind = static_cast<SpanKind>(k),
                         .collectives = count,
                         .skew_ns = kind_skew[k] / ranks,
                         .transfer_ns = kind_transfer[k] / ranks,
                         .arrival_spread_ns = count > 0 ? instances.kind_spread[k] / count : 0});
  }
  return out;
}

std::string clocks_note(std::int64_t clock_uncertainty_ns, bool simulated) {
  if (simulated) return "one virtual clock (simulated)";
  if (clock_uncertainty_ns > 0) {
    return "the processes' clocks aligned to within " +
           format_duration_ns(static_cast<double>(clock_uncertainty_ns));
  }
  return "one clock (the ranks share a host clock)";
}

nlohmann::json waiting_json(const WaitingAnalysis& waiting) {
  if (waiting.empty()) return nullptr;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankWaiting& w : waiting.ranks) {
    ranks.push_back({{"rank", w.rank},
                     {"steps", w.steps},
                     {"blocked_ms", ms(w.blocked_ns)},
                     {"skew_ms", ms(w.skew_ns)},
                     {"transfer_ms", ms(w.transfer_ns)},
                     {"other_ms", ms(w.other_ns)},
                     {"last_arrivals", w.last_arrivals},
                     {"late_by_ms", ms(w.late_by_ns)}});
  }
  nlohmann::json kinds = nlohmann::json::array();
  for (const KindWaiting& k : waiting.kinds) {
    kinds.push_back({{"kind", std::string(to_string(k.kind))},
                     {"collectives", k.collectives},
                     {"skew_ms", ms(k.skew_ns)},
                     {"transfer_ms", ms(k.transfer_ns)},
                     {"arrival_spread_ms", ms(k.arrival_spread_ns)}});
  }
  return {{"blocked_on", waiting.from_wait_spans ? "wait spans" : "collective spans"},
          {"clocks", waiting.clocks},
          {"collectives", waiting.collectives},
          {"blocked_ms", ms(waiting.blocked_ns)},
          {"skew_ms", ms(waiting.skew_ns)},
          {"transfer_ms", ms(waiting.transfer_ns)},
          {"other_ms", ms(waiting.other_ns)},
          {"most_often_last", waiting.most_often_last >= 0 ? nlohmann::json(waiting.most_often_last)
                                                           : nlohmann::json()},
          {"ranks", std::move(ranks)},
          {"kinds", std::move(kinds)}};
}

std::string format_waiting(const WaitingAnalysis& waiting, const std::string& indent) {
  if (waiting.empty() || waiting.blocked_ns <= 0) return "";
  std::string out = indent + "mean " + format_duration_ns(waiting.blocked_ns) + " = skew " +
                    format_duration_ns(waiting.skew_ns) + " (a rank not yet arrived) + transfer " +
                    format_duration_ns(waiting.transfer_ns) + " (all arrived)";
  if (waiting.other_ns > 0.005 * waiting.blocked_ns) {
    out += " + other " + format_duration_ns(waiting.other_ns) + " (nothing in flight)";
  }
  out += "\n";
  if (const RankWaiting* last = waiting.rank(waiting.most_often_last)) {
    char line[160];
    std::snprintf(line, sizeof line, "rank %d arrived last at %d of %d collectives (%.0f%%), ",
                  last->rank, last->last_arrivals, waiting.collectives,
                  100.0 * last->last_arrivals / std::max(1, waiting.collectives));
    out += indent + line + format_duration_ns(last->late_by_ns) +
           " after the next-latest on average\n";
  }
  return out;
}

}  // namespace tandem
