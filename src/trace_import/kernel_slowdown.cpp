#include "trace_import/kernel_slowdown.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include "analysis/intervals.h"

namespace tandem {
namespace {

// A trace's measured compute kernels: rank -> its iterations in step order -> kernels in
// start order.
using Iterations = std::map<std::int32_t, std::map<std::int32_t, std::vector<const Span*>>>;

Iterations measured_kernels(const Timeline& t, const std::vector<std::int32_t>& steps) {
  Iterations out;
  for (const Span& s : t.spans) {
    if (s.lane != Lane::kCompute || s.step < 0) continue;
    if (!std::binary_search(steps.begin(), steps.end(), s.step)) continue;
    out[s.rank][s.step].push_back(&s);
  }
  for (auto& [rank, iterations] : out) {
    for (auto& [step, kernels] : iterations) {
      std::stable_sort(kernels.begin(), kernels.end(),
                       [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    }
  }
  return out;
}

// A rank's comm spans sorted by start, with what each ran, and their union.
struct RankComm {
  std::vector<std::pair<const Span*, const CommInfo*>> spans;
  IntervalSet busy;
};

std::int64_t overlap_length(const Span& a, const Span& b) {
  return std::max<std::int64_t>(0, std::min(a.end_ns, b.end_ns) - std::max(a.start_ns, b.start_ns));
}

}  // namespace

double KernelSlowdown::slowdown() const {
  return alone_ns > 0 ? static_cast<double>(overlapped_ns) / static_cast<double>(alone_ns) - 1
                      : std::numeric_limits<double>::quiet_NaN();
}

KernelSlowdownReport kernel_slowdown(const Timeline& run, const std::vector<CommInfo>& run_comm,
                                     const std::vector<std::int32_t>& run_steps,
                                     const Timeline& baseline,
                                     const std::vector<std::int32_t>& baseline_steps) {
  const Iterations run_kernels = measured_kernels(run, run_steps);
  const Iterations base_kernels = measured_kernels(baseline, baseline_steps);

  std::map<std::int32_t, RankComm> comm;
  for (const CommInfo& c : run_comm) {
    const Span& s = run.spans.at(c.span);
    RankComm& r = comm[s.rank];
    r.spans.emplace_back(&s, &c);
  }
  for (auto& [rank, r] : comm) {
    std::stable_sort(r.spans.begin(), r.spans.end(), [](const auto& a, const auto& b) {
      return a.first->start_ns < b.first->start_ns;
    });
    std::vector<Interval> intervals;
    intervals.reserve(r.spans.size());
    for (const auto& [s, info] : r.spans) intervals.push_back({s->start_ns, s->end_ns});
    r.busy = union_of(std::move(intervals));
  }

  KernelSlowdownReport report;
  std::map<std::string, KernelSlowdown, std::less<>> by_name;
  std::map<std::string, std::map<std::pair<CollectiveType, std::int64_t>, std::int64_t>, std::less<>>
      contention;
  std::set<std::string, std::less<>> run_names, base_names;

  for (const auto& [rank, iterations] : run_kernels) {
    for (const auto& [step, kernels] : iterations) {
      for (const Span* k : kernels) run_names.emplace(run.name_of(*k));
    }
  }
  for (const auto& [rank, iterations] : base_kernels) {
    for (const auto& [step, kernels] : iterations) {
      for (const Span* k : kernels) base_names.emplace(baseline.name_of(*k));
    }
  }
  for (const std::string& n : run_names) report.names_only_run += base_names.count(n) == 0;
  for (const std::string& n : base_names) report.names_only_baseline += run_names.count(n) == 0;

  for (const auto& [rank, run_iterations] : run_kernels) {
    const auto base_it = base_kernels.find(rank);
    if (base_it == base_kernels.end()) continue;
    // The rank's matched run kernels, each with its row, for the sweep below.
    std::vector<std::pair<const Span*, KernelSlowdown*>> matched_here;
    auto run_iter = run_iterations.begin();
    auto base_iter = base_it->second.begin();
    for (; run_iter != run_iterations.end() && base_iter != base_it->second.end();
         ++run_iter, ++base_iter) {
      ++report.iterations_paired;
      // name -> occurrences in start order, in each iteration.
      std::map<std::string_view, std::vector<const Span*>> run_by_name, base_by_name;
      for (const Span* k : run_iter->second) run_by_name[run.name_of(*k)].push_back(k);
      for (const Span* k : base_iter->second) base_by_name[baseline.name_of(*k)].push_back(k);
      for (const auto& [name, base_list] : base_by_name) {
        if (!run_by_name.contains(name)) report.unmatched_baseline += base_list.size();
      }
      for (const auto& [name, run_list] : run_by_name) {
        const auto found = base_by_name.find(name);
        const std::size_t base_count = found == base_by_name.end() ? 0 : found->second.size();
        const std::size_t matched = std::min(run_list.size(), base_count);
        report.unmatched_run += run_list.size() - matched;
        report.unmatched_baseline += base_count - matched;
        if (matched == 0) continue;
        auto [entry, fresh] = by_name.try_emplace(std::string(name));
        KernelSlowdown& row = entry->second;
        if (fresh) row.name = std::string(name);
        for (std::size_t i = 0; i < matched; ++i) {
          ++row.count;
          row.alone_ns = add_saturating(row.alone_ns, found->second[i]->duration_ns());
          row.overlapped_ns = add_saturating(row.overlapped_ns, run_list[i]->duration_ns());
          matched_here.emplace_back(run_list[i], &row);
        }
      }
    }
    const auto comm_it = comm.find(rank);
    if (comm_it == comm.end()) continue;
    const RankComm& rank_comm = comm_it->second;
    // One sweep over the matched kernels and the comm spans, both by start: the active
    // spans are those begun before the kernel ends and not ended before it began (kernels
    // come in start order, so a span ended before one kernel's start is done for all).
    std::stable_sort(matched_here.begin(), matched_here.end(), [](const auto& a, const auto& b) {
      return a.first->start_ns < b.first->start_ns;
    });
    std::vector<std::pair<const Span*, const CommInfo*>> active;
    std::size_t next = 0;
    for (const auto& match : matched_here) {
      const Span* k = match.first;  // not a structured binding: lambdas capture it (clang 14)
      KernelSlowdown* row = match.second;
      while (next < rank_comm.spans.size() && rank_comm.spans[next].first->start_ns < k->end_ns) {
        active.push_back(rank_comm.spans[next++]);
      }
      std::erase_if(active, [&](const auto& a) { return a.first->end_ns <= k->start_ns; });
      row->under_comm_ns = add_saturating(
          row->under_comm_ns, covered_length(rank_comm.busy, {k->start_ns, k->end_ns}));
      auto& contended = contention[row->name];
      for (const auto& [c, info] : active) {
        const std::int64_t ov = overlap_length(*k, *c);
        if (ov > 0) {
          auto& sum = contended[{info->type, info->bytes}];
          sum = add_saturating(sum, ov);
        }
      }
    }
  }

  for (auto& [name, row] : by_name) {
    for (const auto& [key, ns] : contention[name]) {
      row.collectives.push_back({key.first, key.second, ns});
    }
    std::stable_sort(row.collectives.begin(), row.collectives.end(),
                     [](const auto& a, const auto& b) { return a.overlap_ns > b.overlap_ns; });
    report.kernels.push_back(std::move(row));
  }
  std::stable_sort(report.kernels.begin(), report.kernels.end(),
                   [](const KernelSlowdown& a, const KernelSlowdown& b) {
                     return a.added_ns() > b.added_ns();
                   });
  return report;
}

}  // namespace tandem
