#include "experiment/tune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>

#include "analysis/statistics.h"
#include "core/error.h"
#include "core/parse.h"
#include "engine/pipeline_schedule.h"
#include "experiment/calibrate.h"
#include "experiment/workload.h"
#include "model/layout.h"
#include "simulate/simulator.h"

namespace tandem {

namespace {

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool divides(int d, int n) { return d > 0 && n % d == 0; }

}  // namespace

double TuneCandidate::measured_s() const { return summarize(samples_s).median; }
double TuneCandidate::measured_j() const { return summarize(energy_j).median; }
double TuneCandidate::score(TuneObjective objective) const {
  return objective == TuneObjective::kEnergy ? measured_j() : measured_s();
}

TuneSpace TuneSpace::defaults(const TrainConfig& base, int cpus) {
  TuneSpace s;
  s.strategies = {"sequential", "layerwise", "bucketed", "chunked:2",
                  "chunked:4",  "zero1",     "zero2",    "fsdp"};
  // Caps above the gradient's size all make one bucket (after the first): keep the
  // smallest of them, and always the default's 25 MiB.
  const double gradient_mb = static_cast<double>(base.model.parameter_count()) * 4 / (1 << 20);
  bool covered = false;
  for (const double mb : {1.0, 5.0, 25.0, 100.0}) {
    if (mb < gradient_mb || !covered || mb == 25) s.bucket_mb.push_back(mb);
    covered = covered || mb >= gradient_mb;
  }
  s.prefetch = {1, 2};
  s.reshard = {true, false};
  for (const int m : {1, 2, 4, 8}) {
    if (divides(m, base.batch)) s.micro_batches.push_back(m);
  }
  const int units = ModelLayout(base.model).units();
  for (int p = 1; p <= base.ranks && p <= units; p *= 2) {
    if (divides(p, base.ranks)) s.pipeline.push_back(p);
  }
  s.schedules = {"gpipe", "1f1b", "interleaved:2"};
  for (int t = 1; t == 1 || t * base.ranks <= cpus; t *= 2) s.threads.push_back(t);
  // Tensor parallelism where the engine takes it (validate: a transformer whose heads, MLP
  // width and vocabulary T divides, T dividing the ranks).
  s.tensor = {1};
  for (int t = 2; t <= base.ranks; t *= 2) {
    TrainConfig c = base;
    c.model.tensor = t;
    c.batch = base.batch * t;
    try {
      validate(c, /*runs_here=*/false);
      s.tensor.push_back(t);
    } catch (const UsageError&) {
    }
  }
  s.sequence_parallel = {false, true};
  s.tp_overlap = {false, true};
  return s;
}

void TuneSpace::set(std::string_view text) {
  const std::string flag = "--space " + std::string(text);
  const auto eq = text.find('=');
  if (eq == std::string_view::npos) throw UsageError(flag + ": expected KEY=V1,V2,...");
  const std::string key(trim(text.substr(0, eq)));
  std::vector<std::string> values;
  for (const std::string& v : split(text.substr(eq + 1), ',')) {
    if (trim(v).empty()) throw UsageError(flag + ": an empty value");
    if (std::find(values.begin(), values.end(), trim(v)) != values.end()) {
      throw UsageError(flag + ": '" + std::string(trim(v)) + "' given twice");
    }
    values.emplace_back(trim(v));
  }
  const auto ints = [&](int lo, int hi) {
    std::vector<int> out;
    for (const std::string& v : values) {
      out.push_back(static_cast<int>(parse_int_in(v, "--space " + key, lo, hi)));
    }
    return out;
  };
  if (key == "strategy") {
    for (const std::string& v : values) {
      try {
        (void)Strategy::parse(v);
      } catch (const UsageError& e) {
        throw UsageError(flag + ": " + e.what());
      }
    }
    strategies = values;
  } else if (key == "bucket-mb") {
    bucket_mb.clear();
    for (const std::string& v : values) {
      bucket_mb.push_back(
          parse_double_in(v, "--space bucket-mb", {.min = 0, .max = 1 << 20, .min_open = true}));
    }
  } else if (key == "prefetch") {
    prefetch = ints(0, 64);
  } else if (key == "reshard") {
    reshard.clear();
    for (const std::string& v : values) {
      if (v != "yes" && v != "no") throw UsageError(flag + ": reshard is yes or no, not " + v);
      reshard.push_back(v == "yes");
    }
  } else if (key == "micro-batches") {
    micro_batches = ints(1, 4096);
  } else if (key == "pipeline") {
    pipeline = ints(1, 1024);
  } else if (key == "schedule") {
    for (const std::string& v : values) {
      try {
        (void)parse_schedule(v);
      } catch (const UsageError& e) {
        throw UsageError(flag + ": " + e.what());
      }
    }
    schedules = values;
  } else if (key == "threads") {
    threads = ints(1, 1024);
  } else if (key == "tensor") {
    tensor = ints(1, 1024);
  } else if (key == "sequence-parallel" || key == "tp-overlap") {
    std::vector<bool>& axis = key == "tp-overlap" ? tp_overlap : sequence_parallel;
    axis.clear();
    for (const std::string& v : values) {
      if (v != "yes" && v != "no") throw UsageError(flag + ": " + key + " is yes or no, not " + v);
      axis.push_back(v == "yes");
    }
  } else {
    throw UsageError(flag + ": unknown key '" + key + "' (one of: " + std::string(kTuneKeys) + ")");
  }
}

std::vector<TuneCandidate> tune_candidates(const TrainConfig& base, const TuneSpace& space,
                                           bool split_auto, bool runs_here) {
  std::vector<TuneCandidate> out;
  const auto add = [&](TuneCandidate c) {
    try {
      validate(c.config, runs_here);
    } catch (const UsageError& e) {
      c.refused = e.what();
    }
    out.push_back(std::move(c));
  };
  // Tensor parallelism's variants of every candidate: T, sequence parallelism, overlap
  // (which applies with sequence parallelism only, as prefetch applies to fsdp only).
  struct TensorVariant {
    int tensor = 1;
    bool sequence = false, overlap = false;
  };
  std::vector<TensorVariant> tensor_variants;
  for (const int t : space.tensor.empty() ? std::vector<int>{1} : space.tensor) {
    if (t == 1) {
      tensor_variants.push_back({});
      continue;
    }
    for (const bool sp : space.sequence_parallel) {
      for (const bool ovl : space.tp_overlap) {
        if (!ovl || sp) tensor_variants.push_back({t, sp, ovl});
      }
    }
  }
  // T ranks hold one replica: T times the rows per replica keep the samples per step. With
  // a single replica the strategies have nothing to average: only the default's is kept.
  const auto add_variants = [&](const TuneCandidate& c) {
    for (const TensorVariant& v : tensor_variants) {
      if (v.tensor == 1) {
        add(c);
        continue;
      }
      // T x P ranks that do not divide the run's are no layout of it: not a candidate.
      if (base.ranks % (v.tensor * c.config.pipeline.stages) != 0) continue;
      const bool one_replica = base.ranks / (v.tensor * c.config.pipeline.stages) == 1;
      const bool default_sync = c.config.reducer.plan.strategy.kind == StrategyKind::kBucketed &&
                                c.config.reducer.plan.bucket_cap_bytes == 25 << 20;
      if (one_replica && !default_sync) continue;
      TuneCandidate split = c;
      split.config.model.tensor = v.tensor;
      split.config.model.sequence_parallel = v.sequence;
      split.config.model.tp_overlap = v.overlap;
      split.config.batch *= v.tensor;
      split.config.pipeline.split_auto = false;  // --split auto measures an unsplit model
      split.is_default = false;
      split.point.emplace_back("tensor", std::to_string(v.tensor));
      split.point.emplace_back("sequence-parallel", v.sequence ? "yes" : "no");
      split.point.emplace_back("tp-overlap", v.overlap ? "yes" : "no");
      std::erase_if(split.flags,
                    [](const auto& f) { return f.first == "--batch" || f.first == "--split"; });
      split.flags.emplace_back("--tensor", std::to_string(v.tensor));
      if (v.sequence) split.flags.emplace_back("--sequence-parallel", "");
      if (v.overlap) split.flags.emplace_back("--tp-overlap", "");
      split.flags.emplace_back("--batch", std::to_string(split.config.batch));
      add(std::move(split));
    }
  };
  const bool vary_threads = space.threads.size() > 1;
  for (const int threads : space.threads) {
    const auto with_threads = [&](TuneCandidate& c) {
      c.config.blas_threads = threads;
      if (vary_threads || threads != base.blas_threads) {
        c.point.emplace_back("threads", std::to_string(threads));
        c.flags.emplace_back("--threads", std::to_string(threads));
      }
    };
    for (const int m : space.micro_batches) {
      for (const std::string& name : space.strategies) {
        const Strategy strategy = Strategy::parse(name);
        // One candidate per bucket cap (bucketed), per prefetch and resharding (fsdp).
        std::vector<TuneCandidate> variants(1);
        TuneCandidate& first = variants.front();
        first.config = base;
        first.config.reducer.plan.strategy = strategy;
        first.point.emplace_back("strategy", name);
        first.flags.emplace_back("--strategy", name);
        if (strategy.kind == StrategyKind::kBucketed) {
          variants.assign(space.bucket_mb.size(), first);
          for (std::size_t i = 0; i < space.bucket_mb.size(); ++i) {
            const double mb = space.bucket_mb[i];
            variants[i].config.reducer.plan.bucket_cap_bytes =
                static_cast<std::int64_t>(mb * (1 << 20));
            variants[i].point.emplace_back("bucket-mb", number_text(mb));
            variants[i].flags.emplace_back("--bucket-mb", number_text(mb));
            variants[i].is_default = mb == 25;
          }
        } else if (strategy.kind == StrategyKind::kFsdp) {
          std::vector<TuneCandidate> fsdp;
          for (const int p : space.prefetch) {
            for (const bool r : space.reshard) {
              TuneCandidate c = first;
              c.config.shard = {.prefetch = p, .reshard_after_forward = r};
              c.point.emplace_back("prefetch", std::to_string(p));
              c.point.emplace_back("reshard", r ? "yes" : "no");
              c.flags.emplace_back("--prefetch", std::to_string(p));
              if (!r) c.flags.emplace_back("--no-reshard-after-forward", "");
              fsdp.push_back(std::move(c));
            }
          }
          variants = std::move(fsdp);
        }
        for (TuneCandidate& c : variants) {
          c.point.emplace_back("micro-batches", std::to_string(m));
          if (m > 1) {
            c.config.pipeline.micro_batches = m;
            c.flags.emplace_back("--micro-batches", std::to_string(m));
          }
          c.is_default = c.is_default && m == 1 && threads == base.blas_threads;
          with_threads(c);
          add_variants(c);
        }
      }
      for (const int stages : space.pipeline) {
        if (stages == 1) continue;
        for (const std::string& schedule : space.schedules) {
          // P stages on ranks / P replicas: P times the rows per replica keep the samples
          // per step, cut into m x P micro-batches.
          TuneCandidate c;
          c.config = base;
          c.config.pipeline.stages = stages;
          c.config.pipeline.schedule = parse_schedule(schedule);
          c.config.pipeline.micro_batches = m * stages;
          c.config.pipeline.split_auto = split_auto;
          c.config.batch = base.batch * stages;
          c.point = {{"pipeline", std::to_string(stages)},
                     {"schedule", schedule},
                     {"micro-batches", std::to_string(m)}};
          c.flags = {{"--pipeline", std::to_string(stages)},
                     {"--schedule", schedule},
                     {"--micro-batches", std::to_string(m * stages)},
                     {"--batch", std::to_string(c.config.batch)}};
          if (split_auto) c.flags.emplace_back("--split", "auto");
          with_threads(c);
          add_variants(c);
        }
      }
    }
  }
  if (std::none_of(out.begin(), out.end(), [](const TuneCandidate& c) { return c.is_default; })) {
    TuneCandidate c;
    c.config = base;
    c.config.reducer.plan.strategy = Strategy{};
    c.config.reducer.plan.bucket_cap_bytes = 25 << 20;
    c.point = {{"strategy", "bucketed"}, {"bucket-mb", "25"}, {"micro-batches", "1"}};
    c.flags = {{"--strategy", "bucketed"}, {"--bucket-mb", "25"}};
    c.is_default = true;
    add(std::move(c));
  }
  return out;
}

HalvingPlan plan_halving(int first, double budget_s, int final_steps, int min_steps,
                         const std::function<double(int, int)>& cost_s, int least) {
  const auto plan_for = [&](int n0) {
    HalvingPlan p;
    for (int n = n0;; n = std::max(2, (n + 2) / 3)) {
      p.candidates.push_back(n);
      if (n <= 2) break;
    }
    const int rounds = static_cast<int>(p.candidates.size());
    for (int r = 0; r < rounds; ++r) {
      int steps = final_steps;
      for (int k = r; k < rounds - 1; ++k) steps /= 3;
      steps = std::min(final_steps, std::max(min_steps, steps));
      const int passes = r == rounds - 1 ? std::min(kFinalPasses, steps) : 1;
      // Passes of equal length that hold at least the round's steps (an odd --steps
      // measured one step fewer in halves).
      p.steps.push_back((steps + passes - 1) / passes);
      p.passes.push_back(passes);
      const int n = p.candidates[static_cast<std::size_t>(r)];
      for (int k = 0; k < n; ++k) p.cost_s += passes * cost_s(k, p.steps.back());
      p.cost_s += passes * cost_s(n0, p.steps.back());  // the default
    }
    return p;
  };
  least = std::min(first, least);
  for (int n0 = first; n0 > least; --n0) {
    HalvingPlan p = plan_for(n0);
    if (p.cost_s <= budget_s) {
      if (n0 < first) p.limit = PlanLimit::kBudget;
      return p;
    }
  }
  HalvingPlan p = plan_for(std::max(least, 1));
  if (p.candidates.front() < first) p.limit = PlanLimit::kBudget;
  return p;
}

double grid_cost(int count, int final_steps, const std::function<double(int, int)>& cost_s) {
  double s = 0;
  for (int k = 0; k < count; ++k) s += cost_s(k, final_steps);
  return s;
}

// Note [a quarter of the grid]: tune is worth running only where it costs much less than
// measuring every configuration (the grid, `tune --exhaustive`), and the issue that asked
// for it set the bar at a quarter of the grid's time, the default's characterization
// included. Where the simulator's predictions are flat (a small transformer on two ranks:
// 76 configurations predicted within 6% of each other), the first round's family picks and
// close seconds alone came to 28, and the search to 26-27% of the grid. So the plan tune
// makes by itself shrinks its first round, the worst predicted close seconds first (they
// come last in Note [family picks]), until the whole search is predicted within
// kGridShareAim, a fifth: the search and the grid are measured minutes apart on a machine
// whose step times move by as much between them (the default's step 112 and 140 ms in a
// search and its grid; searches planned at 24-25% of the grid measured 22-28% of it, so
// a plan at a quarter would keep to a quarter half the time). Never below the best of
// every family (the guard against the simulator misjudging a whole family) nor
// kLeastFirstRound: a small space, or a short --steps, whose characterization alone may
// cost a quarter of its grid, is measured as the budget allows.
HalvingPlan plan_search(int first, int least, int count, double spent_s, double budget_s,
                        int final_steps, int min_steps,
                        const std::function<double(int, int)>& cost_s) {
  const double grid_s = grid_cost(count, final_steps, cost_s);
  HalvingPlan p = plan_halving(first, budget_s, final_steps, min_steps, cost_s);
  const double share_s = kGridShareAim * grid_s - spent_s;
  least = std::min(p.candidates.front(), least);
  if (p.cost_s > share_s && p.candidates.front() > least) {
    HalvingPlan q =
        plan_halving(p.candidates.front(), share_s, final_steps, min_steps, cost_s, least);
    q.limit = PlanLimit::kGridShare;
    p = std::move(q);
  }
  p.grid_cost_s = grid_s;
  return p;
}

std::string TuneCandidate::family() const {
  std::string out;
  for (const auto& [key, value] : point) {
    if (key == "strategy" || key == "pipeline" || key == "schedule" || key == "tensor" ||
        key == "sequence-parallel" || key == "tp-overlap") {
      out += (out.empty() ? "" : " ") + key + "=" + value;
    }
  }
  return out;
}

namespace {

// The candidates not refused, by predicted time (ties in list order).
std::vector<int> ranked_by_prediction(const std::vector<TuneCandidate>& candidates) {
  std::vector<int> ranked;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    if (candidates[static_cast<std::size_t>(i)].refused.empty()) ranked.push_back(i);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) {
    return candidates[static_cast<std::size_t>(a)].predicted_s <
           candidates[static_cast<std::size_t>(b)].predicted_s;
  });
  return ranked;
}

