// The pipeline bubble (pipeline_metrics.h).
#include "analysis/pipeline_metrics.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "analysis/intervals.h"

namespace tandem {

std::vector<StageBubble> pipeline_bubbles(const Timeline& timeline, int stages) {
  if (stages < 1) stages = 1;
  // The passes of each (rank, step), and each (pipeline, step)'s window.
  std::map<std::pair<int, int>, std::vector<Interval>> passes;
  std::map<std::pair<int, int>, Interval> windows;
  for (const Span& s : timeline.spans) {
    if (s.lane != Lane::kCompute || s.step < 0) continue;
    if (s.kind != SpanKind::kForward && s.kind != SpanKind::kBackward) continue;
    passes[{s.rank, s.step}].push_back({s.start_ns, s.end_ns});
    const std::pair<int, int> key{s.rank / stages, s.step};
    auto [it, fresh] = windows.try_emplace(key, Interval{s.start_ns, s.end_ns});
    if (!fresh) {
      it->second.start_ns = std::min(it->second.start_ns, s.start_ns);
      it->second.end_ns = std::max(it->second.end_ns, s.end_ns);
    }
  }
  std::vector<StageBubble> out;
  for (auto& [key, intervals] : passes) {
    const auto [rank, step] = key;
    const Interval window = windows.at({rank / stages, step});
    out.push_back({.rank = rank,
                   .step = step,
                   .window_ns = static_cast<double>(window.length()),
                   .busy_ns = static_cast<double>(total_length(union_of(std::move(intervals))))});
  }
  std::sort(out.begin(), out.end(), [](const StageBubble& a, const StageBubble& b) {
    return std::tie(a.step, a.rank) < std::tie(b.step, b.rank);
  });
  return out;
}

}  // namespace tandem
