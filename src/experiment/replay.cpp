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
        parse_key_values(item, "--what-if", "network contention overlap bucket-mb ranks");
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
        (key == "contention" ? w.contention_off : w.overlap_off) = true;
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

// Note [replayed by the mean]
// A step pays the sum of its passes and of the collectives it waits for. Where the
// communication thread shares a rank's core, it slows a different pass and holds back a
// different collective from step to step while the step's time holds (fsdp on mlp:4x1024:
// steps within 5%): each one's median leaves that out, its mean does not. The means are
// over the run's middle half of steps by E2E (middle_steps): the measured step is their
// median, and a step a hiccup of the machine stretched (a 15.6 ms backward pass where
// the rest took 1 ms, once in ten steps) moves a mean over every step (+18.5%) but not the
// median. scripts/validate-replay's runs (5 strategies x local, mpi, namespace hosts) and
// validate-simulate's, 40 replays: median |error| 3-4% and up to 20% by medians, 1.6% and
// 10.8% this way; with the late starts and wake-ups (Note [collectives started late]) and
// on later runs, 1.8% and 9.2% (docs/SIMULATE.md). Unoverlapped what-ifs and the
// calibration's fit keep the median: nothing moves a slowdown between passes there, and a
// rate fitted to the odd slow pass would price every pass by it.
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

// Ranks that computed systematically slower or faster than their stage's typical rank, as
// stragglers: each rank's typical compute per step over its stage's typical rank's, as the
// passes priced with them are typical (mean or median) over ranks and steps (Note
// [replayed by the mean]): this puts each rank's own pace back.
std::vector<Straggler> rank_paces(const MeasuredRun& run, Typical typical) {
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
  std::map<int, double> pace;
  std::map<int, std::vector<double>> by_stage;
  for (const auto& [rank, steps] : busy) {
    std::vector<double> v;
    for (const auto& [step, seconds] : steps) v.push_back(seconds);
    pace[rank] = typical_of(v, typical);
    by_stage[stage_of(rank)].push_back(pace[rank]);
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
    if (std::abs(f - 1) > 0.01)
      out.push_back({.rank = rank, .compute = std::clamp(f, 0.01, 100.0)});
  }
  return out;
}

}  // namespace