// Note [family picks]: what the first round measures before anything else. The
// simulator's errors are alike within a family (a pipeline's bubble, a strategy's
// collectives), so its ranking across families is the least trustworthy: the best
// predicted of each family comes first (the best families first). Within a family the
// members differ in what the calibration sees least well (micro-batches, bucket caps),
// so where the second best is predicted within kSiblingTolerance of the best, it follows.
constexpr double kSiblingTolerance = 0.10;

std::vector<int> family_picks(const std::vector<TuneCandidate>& candidates,
                              const std::vector<int>& ranked) {
  std::map<std::string, int> best;  // family -> its best predicted
  std::set<std::string> second_seen;
  std::vector<int> firsts, seconds;
  for (const int i : ranked) {
    const TuneCandidate& c = candidates[static_cast<std::size_t>(i)];
    const std::string family = c.family();
    const auto it = best.find(family);
    if (it == best.end()) {
      best.emplace(family, i);
      firsts.push_back(i);
    } else if (second_seen.insert(family).second &&
               c.predicted_s <= (1 + kSiblingTolerance) *
                                    candidates[static_cast<std::size_t>(it->second)].predicted_s) {
      seconds.push_back(i);
    }
  }
  firsts.insert(firsts.end(), seconds.begin(), seconds.end());
  return firsts;
}

}  // namespace

