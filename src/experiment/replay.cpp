#include "experiment/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "analysis/metrics.h"
#include "analysis/statistics.h"
#include "core/error.h"
#include "core/parse.h"
#include "model/model_ops.h"

namespace tandem {

namespace fs = std::filesystem;

WhatIf WhatIf::parse(const std::vector<std::string>& items) {
  WhatIf w;
  for (const std::string& item : items) {
    const auto kv =
        parse_key_values(item, "--what-if", "network contention slowdown overlap bucket-mb ranks");
    for (const auto& [key, value] : kv) {
      if (key == "network") {
        w.network = parse_factor(value, "--what-if network", {.min = 0.001, .max = 1000});
      } else if (key == "bucket-mb") {
        w.bucket_mb =
            parse_double_in(value, "--what-if bucket-mb", {.min = 1.0 / 1024, .max = 1 << 20});
      } else if (key == "ranks") {
        w.ranks = static_cast<int>(parse_int_in(value, "--what-if ranks", 1, 1 << 20));
      } else if (value != "off") {
        throw UsageError("--what-if " + item + ": " + key + " takes off");
      } else {
        (key == "contention" ? w.contention_off
         : key == "slowdown" ? w.slowdown_off
                             : w.overlap_off) = true;
      }
    }
  }
  return w;
}

std::string WhatIf::describe() const {
  std::string out;
  const auto add = [&](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  if (network != 1) {
    char b[48];
    std::snprintf(b, sizeof b, "network %gx", network);
    add(b);
  }
  if (contention_off) add("contention off");
  if (slowdown_off && !contention_off) add("slowdown off");
  if (overlap_off) add("overlap off");
  if (bucket_mb > 0) {
    char b[48];
    std::snprintf(b, sizeof b, "bucket-mb %g", bucket_mb);
    add(b);
  }
  if (ranks > 0) add("ranks " + std::to_string(ranks));
  return out.empty() ? "none" : out;
}

namespace {

// Note [replayed step by step]
// A step pays the sum of its passes and of the collectives it waits for, and where a
// rank's communication thread shares its core that sum is not one of typical parts: the
// thread takes the core at a different place from step to step, and what it costs depends
// on where (fsdp on mlp:4x1024: a reduce-scatter started 1.5 ms late in one step, behind a
// whole backward pass, held the next unit's gather back, and the rank waited for it; in
// the next step it started at once). A step built of each pass's and collective's mean
// (or median) spreads such a delay thin where the step paid it whole, and comes short:
// the mean's late start hides behind the pass. So each step of the run's middle half by
// E2E (middle_steps) is replayed by itself, with its own passes, collectives, late starts,
// wake-ups, gaps and ranks' paces (each a mean over that step's ranks and micro-batches,
// and the ranks put back by their paces), and the replayed E2E is the median of those
// steps' as the measured one is of the run's. The middle half: a step a hiccup of the
// machine stretched (a 15.6 ms backward pass where the rest took 1 ms) is not replayed.
// scripts/validate-replay's 15 runs (5 strategies x local, mpi, namespace hosts), their
// traces replayed both ways: by each part's mean over the middle half, median |error| 1.5%
// and up to 8.4% (local fsdp); step by step, 1.0% and 3.5% (docs/SIMULATE.md). Unoverlapped
// what-ifs and the calibration's fit keep the median over every step: nothing moves a
// slowdown between passes there, and a rate fitted to the odd slow pass would price every
// pass by it.
constexpr Typical kMean = Typical::kMean;

// The unit costs of `config` with every pass measured in `passes` in place of the model's.
// `update`: the whole model's update as measured (update_seconds; 0: none was).
// A pass never measured keeps the model's (a note says so).
// A tensor-parallel pass's compute pieces (--tensor) as measured too: the k-th piece of a
// name in a unit's pass is that pass's k-th span of the name (a --tp-overlap ring's T
// blocks, the next T); a piece never measured keeps the model's.
void measured_pieces(std::vector<PassPiece>& pieces, SpanKind kind, int unit,
                     const PieceTimes& measured, int ring_steps) {
  for_each_piece_span(pieces, kind, unit, ring_steps,
                      [&](PassPiece& piece, PieceTimes::key_type key, int spans) {
                        double seconds = 0;
                        for (int b = 0; b < spans; ++b, ++std::get<3>(key)) {
                          const auto it = measured.find(key);
                          if (it == measured.end()) return;
                          seconds += it->second;
                        }
                        piece.seconds = seconds;
                      });
}

UnitCosts measured_costs(const TrainConfig& config, const Cluster& cluster,
                         const std::map<std::pair<SpanKind, int>, double>& passes, double update,
                         const PieceTimes& pieces, std::vector<std::string>& notes) {
  UnitCosts k = unit_costs(config, cluster);
  for (std::size_t u = 0; u < k.forward_pieces.size(); ++u) {
    const int unit = static_cast<int>(u);
    measured_pieces(k.forward_pieces[u], SpanKind::kForward, unit, pieces, config.model.tensor);
    measured_pieces(k.backward_pieces[u], SpanKind::kBackward, unit, pieces, config.model.tensor);
  }
  if (!k.loss_pieces.empty()) {
    measured_pieces(k.loss_pieces, SpanKind::kForward, static_cast<int>(k.forward.size()), pieces,
                    config.model.tensor);
  }
  const int U = static_cast<int>(k.forward.size());
  int modelled = 0;
  const auto take = [&](SpanKind kind, int tag, double& seconds) {
    const auto it = passes.find({kind, tag});
    if (it != passes.end()) {
      seconds = it->second;
    } else if (seconds > 0 || kind != SpanKind::kOptimizer) {
      ++modelled;
    }
  };
  for (int u = 0; u < U; ++u) {
    take(SpanKind::kForward, u, k.forward[static_cast<std::size_t>(u)]);
    take(SpanKind::kBackward, u, k.backward[static_cast<std::size_t>(u)]);
  }
  take(SpanKind::kForward, U, k.loss_forward);
  take(SpanKind::kBackward, U, k.loss_backward);
  take(SpanKind::kOptimizer, -1, k.optimizer);
  // A pipeline stage updates its units only, priced by its share of the whole model's
  // update: the stages' updates summed (update_seconds).
  if (update > 0) k.optimizer = update;
  // The simulator prices a sharded update by the shard's share of k.optimizer: the
  // measured one is the shard's already.
  if (config.reducer.plan.strategy.sharded()) k.optimizer_numel = 0;
  // The measured backward passes hold the time they spent rewriting gradients given back
  // (and the measured collectives their gathers'): the model's first touch is not added.
  k.touch_seconds = 0;
  if (modelled > 0) {
    notes.push_back(std::to_string(modelled) +
                    " passes were never measured (or never without overlap): priced by the "
                    "calibrated model");
  }
  return k;
}

// One measured idle gap: `rank` stood idle `seconds` before a pass or give-back (kind,
// unit).
struct Gap {
  int rank = 0;
  SpanKind kind = SpanKind::kForward;
  int tag = 0;
  double seconds = 0;
};

std::vector<Gap> gap_samples(const MeasuredRun& run) {
  std::map<std::pair<int, int>, std::vector<const Span*>> per_rank_step;
  for (const Span& s : run.timeline.spans) {
    if (s.step < run.warmup || s.end_ns <= s.start_ns) continue;
    // The idle lane's spans (memory given back) are work the replay places itself.
    if (s.lane == Lane::kCompute || s.lane == Lane::kWait || s.lane == Lane::kIdle)
      per_rank_step[{s.rank, s.step}].push_back(&s);
  }
  std::vector<Gap> out;
  for (auto& [key, spans] : per_rank_step) {
    std::sort(spans.begin(), spans.end(),
              [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    std::int64_t busy_until = -1;
    const Span* previous = nullptr;
    for (const Span* s : spans) {
      // The first span of a pass (a unit's norm, attention and mlp are one pass), or a
      // give-back (the simulator's too is work of the rank's own thread).
      const bool same_pass = previous != nullptr && previous->lane == Lane::kCompute &&
                             s->lane == Lane::kCompute && previous->kind == s->kind &&
                             previous->tag == s->tag && previous->micro == s->micro;
      if (s->lane != Lane::kWait && !same_pass && busy_until >= 0) {
        out.push_back(
            {.rank = key.first,
             .kind = s->kind,
             .tag = s->kind == SpanKind::kOptimizer ? -1 : s->tag,
             .seconds =
                 static_cast<double>(std::max<std::int64_t>(0, s->start_ns - busy_until)) / 1e9});
      }
      busy_until = std::max(busy_until, s->end_ns);
      previous = s;
    }
  }
  return out;
}

// Ranks that computed systematically slower or faster than their stage's typical rank, as
// stragglers: each rank's typical compute per step over its stage's typical rank's, as the
// passes priced with them are typical (mean or median) over ranks and steps (Note
// [replayed step by step]): this puts each rank's own pace back. With `gaps`, also each
// rank's idle gaps per step (their mean, as idle_gaps takes them) over its stage's mean
// rank's: where a rank's communication thread shares its core, the gaps fall on the rank
// whose thread held the core, and the others wait for it at the next collective.
std::vector<Straggler> rank_paces(const MeasuredRun& run, Typical typical, bool gaps) {
  std::map<int, std::map<int, double>> busy;  // rank -> step -> compute seconds
  for (const Span& s : run.timeline.spans) {
    if (s.lane != Lane::kCompute || s.step < run.warmup || s.end_ns <= s.start_ns) continue;
    busy[s.rank][s.step] += static_cast<double>(s.duration_ns()) / 1e9;
  }
  // A pipeline's stages compute different units: a rank is compared with its stage's
  // replicas (the stage of its outer rank, world rank / T: Note [rank order] in
  // engine/tensor_parallel.h).
  const StagePlan plan = stage_plan(run.config);
  const int tensor = std::max(1, run.config.model.tensor);
  const auto stage_of = [&](int rank) { return plan.stage_of(rank / tensor); };
  std::map<int, double> pace, idle;
  std::map<int, std::vector<double>> by_stage, idle_by_stage;
  for (const auto& [rank, steps] : busy) {
    std::vector<double> v;
    for (const auto& [step, seconds] : steps) v.push_back(seconds);
    pace[rank] = typical_of(v, typical);
    by_stage[stage_of(rank)].push_back(pace[rank]);
  }
  if (gaps) {
    for (const Gap& g : gap_samples(run)) {
      if (busy.contains(g.rank)) idle[g.rank] += g.seconds;
    }
    for (auto& [rank, seconds] : idle) {
      seconds /= static_cast<double>(busy[rank].size());
      idle_by_stage[stage_of(rank)].push_back(seconds);
    }
  }
  std::vector<Straggler> out;
  for (const auto& [rank, seconds] : pace) {
    std::vector<double> all = by_stage[stage_of(rank)];
    if (all.size() < 2) continue;
    std::sort(all.begin(), all.end());
    // The median's rank is the lower middle: a real rank's.
    const double typical_rank =
        typical == Typical::kMedian ? all[(all.size() - 1) / 2] : typical_of(all, typical);
    if (!(typical_rank > 0)) continue;
    const double f = seconds / typical_rank;
    // Every rank of the stage idled (a rank that never did has no entry, and 0 of it).
    const std::vector<double>& idles = idle_by_stage[stage_of(rank)];
    const double mean_idle = idles.size() == all.size() ? summarize(idles).mean : 0;
    const double g = mean_idle > 0 ? idle[rank] / mean_idle : 1;
    if (std::abs(f - 1) > 0.01 || std::abs(g - 1) > 0.01) {
      out.push_back(
          {.rank = rank, .compute = std::clamp(f, 0.01, 100.0), .idle = std::clamp(g, 0.0, 100.0)});
    }
  }
  return out;
}

}  // namespace

namespace {

// The run with the warm-up's spans and those of `steps` only.
MeasuredRun with_steps(const MeasuredRun& run, const std::set<int>& steps) {
  MeasuredRun out = run;
  std::erase_if(out.timeline.spans,
                [&](const Span& s) { return s.step >= run.warmup && !steps.contains(s.step); });
  return out;
}

// The steps middle_steps keeps: the middle half by E2E, every one from the warm-up on when
// there are fewer than 4.
std::set<int> middle_step_numbers(const MeasuredRun& run) {
  std::vector<std::pair<std::int64_t, int>> steps;  // (E2E, step)
  for (const StepMetrics& m : compute_step_metrics(run.timeline)) {
    if (m.step >= run.warmup) steps.emplace_back(m.e2e_ns, m.step);
  }
  std::set<int> kept;
  if (steps.size() < 4) {
    for (const Span& s : run.timeline.spans) {
      if (s.step >= run.warmup) kept.insert(s.step);
    }
    return kept;
  }
  std::sort(steps.begin(), steps.end());
  const std::size_t quarter = steps.size() / 4;
  for (std::size_t i = quarter; i < steps.size() - quarter; ++i) kept.insert(steps[i].second);
  return kept;
}

}  // namespace

MeasuredRun middle_steps(const MeasuredRun& run) {
  return with_steps(run, middle_step_numbers(run));
}

bool collectives_overlapped(const MeasuredRun& run) {
  std::map<std::pair<int, std::uint32_t>, std::vector<std::pair<std::int64_t, std::int64_t>>> lanes;
  for (const Span& s : run.timeline.spans) {
    if (s.lane == Lane::kComm && is_collective(s.kind) && s.step >= run.warmup &&
        s.end_ns > s.start_ns) {
      lanes[{s.rank, s.group}].emplace_back(s.start_ns, s.end_ns);
    }
  }
  for (auto& [lane, spans] : lanes) {
    std::sort(spans.begin(), spans.end());
    std::int64_t end = INT64_MIN;
    for (const auto& [start, stop] : spans) {
      if (start < end) return true;
      end = std::max(end, stop);
    }
  }
  return false;
}

std::map<std::pair<SpanKind, int>, double> idle_gaps(const MeasuredRun& run) {
  std::map<std::pair<SpanKind, int>, std::vector<double>> gaps;
  for (const Gap& g : gap_samples(run)) gaps[{g.kind, g.tag}].push_back(g.seconds);
  std::map<std::pair<SpanKind, int>, double> out;
  for (const auto& [key, v] : gaps) out[key] = summarize(v).mean;
  return out;
}

namespace {

// DIR/points/ID of a characterize run's results: (DIR, ID); nothing for another path.
std::optional<std::pair<std::string, std::string>> characterize_point(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  const fs::path points = p.parent_path();
  std::error_code ec;
  if (points.filename() != "points" || !fs::exists(points.parent_path() / "summary.json", ec) ||
      fs::exists(p / "summary.json", ec)) {
    return std::nullopt;
  }
  return std::pair{points.parent_path().string(), p.filename().string()};
}

}  // namespace

namespace {

// Appends step `keep` of `from` (a simulated run) to `into` as its next step, after the
// steps it has: spans and records renumbered and moved in time to start where `into`'s
// last step ended; the rest (memory, buckets, descriptions) is the first one's.
void append_step(TrainResult& into, const TrainResult& from, int keep) {
  const bool first = into.timeline.ranks == 0;
  if (first) {
    into = from;
    into.timeline.spans.clear();
    into.steps.clear();
  }
  int step = 0;
  std::int64_t end = 0, begin = INT64_MAX;
  for (const Span& s : into.timeline.spans) {
    step = std::max(step, s.step + 1);
    end = std::max(end, s.end_ns);
  }
  for (const Span& s : from.timeline.spans) {
    if (s.step == keep) begin = std::min(begin, s.start_ns);
  }
  const std::int64_t shift = begin == INT64_MAX ? 0 : end - begin;
  for (Span s : from.timeline.spans) {
    if (s.step != keep) continue;
    s.step = step;
    s.start_ns += shift;
    s.end_ns += shift;
    if (s.issue_ns != 0) s.issue_ns += shift;
    if (s.name != kNoName) s.name = into.timeline.names->intern(from.timeline.name_of(s));
    into.timeline.spans.push_back(s);
  }
  for (StepRecord r : from.steps) {
    if (r.step != keep) continue;
    r.step = step;
    r.start_ns += shift;
    r.end_ns += shift;
    into.steps.push_back(r);
  }
}

// Note [a faster network, emulated]
// network=Fx makes the network F times as fast, and what a collective does besides
// crossing it (the copies, the reduction, the hand-offs between threads) no faster. Over
// an emulated --link (the local backend) the network's part of a measured collective is
// known exactly: the wire time the link adds after the data has moved
// (LinkModel::wire_time_ns), and only it is divided. Dividing the whole, a 16 MB
// all-reduce at 2 GB/s (7.2 ms measured, 0.9 ms of it the data moving) came 0.45 ms short
// at 4 GB/s, the step 4% (scripts/validate-whatif). A real network's collective is
// divided whole: its copies and reduction are counted as the network's.
// (FasterNetwork in replay.h.)

// The simulator asks for each collective of a step once, in issue order: the k-th time
// it asks for a (kind, tag, bytes) it gets that collective's k-th occurrence in `t` (a
// point-to-point transfer: its first), in seconds as `faster` makes them; -1: none
// measured.
std::function<double(SpanKind, int, std::int64_t)> occurrences(const TransferTimes& t,
                                                               const FasterNetwork& faster = {}) {
  auto asked = std::make_shared<std::map<std::tuple<SpanKind, int, std::int64_t>, std::size_t>>();
  return [&t, faster, asked](SpanKind kind, int tag, std::int64_t bytes) {
    const std::tuple<SpanKind, int, std::int64_t> key{kind, kind == SpanKind::kSend ? -1 : tag,
                                                      bytes};
    const auto it = t.find(key);
    if (it == t.end() || it->second.empty()) return -1.0;
    std::size_t& k = (*asked)[key];
    const double seconds = it->second[std::min(k, it->second.size() - 1)];
    if (kind != SpanKind::kSend) ++k;
    return seconds < 0 ? -1.0 : faster(kind, bytes, seconds);
  };
}

// A tensor group's collectives: the median over their occurrences (each actor, micro-
// batch and step asks again; a unit's two all-reduces move the same bytes alike).
std::function<double(SpanKind, int, std::int64_t)> medians(const TransferTimes& t,
                                                           const FasterNetwork& faster = {}) {
  auto m = std::make_shared<std::map<std::tuple<SpanKind, int, std::int64_t>, double>>();
  for (const auto& [key, per] : t) {
    std::vector<double> v;
    for (double x : per) {
      if (x >= 0) v.push_back(x);
    }
    if (!v.empty()) (*m)[key] = summarize(v).median;
  }
  return [m, faster](SpanKind kind, int tag, std::int64_t bytes) {
    const auto it = m->find({kind, tag, bytes});
    return it == m->end() ? -1.0 : faster(kind, bytes, it->second);
  };
}

// Late starts and wake-ups, asked as the collectives' times are (0 where none measured).
std::function<double(SpanKind, int, std::int64_t)> seconds_late(const TransferTimes& t) {
  return [late = occurrences(t)](SpanKind kind, int tag, std::int64_t bytes) {
    return std::max(0.0, late(kind, tag, bytes));
  };
}

}  // namespace

double FasterNetwork::operator()(SpanKind kind, std::int64_t bytes, double seconds) const {
  if (factor == 1 || seconds < 0) return seconds;
  if (!wire.enabled()) return seconds / factor;
  const double w =
      std::min(seconds, static_cast<double>(wire.wire_time_ns(kind, bytes, ranks)) / 1e9);
  return seconds - w + w / factor;
}

// Note [collectives never measured, emulated]
// Over an emulated --link a collective of a size or a rank count the run never had (a
// what-if's buckets, its ranks) is its wire time, which the link model gives exactly,
// plus what the local backend does besides: move the data in memory and hand the result
// over between threads. That part is fitted to the run's own collectives, each's median
// less its wire time, as a + b x the bytes a ring moves per rank (2 (n-1)/n x the bytes
// for an all-reduce, (n-1)/n for a reduce-scatter or all-gather, the bytes for a
// broadcast): a per-collective cost and a per-byte one. Priced by the run's fit of its
// link instead (a ring model fitted to the whole times), the 2 MiB buckets of a run with
// one 16 MB bucket and one small one came 5% short (scripts/validate-whatif): that fit
// puts the wire's per-hop latency and the hand-off into one figure that does not grow
// with the bucket count as the wire's does.
namespace {

double ring_bytes(SpanKind kind, double bytes, int ranks) {
  const double n = std::max(1, ranks);
  switch (kind) {
    case SpanKind::kAllreduce:
      return 2 * (n - 1) / n * bytes;
    case SpanKind::kReduceScatter:
    case SpanKind::kAllgather:
      return (n - 1) / n * bytes;
    default:
      return bytes;
  }
}

}  // namespace

EmulatedCollectives EmulatedCollectives::fit(const LinkModel& wire, int ranks,
                                             const TransferTimes& measured) {
  EmulatedCollectives out{.wire = wire};
  std::vector<std::pair<double, double>> xy;  // (ring bytes, seconds besides the wire)
  for (const auto& [key, times] : measured) {
    const auto [kind, tag, bytes] = key;
    if (kind == SpanKind::kSend) continue;
    std::vector<double> v;
    for (const double t : times) {
      if (t >= 0) v.push_back(t);
    }
    if (v.empty()) continue;
    const double rest =
        summarize(v).median - static_cast<double>(wire.wire_time_ns(kind, bytes, ranks)) / 1e9;
    xy.emplace_back(ring_bytes(kind, static_cast<double>(bytes), ranks), std::max(0.0, rest));
  }
  if (xy.empty()) return out;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : xy) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double k = static_cast<double>(xy.size());
  const double det = k * sxx - sx * sx;
  if (det > 1e-9 * k * sxx) {  // two sizes or more: least squares
    out.b = (k * sxy - sx * sy) / det;
    out.a = (sy - out.b * sx) / k;
  }
  if (!(det > 1e-9 * k * sxx) || out.a < 0 || out.b < 0) {
    // One size, or a line through the origin or flat fits better within the bounds.
    out.a = 0;
    out.b = sxx > 0 ? sxy / sxx : 0;
    if (out.b <= 0) out = {.wire = wire, .a = sy / k, .b = 0};
  }
  return out;
}

double EmulatedCollectives::operator()(SpanKind kind, std::int64_t bytes, int ranks) const {
  if (ranks <= 1) return 0;  // one rank's collective moves nothing and hands nothing over
  return a + b * ring_bytes(kind, static_cast<double>(bytes), ranks) +
         static_cast<double>(wire.wire_time_ns(kind, bytes, ranks)) / 1e9;
}

bool is_characterize_point(const std::string& path) { return characterize_point(path).has_value(); }

Replay replay_run(const std::string& given, const WhatIf& what_if) {
  // DIR/points/ID: that point of DIR's sweep.
  std::string dir = given, point;
  if (const auto p = characterize_point(given)) std::tie(dir, point) = *p;
  MeasuredRuns measured = read_measured_runs({dir}, "--from-trace", /*replay=*/true);
  if (!point.empty()) {
    std::erase_if(measured.runs, [&](const MeasuredRun& r) { return r.point != point; });
    if (measured.runs.empty()) {
      throw UsageError("--from-trace " + given + ": no point '" + point + "' in " + dir);
    }
  } else {
    std::set<std::string> points;
    for (const MeasuredRun& r : measured.runs) {
      if (!r.point.empty()) points.insert(r.point);
    }
    if (points.size() > 1) {
      throw UsageError(
          "--from-trace " + given + ": a sweep of " + std::to_string(points.size()) +
          " points; replay one: " + (fs::path(dir) / "points" / *points.begin()).string() +
          " (or another of points/)");
    }
  }
  const MeasuredRun* run = nullptr;
  const MeasuredRun* compute_only = nullptr;
  const MeasuredRun* comm_only = nullptr;
  for (const MeasuredRun& r : measured.runs) {
    if (r.what.ends_with("compute-only")) compute_only = compute_only ? compute_only : &r;
    if (r.what.ends_with("comm-only")) comm_only = comm_only ? comm_only : &r;
    if ((r.what == dir || r.what.ends_with("overlapped")) && run == nullptr) run = &r;
  }
  if (run == nullptr) {
    throw UsageError(
        "--from-trace " + dir + ": no run to replay (" +
        (measured.skipped.empty() ? std::string("no overlapped run") : measured.skipped.front()) +
        ")");
  }
  Replay out{.what = run->what,
             .config = run->config,
             .measured_s = run->step_s,
             .e2e_ideal_s = run->e2e_ideal_s};
  // The machine the run measured, fitted from the run itself: it prices what was never
  // measured (point-to-point transfers of a what-if, a pass never seen).
  Calibration fit;
  bool fitted = true;
  try {
    std::vector<MeasuredRun> own{*run};
    if (compute_only != nullptr) own.push_back(*compute_only);
    if (comm_only != nullptr) own.push_back(*comm_only);
    fit = fit_calibration(compute_samples(own), comm_samples(own), {}, give_back_samples(own));
  } catch (const UsageError& e) {
    out.notes.push_back(std::string("no model of this machine to fall back on (") + e.what() +
                        "): what was not measured costs nothing");
    fit.gemm_flops_per_s = {1e30, 1e30, 1e30, 1e30};
    fit.memory_bytes_per_s = 1e30;
    fit.link = {.bandwidth_bytes_per_s = 1e30, .latency_s = 0};
    fitted = false;
  }
  // Another rank count prices every collective by that model (or an emulated link's
  // wire): without either it would price them at nothing.
  const bool other_ranks = what_if.ranks > 0 && what_if.ranks != run->config.ranks;
  const int tensor = std::max(1, run->config.model.tensor);
  const int model_parallel = tensor * std::max(1, run->config.pipeline.stages);
  if (other_ranks && what_if.ranks / model_parallel > 1 && !fitted && !run->config.link.enabled()) {
    throw UsageError("--what-if ranks=" + std::to_string(what_if.ranks) + ": " + given +
                     " measured no collective to price " + std::to_string(what_if.ranks) +
                     " ranks' by (a pipeline of one replica); replay a run with two or more "
                     "replicas, or one over an emulated --link");
  }
  const Cluster cluster = calibrated_cluster(fit, run->config.ranks, 1e30, "the run's own fit");
  // Measured durations already hold whatever contention the run had.
  Cluster as_measured = cluster;
  as_measured.device.overlap_compute_slowdown = 0;
  as_measured.device.overlap_comm_slowdown = 0;
  as_measured.device.sharded_compute_slowdown = 0;
  as_measured.device.sharded_comm_slowdown = 0;

  // Unoverlapped what-ifs (contention=off, overlap=off, ranks=1) price every pass and
  // collective at its unoverlapped time: a characterize run's scenario as it is, else the
  // run's own clean passes and collectives; the passes' means, as a step pays their sum
  // (Note [replayed step by step]; by their medians slowdown=off came 1.95% off eq. 4 at
  // the median over four runs of scripts/validate-simulate, by the means 1.65%), the
  // collectives' medians. One rank communicates nothing: nothing overlaps its passes
  // either. slowdown=off prices the passes so and nothing else: eq. 4's E2E_ideal,
  // scheduled (communication as it ran, late starts and gaps included).
  const bool unoverlapped = what_if.contention_off || what_if.overlap_off || what_if.ranks == 1;
  const bool clean_compute = unoverlapped || what_if.slowdown_off;
  const MeasuredRun& alone = compute_only != nullptr ? *compute_only : *run;
  const MeasuredRun& moved = comm_only != nullptr ? *comm_only : *run;
  std::optional<UnitCosts> clean_costs;
  TransferTimes clean_transfers, clean_tensor_transfers;
  std::vector<Straggler> clean_paces;
  if (clean_compute) {
    clean_costs = measured_costs(
        run->config, cluster, pass_seconds(alone, /*clean_only=*/compute_only == nullptr, kMean),
        update_seconds(alone, /*clean_only=*/compute_only == nullptr, kMean),
        piece_seconds(alone, /*clean_only=*/compute_only == nullptr, kMean), out.notes);
  }
  if (unoverlapped) {
    clean_transfers = transfer_seconds(moved, /*clean_only=*/comm_only == nullptr);
    clean_tensor_transfers = tensor_transfer_seconds(*run, /*clean_only=*/true);
    // No rank's communication thread holds its core while it could compute: every rank
    // idles the mean rank's gaps.
    clean_paces = rank_paces(*run, Typical::kMedian, /*gaps=*/false);
  }

  TrainConfig config = run->config;
  if (what_if.overlap_off) config.reducer.mode = CommMode::kSequential;
  if (what_if.bucket_mb > 0) {
    const StrategyKind kind = config.reducer.plan.strategy.kind;
    if (kind != StrategyKind::kBucketed && kind != StrategyKind::kSequential) {
      throw UsageError("--what-if bucket-mb: the run's strategy " +
                       config.reducer.plan.strategy.to_string() +
                       " has no size-capped buckets (bucketed and sequential do)");
    }
    config.reducer.plan.bucket_cap_bytes =
        static_cast<std::int64_t>(what_if.bucket_mb * static_cast<double>(1 << 20));
    if (!run->config.link.enabled()) {
      out.notes.push_back(
          "buckets of other sizes priced by the run's fit of its link where none "
          "of that size was measured");
    }
  }
  // Note [what-if ranks]: another rank count keeps each rank's measured passes (the
  // per-rank batch is the run's) and prices every collective by the run's own fit of its
  // link at the new count: no collective of that size over that many ranks was measured.
  // The ranks' paces are the run's for the ranks it had; the others compute at the passes'
  // own (the mean rank's; with one rank the unoverlapped passes' means).
  Cluster changed_cluster = as_measured;
  if (what_if.ranks > 0) {
    // The local backend's ranks are threads of one process on one host: more of them than
    // its cores share them, which no rank's measured passes say (4 ranks on 2 cores came
    // 36-46% short in scripts/validate-whatif).
    if (run->backend == "local" && measured.cores > 0 && what_if.ranks > measured.cores) {
      out.notes.push_back(std::to_string(what_if.ranks) +
                          " ranks of the local backend on the run's " +
                          std::to_string(measured.cores) +
                          " cores would share them: not modelled, every rank computes as on a "
                          "core of its own");
    }
    // Fewer ranks on the host share its memory and caches less: a rank alone here computed
    // 8-15% faster than beside another (docs/SIMULATE.md, "What-ifs against reality").
    if (run->backend == "local" && what_if.ranks < run->config.ranks) {
      out.notes.push_back("the passes keep the times they took beside the run's " +
                          std::to_string(run->config.ranks) +
                          " ranks on one host, which shared its memory and caches: fewer "
                          "ranks may compute faster (not modelled)");
    }
    config.ranks = what_if.ranks;
    changed_cluster.devices_per_node = what_if.ranks;
    out.notes.push_back(
        "collectives over " + std::to_string(what_if.ranks) +
        (what_if.ranks == 1 ? " rank" : " ranks") + " priced by " +
        (run->config.link.enabled() ? "the emulated link" : "the run's fit of its link") +
        ", not measured");
  }
  if (what_if.network != 1) {
    changed_cluster.intra.bandwidth_bytes_per_s *= what_if.network;
    changed_cluster.inter.bandwidth_bytes_per_s *= what_if.network;
    changed_cluster.intra.latency_s /= what_if.network;
    changed_cluster.inter.latency_s /= what_if.network;
  }
  // Note [a faster network, emulated]: the data-parallel communicator's ranks (a
  // point-to-point transfer's wire time does not depend on them), the tensor group's.
  const FasterNetwork faster{.factor = what_if.network,
                             .wire = run->config.link,
                             .ranks = std::max(1, run->config.ranks / model_parallel)};
  const FasterNetwork tensor_faster{
      .factor = what_if.network, .wire = run->config.link, .ranks = tensor};
  // Note [collectives never measured, emulated]
  std::optional<EmulatedCollectives> unmeasured;
  if (run->config.link.enabled() && (what_if.bucket_mb > 0 || other_ranks)) {
    unmeasured = EmulatedCollectives::fit(run->config.link, faster.ranks,
                                          transfer_seconds(*run, /*clean_only=*/false));
    char line[200];
    std::snprintf(line, sizeof line,
                  "collectives never measured: the emulated link's wire time and %.1f us + "
                  "%.3f ns per byte a ring moves per rank (fitted to the run's own)",
                  unmeasured->a * 1e6, unmeasured->b * 1e9);
    out.notes.emplace_back(line);
  }
  if (what_if.network != 1 && run->config.link.enabled()) {
    out.notes.push_back("the run's link was emulated (" + run->config.link.describe() +
                        "): only its wire time is " +
                        (what_if.network > 1 ? "shortened" : "lengthened"));
  }
  const bool at_once = collectives_overlapped(*run);
  if (at_once) {
    out.notes.push_back(
        "a rank had two collectives in flight at once (the mpi backend starts each when "
        "posted): replayed side by side");
  }

  // Each step of the run's middle half (by E2E) replayed with its own times, and the
  // what-if with the same step's.
  const std::set<int> steps = middle_step_numbers(*run);
  for (const int step : steps) {
    const MeasuredRun part = with_steps(*run, {step});
    UnitCosts costs =
        measured_costs(run->config, cluster, pass_seconds(part, /*clean_only=*/false, kMean),
                       update_seconds(part, /*clean_only=*/false, kMean),
                       piece_seconds(part, /*clean_only=*/false, kMean), out.notes);
    // Each give-back (zero2, fsdp) at the step's mean (the fit has the run's median).
    if (const std::vector<double> gives = give_back_samples({part}); !gives.empty()) {
      costs.give_back = typical_of(gives, kMean);
    }
    const TransferTimes transfers = transfer_seconds(part, /*clean_only=*/false, kMean);
    const TransferTimes tensor_transfers = tensor_transfer_seconds(part, /*clean_only=*/false);
    const TransferTimes delays = collective_delays(part, at_once);
    const TransferTimes wake_ups = collective_wake_ups(part);
    const auto gaps = idle_gaps(part);
    const std::function<double(SpanKind, int)> idle_before = [&gaps](SpanKind kind, int tag) {
      const auto it = gaps.find({kind, tag});
      return it == gaps.end() ? 0.0 : it->second;
    };
    // The simulator runs the step twice: the second, after one like it, is the replay's.
    TrainConfig twice = run->config;
    twice.steps = 2;
    SimulateOptions replay{.cluster = as_measured, .costs = &costs};
    replay.stragglers = rank_paces(part, kMean, /*gaps=*/true);
    replay.collective_seconds = occurrences(transfers);
    replay.collectives_at_once = at_once;
    replay.collective_delay = seconds_late(delays);
    replay.collective_wake_up = seconds_late(wake_ups);
    replay.tensor_seconds = medians(tensor_transfers);
    replay.idle_before = idle_before;
    append_step(out.replayed, simulate_training(twice, replay), 1);

    // The what-if: unoverlapped times, a faster or slower network, or communication after
    // compute. With communication after compute nothing overlaps either: its passes and
    // collectives are the unoverlapped ones (by the overlapped run's means it came 3.6%
    // long, the passes slowed beside collectives included).
    twice = config;
    twice.steps = 2;
    SimulateOptions changed{.cluster = changed_cluster,
                            .costs = clean_compute ? &*clean_costs : &costs};
    changed.stragglers = unoverlapped ? clean_paces : replay.stragglers;
    std::erase_if(changed.stragglers, [&](const Straggler& s) { return s.rank >= config.ranks; });
    changed.collectives_at_once = at_once;
    changed.collective_seconds = occurrences(unoverlapped ? clean_transfers : transfers, faster);
    changed.tensor_seconds =
        medians(unoverlapped ? clean_tensor_transfers : tensor_transfers, tensor_faster);
    if (other_ranks) {
      // Point-to-point transfers keep their measured times; collectives are the model's.
      changed.collective_seconds = [measured = changed.collective_seconds](SpanKind kind, int tag,
                                                                           std::int64_t bytes) {
        return kind == SpanKind::kSend ? measured(kind, tag, bytes) : -1.0;
      };
    }
    if (unmeasured) {
      // Over an emulated link, what was never measured is the emulation's.
      changed.collective_seconds = [measured = changed.collective_seconds, model = *unmeasured,
                                    network = what_if.network,
                                    n = faster.ranks * config.ranks / run->config.ranks](
                                       SpanKind kind, int tag, std::int64_t bytes) {
        const double seconds = measured(kind, tag, bytes);
        if (seconds >= 0 || kind == SpanKind::kSend) return seconds;
        const double wire = static_cast<double>(model.wire.wire_time_ns(kind, bytes, n)) / 1e9;
        return model(kind, bytes, n) - wire + wire / network;
      };
    }
    // A collective's late start and its waiter's late wake-up are the scheduler's, which a
    // faster network or another rank count keeps; unoverlapped (contention=off,
    // overlap=off) no thread holds the other off the core.
    if (!unoverlapped) {
      changed.collective_delay = seconds_late(delays);
      changed.collective_wake_up = seconds_late(wake_ups);
    }
    changed.idle_before = idle_before;
    append_step(out.what_if, simulate_training(twice, changed), 1);
  }
  // Notes said once (every step's passes say the same).
  std::vector<std::string> notes;
  for (std::string& note : out.notes) {
    if (std::find(notes.begin(), notes.end(), note) == notes.end())
      notes.push_back(std::move(note));
  }
  out.notes = std::move(notes);
  config.steps = static_cast<int>(steps.size());
  out.config = config;
  // Each step's three E2Es (the simulations' steps in the order of `steps`).
  std::map<int, double> measured_e2e;
  for (const StepMetrics& m : compute_step_metrics(run->timeline))
    measured_e2e[m.step] = m.e2e_ns / 1e9;
  const std::vector<double> replayed_e2e = e2e_seconds(out.replayed.timeline, 0);
  const std::vector<double> what_if_e2e = e2e_seconds(out.what_if.timeline, 0);
  std::size_t k = 0;
  for (const int step : steps) {
    out.steps.push_back({.step = step,
                         .measured_s = measured_e2e[step],
                         .replayed_s = k < replayed_e2e.size() ? replayed_e2e[k] : NAN,
                         .what_if_s = k < what_if_e2e.size() ? what_if_e2e[k] : NAN});
    ++k;
  }
  return out;
}

}  // namespace tandem