MeasuredRun middle_steps(const MeasuredRun& run) {
  std::vector<std::pair<std::int64_t, int>> steps;  // (E2E, step)
  for (const StepMetrics& m : compute_step_metrics(run.timeline)) {
    if (m.step >= run.warmup) steps.emplace_back(m.e2e_ns, m.step);
  }
  if (steps.size() < 4) return run;
  std::sort(steps.begin(), steps.end());
  std::set<int> kept;
  const std::size_t quarter = steps.size() / 4;
  for (std::size_t i = quarter; i < steps.size() - quarter; ++i) kept.insert(steps[i].second);
  MeasuredRun out = run;
  std::erase_if(out.timeline.spans,
                [&](const Span& s) { return s.step >= run.warmup && !kept.contains(s.step); });
  return out;
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
  std::map<std::pair<int, int>, std::vector<const Span*>> per_rank_step;
  for (const Span& s : run.timeline.spans) {
    if (s.step < run.warmup || s.end_ns <= s.start_ns) continue;
    // The idle lane's spans (memory given back) are work the replay places itself.
    if (s.lane == Lane::kCompute || s.lane == Lane::kWait || s.lane == Lane::kIdle)
      per_rank_step[{s.rank, s.step}].push_back(&s);
  }
  std::map<std::pair<SpanKind, int>, std::vector<double>> gaps;
  for (auto& [key, spans] : per_rank_step) {
    std::sort(spans.begin(), spans.end(),
              [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    std::int64_t busy_until = -1;
    const Span* previous = nullptr;
    for (const Span* s : spans) {
      // The first span of a pass (a unit's norm, attention and mlp are one pass).
      const bool same_pass = previous != nullptr && previous->lane == Lane::kCompute &&
                             s->lane == Lane::kCompute && previous->kind == s->kind &&
                             previous->tag == s->tag && previous->micro == s->micro;
      if (s->lane == Lane::kCompute && !same_pass && busy_until >= 0) {
        const int tag = s->kind == SpanKind::kOptimizer ? -1 : s->tag;
        gaps[{s->kind, tag}].push_back(
            static_cast<double>(std::max<std::int64_t>(0, s->start_ns - busy_until)) / 1e9);
      }
      busy_until = std::max(busy_until, s->end_ns);
      previous = s;
    }
  }
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
  Replay out{.what = run->what, .config = run->config, .measured_s = run->step_s};
  // The machine the run measured, fitted from the run itself: it prices what was never
  // measured (point-to-point transfers of a what-if, a pass never seen).
  Calibration fit;
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
  }
  const Cluster cluster = calibrated_cluster(fit, run->config.ranks, 1e30, "the run's own fit");
  // Measured durations already hold whatever contention the run had.
  Cluster as_measured = cluster;
  as_measured.device.overlap_compute_slowdown = 0;
  as_measured.device.overlap_comm_slowdown = 0;

  const MeasuredRun middle = middle_steps(*run);
  UnitCosts costs =
      measured_costs(run->config, cluster, pass_seconds(middle, /*clean_only=*/false, kMean),
                     update_seconds(middle, /*clean_only=*/false, kMean),
                     piece_seconds(middle, /*clean_only=*/false, kMean), out.notes);
  // Each give-back (zero2, fsdp) at the mean of the run's (the fit has their median).
  if (const std::vector<double> gives = give_back_samples({middle}); !gives.empty()) {
    costs.give_back = typical_of(gives, kMean);
  }
  const auto transfers = transfer_seconds(middle, /*clean_only=*/false, kMean);
  const auto tensor_transfers = tensor_transfer_seconds(*run, /*clean_only=*/false);
  // The simulator asks for each collective of a step once, in issue order: the k-th time
  // it asks for a (kind, tag, bytes) it gets that collective's k-th occurrence.
  const auto lookup = [](const TransferTimes& t, double scale) {
    auto asked = std::make_shared<std::map<std::tuple<SpanKind, int, std::int64_t>, std::size_t>>();
    return [&t, scale, asked](SpanKind kind, int tag, std::int64_t bytes) {
      const std::tuple<SpanKind, int, std::int64_t> key{kind, kind == SpanKind::kSend ? -1 : tag,
                                                        bytes};
      const auto it = t.find(key);
      if (it == t.end() || it->second.empty()) return -1.0;
      std::size_t& k = (*asked)[key];
      const double seconds = it->second[std::min(k, it->second.size() - 1)];
      if (kind != SpanKind::kSend) ++k;
      return seconds < 0 ? -1.0 : seconds / scale;
    };
  };
  // A tensor group's collectives: the median over their occurrences (each actor, micro-
  // batch and step asks again; a unit's two all-reduces move the same bytes alike).
  const auto median_lookup = [](const TransferTimes& t, double scale) {
    auto medians = std::make_shared<std::map<std::tuple<SpanKind, int, std::int64_t>, double>>();
    for (const auto& [key, per] : t) {
      std::vector<double> v;
      for (double x : per) {
        if (x >= 0) v.push_back(x);
      }
      if (!v.empty()) (*medians)[key] = summarize(v).median;
    }
    return [medians, scale](SpanKind kind, int tag, std::int64_t bytes) {
      const auto it = medians->find({kind, tag, bytes});
      return it == medians->end() ? -1.0 : it->second / scale;
    };
  };
  TrainConfig config = run->config;
  config.steps = 3;
  SimulateOptions replay{.cluster = as_measured, .costs = &costs};
  replay.stragglers = rank_paces(middle, kMean);
  replay.collective_seconds = lookup(transfers, 1);
  replay.collectives_at_once = collectives_overlapped(*run);
  if (replay.collectives_at_once) {
    out.notes.push_back(
        "a rank had two collectives in flight at once (the mpi backend starts each when "
        "posted): replayed side by side");
  }
  // Late starts and wake-ups, asked as the collectives' times are (0 where none measured).
  const auto seconds_late = [&lookup](const TransferTimes& t) {
    return [late = lookup(t, 1)](SpanKind kind, int tag, std::int64_t bytes) {
      return std::max(0.0, late(kind, tag, bytes));
    };
  };
  const TransferTimes delays = collective_delays(middle, replay.collectives_at_once);
  const TransferTimes wake_ups = collective_wake_ups(middle);
  replay.collective_delay = seconds_late(delays);
  replay.collective_wake_up = seconds_late(wake_ups);
  replay.tensor_seconds = median_lookup(tensor_transfers, 1);
  const auto gaps = idle_gaps(middle);
  replay.idle_before = [&gaps](SpanKind kind, int tag) {
    const auto it = gaps.find({kind, tag});
    return it == gaps.end() ? 0.0 : it->second;
  };
  out.replayed = simulate_training(config, replay);

  // The what-if: unoverlapped times (the compute-only and comm-only scenarios where
  // measured, else the run's passes and transfers that nothing overlapped), a faster or
  // slower network, or communication after compute. With communication after compute
  // nothing overlaps either: its passes and collectives are the unoverlapped ones (by the
  // overlapped run's means it came 3.6% long, the passes slowed beside collectives
  // included). Unoverlapped, nothing moves a slowdown from pass to pass: their medians
  // (Note [replayed by the mean]).
  std::vector<std::string> ignored;
  // One rank communicates nothing: nothing overlaps its passes either.
  const bool unoverlapped = what_if.contention_off || what_if.overlap_off || what_if.ranks == 1;
  // Unoverlapped times: a characterize run's scenario as it is, else the run's own clean
  // passes and collectives.
  const MeasuredRun& alone = compute_only != nullptr ? *compute_only : *run;
  const MeasuredRun& moved = comm_only != nullptr ? *comm_only : *run;
  const UnitCosts clean_costs =
      unoverlapped
          ? measured_costs(run->config, cluster,
                           pass_seconds(alone, /*clean_only=*/compute_only == nullptr),
                           update_seconds(alone, /*clean_only=*/compute_only == nullptr),
                           piece_seconds(alone, /*clean_only=*/compute_only == nullptr), out.notes)
          : costs;
  const auto clean_transfers =
      unoverlapped ? transfer_seconds(moved, /*clean_only=*/comm_only == nullptr) : transfers;
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
    out.notes.push_back(
        "buckets of other sizes priced by the run's fit of its link where none "
        "of that size was measured");
  }
  SimulateOptions changed{.cluster = as_measured, .costs = &clean_costs};
  changed.stragglers = unoverlapped ? rank_paces(*run, Typical::kMedian) : replay.stragglers;
  changed.collectives_at_once = replay.collectives_at_once;
  // Note [what-if ranks]: another rank count keeps each rank's measured passes (the
  // per-rank batch is the run's) and prices every collective by the run's own fit of its
  // link at the new count: no collective of that size over that many ranks was measured.
  // The ranks' paces are the run's for the ranks it had; the others compute at the passes'
  // own (the mean rank's; with one rank the unoverlapped passes' median).
  if (what_if.ranks > 0) {
    config.ranks = what_if.ranks;
    changed.cluster.devices_per_node = what_if.ranks;
    std::erase_if(changed.stragglers, [&](const Straggler& s) { return s.rank >= what_if.ranks; });
    out.notes.push_back("collectives over " + std::to_string(what_if.ranks) +
                        " ranks priced by the run's fit of its link, not measured");
  }
  if (what_if.network != 1) {
    changed.cluster.intra.bandwidth_bytes_per_s *= what_if.network;
    changed.cluster.inter.bandwidth_bytes_per_s *= what_if.network;
    changed.cluster.intra.latency_s /= what_if.network;
    changed.cluster.inter.latency_s /= what_if.network;
  }
  changed.collective_seconds = lookup(clean_transfers, what_if.network);
  changed.tensor_seconds = median_lookup(
      unoverlapped ? tensor_transfer_seconds(*run, /*clean_only=*/true) : tensor_transfers,
      what_if.network);
  if (what_if.ranks > 0 && what_if.ranks != run->config.ranks) {
    // Point-to-point transfers keep their measured times; collectives are the model's.
    changed.collective_seconds = [measured = changed.collective_seconds](SpanKind kind, int tag,
                                                                         std::int64_t bytes) {
      return kind == SpanKind::kSend ? measured(kind, tag, bytes) : -1.0;
    };
  }
  // A collective's late start and its waiter's late wake-up are the scheduler's, which a
  // faster network or another rank count keeps; unoverlapped (contention=off,
  // overlap=off) no thread holds the other off the core.
  if (!unoverlapped) {
    changed.collective_delay = seconds_late(delays);
    changed.collective_wake_up = seconds_late(wake_ups);
  }
  changed.idle_before = replay.idle_before;
  out.config = config;
  out.what_if = simulate_training(config, changed);
  return out;
}

}  // namespace tandem