std::vector<int> measuring_order(const std::vector<TuneCandidate>& candidates) {
  const std::vector<int> ranked = ranked_by_prediction(candidates);
  std::vector<int> order = family_picks(candidates, ranked);
  const std::set<int> picked(order.begin(), order.end());
  for (const int i : ranked) {
    if (!picked.contains(i)) order.push_back(i);
  }
  return order;
}

int default_first_round(const std::vector<TuneCandidate>& candidates) {
  const std::vector<int> ranked = ranked_by_prediction(candidates);
  const int picks = static_cast<int>(family_picks(candidates, ranked).size());
  return std::min(static_cast<int>(ranked.size()), std::max(kLeastFirstRound, picks));
}

int least_first_round(const std::vector<TuneCandidate>& candidates) {
  const std::vector<int> ranked = ranked_by_prediction(candidates);
  std::set<std::string> families;
  for (const int i : ranked) families.insert(candidates[static_cast<std::size_t>(i)].family());
  return std::min(static_cast<int>(ranked.size()),
                  std::max(kLeastFirstRound, static_cast<int>(families.size())));
}

std::string TuneMeasurement::id() const {
  return "r" + std::to_string(round) + "." + std::to_string(candidate) +
         (pass > 0 ? "." + std::to_string(pass) : "");
}

nlohmann::json TuneMeasurement::to_json() const {
  return {{"candidate", candidate}, {"round", round}, {"steps", steps}, {"pass", pass}};
}

TuneMeasurement TuneMeasurement::from_json(const nlohmann::json& j) {
  return {.candidate = j.at("candidate").get<int>(),
          .round = j.at("round").get<int>(),
          .steps = j.at("steps").get<int>(),
          .pass = j.value("pass", 0)};
}

TuneSearch::TuneSearch(std::vector<TuneCandidate> candidates, HalvingPlan plan,
                       TuneObjective objective)
    : candidates_(std::move(candidates)), plan_(std::move(plan)), objective_(objective) {
  for (int i = 0; i < static_cast<int>(candidates_.size()); ++i) {
    const TuneCandidate& c = candidates_[static_cast<std::size_t>(i)];
    if (c.is_default) {
      // Every answer is measured against it.
      if (!c.refused.empty()) {
        throw UsageError("the default configuration (" + c.label() + ") cannot run: " + c.refused);
      }
      default_ = i;
    }
  }
  TANDEM_CHECK(default_ >= 0);
  if (!plan_.candidates.empty()) start_round(0);
}

void TuneSearch::start_round(int round) {
  const int keep = plan_.candidates[static_cast<std::size_t>(round)];
  std::vector<int> pool;
  if (round > 0) {
    // The previous round's candidates by what they measured, fastest first.
    pool = in_round_;
    std::stable_sort(pool.begin(), pool.end(), [&](int a, int b) {
      return candidates_[static_cast<std::size_t>(a)].score(objective_) <
             candidates_[static_cast<std::size_t>(b)].score(objective_);
    });
  }
  in_round_.clear();
  // Note [family picks]: the first round in measuring order.
  if (round == 0) pool = measuring_order(candidates_);
  for (const int i : pool) {
    if (static_cast<int>(in_round_.size()) >= keep) break;
    in_round_.push_back(i);
  }
  // The default is measured in every round, so that every answer compares with it on
  // the same machine at the same time.
  if (std::find(in_round_.begin(), in_round_.end(), default_) == in_round_.end()) {
    in_round_.push_back(default_);
  }
  done_in_round_ = 0;
  pass_ = 0;
}

std::optional<TuneMeasurement> TuneSearch::next() const {
  if (round_ >= static_cast<int>(plan_.candidates.size())) return std::nullopt;
  return TuneMeasurement{.candidate = in_round_[done_in_round_],
                         .round = round_,
                         .steps = plan_.steps[static_cast<std::size_t>(round_)],
                         .pass = pass_};
}

void TuneSearch::record(const TuneMeasurement& m, const std::vector<double>& samples_s,
                        double wall_s, double energy_j) {
  const std::optional<TuneMeasurement> expected = next();
  TANDEM_CHECK(expected && expected->candidate == m.candidate && expected->round == m.round &&
               expected->pass == m.pass);
  TuneCandidate& c = candidates_[static_cast<std::size_t>(m.candidate)];
  c.samples_s.insert(c.samples_s.end(), samples_s.begin(), samples_s.end());
  if (!std::isnan(energy_j)) c.energy_j.push_back(energy_j);
  if (m.pass == 0) ++c.rounds;
  ++c.measurements;
  wall_s_ += wall_s;
  if (++done_in_round_ == in_round_.size()) {
    done_in_round_ = 0;
    if (++pass_ < plan_.passes_of(round_)) return;
    ++round_;
    if (round_ < static_cast<int>(plan_.candidates.size())) start_round(round_);
  }
}

int TuneSearch::remaining() const {
  const int rounds = static_cast<int>(plan_.candidates.size());
  if (round_ >= rounds) return 0;
  int left = static_cast<int>(in_round_.size()) * (plan_.passes_of(round_) - pass_) -
             static_cast<int>(done_in_round_);
  for (int r = round_ + 1; r < rounds; ++r) {
    left += (plan_.candidates[static_cast<std::size_t>(r)] + 1) * plan_.passes_of(r);
  }
  return left;
}

TuneAnswer TuneSearch::answer() const {
  TuneAnswer a;
  a.objective = objective_;
  a.default_index = default_;
  // The last round with every candidate measured (all of them once the search is done).
  std::vector<int> finalists;
  for (const int i : in_round_) {
    if (candidates_[static_cast<std::size_t>(i)].rounds > 0) finalists.push_back(i);
  }
  std::stable_sort(finalists.begin(), finalists.end(), [&](int x, int y) {
    return candidates_[static_cast<std::size_t>(x)].score(objective_) <
           candidates_[static_cast<std::size_t>(y)].score(objective_);
  });
  a.sequential_s = sequential_s_;
  a.default_s = candidates_[static_cast<std::size_t>(default_)].measured_s();
  if (objective_ == TuneObjective::kEnergy) {
    a.default_j = candidates_[static_cast<std::size_t>(default_)].measured_j();
    a.sequential_j = sequential_j_;
  }
  if (finalists.empty()) return a;
  a.best = finalists.front();
  if (finalists.size() > 1) a.runner_up = finalists[1];
  const TuneCandidate& best = candidates_[static_cast<std::size_t>(a.best)];
  a.best_s = best.measured_s();
  if (objective_ == TuneObjective::kEnergy) a.best_j = best.measured_j();
  const double best_score = best.score(objective_);
  a.default_is_best = a.best == default_;
  a.gap =
      a.runner_up < 0
          ? kUndefined
          : candidates_[static_cast<std::size_t>(a.runner_up)].score(objective_) / best_score - 1;
  const Summary s =
      summarize(objective_ == TuneObjective::kEnergy ? best.energy_j : best.samples_s);
  a.spread = (s.p90 - s.p10) / 2 / s.median;
  return a;
}

Calibration calibrate_from(const Characterization& c, const TrainConfig& base,
                           const std::vector<MeasuredRun>& more) {
  std::vector<MeasuredRun> runs = more;
  std::map<Scenario, std::size_t> at;  // in runs
  for (const ScenarioRun& run : c.runs) {
    at[run.scenario] = runs.size();
    MeasuredRun m{.what = "the default's " + std::string(to_string(run.scenario)),
                  .config = scenario_config(base, run.scenario),
                  .timeline = run.timeline,
                  .warmup = c.warmup};
    m.config.steps = c.warmup + c.iterations;
    m.step_s = median_e2e_s(m.timeline, m.warmup);
    runs.push_back(std::move(m));
  }
  const ScenarioMetrics& mm = c.metrics;
  ContentionSample contention{.comp_iso = mm.t_comp_iso_ns.median / 1e9,
                              .comp_ovl = mm.t_comp_ovl_ns.median / 1e9,
                              .comp_beside = mm.t_ovl_ns.median / 1e9,
                              .comm_iso = mm.t_comm_iso_ns.median / 1e9,
                              .comm_ovl = mm.t_comm_ovl_ns.median / 1e9,
                              .comm_beside = mm.t_ovl_ns.median / 1e9,
                              .what = "the default's scenarios"};
  time_training_contention(contention, runs, at);
  return fit_calibration(compute_samples(runs), comm_samples(runs), {contention},
                         give_back_samples(runs), spread_samples(runs), issuer_samples(runs));
}

void predict_candidates(std::vector<TuneCandidate>& candidates, const Cluster& cluster,
                        const std::function<void(std::size_t, std::size_t)>& progress) {
  std::size_t done = 0;
  for (TuneCandidate& c : candidates) {
    if (progress && done > 0) progress(done, candidates.size());
    ++done;
    if (!c.refused.empty()) continue;
    TrainConfig config = c.config;
    config.steps = 4;
    try {
      const TrainResult r = simulate_training(config, SimulateOptions{.cluster = cluster});
      c.predicted_s = median_step_period_s(r.timeline, 1);  // Note [step period]
      c.memory_bytes = 0;
      for (const RankMemory& m : r.memory) {
        const StateBytes& s = m.state;
        c.memory_bytes = std::max(
            c.memory_bytes,
            static_cast<double>(s.persistent() + s.activations + s.gathered_peak + s.grads_peak));
      }
    } catch (const UsageError& e) {
      c.refused = e.what();
    }
  }
}

namespace {

nlohmann::json ms(double seconds) { return number_or_null(seconds * 1e3); }

}  // namespace

nlohmann::json to_json(const TuneCandidate& c) {
  nlohmann::json flags = nlohmann::json::array();
  for (const auto& [flag, value] : c.flags) {
    flags.push_back(value.empty() ? flag : flag + " " + value);
  }
  const Summary s = summarize(c.samples_s);
  std::vector<double> samples_ms;
  for (const double v : c.samples_s) samples_ms.push_back(v * 1e3);
  return {{"id", c.id()},
          {"label", c.label()},
          {"flags", flags},
          {"default", c.is_default},
          {"refused", c.refused.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.refused)},
          {"predicted_ms", c.refused.empty() ? ms(c.predicted_s) : nlohmann::json(nullptr)},
          {"memory_bytes", c.refused.empty() ? number_or_null(c.memory_bytes) : nullptr},
          {"rounds", c.rounds},
          {"measurements", c.measurements},
          {"measured_ms",
           {{"median", ms(s.median)}, {"p10", ms(s.p10)}, {"p90", ms(s.p90)}, {"count", s.count}}},
          {"samples_ms", samples_ms},
          {"energy_j_per_step", c.energy_j.empty() ? nlohmann::json(nullptr)
                                                   : nlohmann::json{{"median", c.measured_j()},
                                                                    {"samples", c.energy_j}}}};
}

nlohmann::json to_json(const TuneAnswer& a, const std::vector<TuneCandidate>& candidates) {
  const auto id = [&](int i) {
    return i < 0 ? nlohmann::json(nullptr)
                 : nlohmann::json(candidates[static_cast<std::size_t>(i)].id());
  };
  return {{"best", id(a.best)},
          {"runner_up", id(a.runner_up)},
          {"default", id(a.default_index)},
          {"best_ms", ms(a.best_s)},
          {"default_ms", ms(a.default_s)},
          {"sequential_ms", ms(a.sequential_s)},
          {"objective", a.objective == TuneObjective::kEnergy ? "energy" : "time"},
          {"best_j_per_step", number_or_null(a.best_j)},
          {"default_j_per_step", number_or_null(a.default_j)},
          {"sequential_j_per_step", number_or_null(a.sequential_j)},
          {"gap_to_runner_up", number_or_null(a.gap)},
          {"spread", number_or_null(a.spread)},
          {"default_is_best", a.default_is_best},
          {"sure", a.best >= 0 && a.runner_up >= 0 && a.sure()}};
}

std::vector<int> pareto_front(const std::vector<TuneCandidate>& candidates) {
  std::vector<int> measured;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    if (!candidates[static_cast<std::size_t>(i)].samples_s.empty()) measured.push_back(i);
  }
  std::stable_sort(measured.begin(), measured.end(), [&](int a, int b) {
    const TuneCandidate& x = candidates[static_cast<std::size_t>(a)];
    const TuneCandidate& y = candidates[static_cast<std::size_t>(b)];
    return std::pair(x.measured_s(), x.memory_bytes) < std::pair(y.measured_s(), y.memory_bytes);
  });
  std::vector<int> front;
  double least = INFINITY;
  for (const int i : measured) {
    if (candidates[static_cast<std::size_t>(i)].memory_bytes < least) {
      front.push_back(i);
      least = candidates[static_cast<std::size_t>(i)].memory_bytes;
    }
  }
  return front;
}

}  // namespace tandem
