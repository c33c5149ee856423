#include "experiment/calibrate.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "analysis/intervals.h"
#include "analysis/metrics.h"
#include "analysis/pipeline_metrics.h"
#include "analysis/statistics.h"
#include "core/error.h"
#include "ddp/sharded.h"
#include "ddp/stage_sync.h"
#include "engine/trainer.h"
#include "model/layout.h"
#include "model/model_ops.h"
#include "report/train_report.h"
#include "timeline/chrome_trace.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

// Note [a step pays the mean]
// A fit's sample of a pass or a collective stands for every time it ran, and a step pays
// their sum: the mean, not the median. On the 2-core VM a rank's compute in a step
// wandered by up to 50% from step to step (29.7-45.2 ms for the same passes of one run),
// slow stretches that a median leaves out and a step does not. Two validation runs
// (scripts/validate-simulate), each fitted both ways: held out 13.0% -> 10.5% and 9.9% ->
// 9.3% at the median, in-sample 9.8% -> 9.6% and 9.4% -> 11.0%. The replay prices by the
// mean too (Typical); the hand-off of a tensor group's collectives is a mean already.
constexpr Typical kFitTypical = Typical::kMean;

// The median of analysis/statistics.h, 0 for no samples.
double median_of(const std::vector<double>& v) { return v.empty() ? 0 : summarize(v).median; }

nlohmann::json read_json(const fs::path& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in)
    throw UsageError(flag + " " + path.parent_path().string() + ": no " + path.filename().string() +
                     " (not a results directory tandem wrote)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(flag + " " + path.string() + ": not JSON (" + e.what() + ")");
  }
}

Timeline read_trace(const fs::path& path, const std::string& flag) {
  if (!fs::exists(path)) throw UsageError(flag + " " + path.string() + ": missing");
  try {
    return read_chrome_trace(path.string());
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(flag + " " + path.string() + ": " + e.what());
  }
}

}  // namespace

std::vector<double> e2e_seconds(const Timeline& timeline, int warmup) {
  std::vector<double> e2e;
  for (const StepMetrics& m : compute_step_metrics(timeline)) {
    if (m.step >= warmup) e2e.push_back(m.e2e_ns / 1e9);
  }
  return e2e;
}

double median_e2e_s(const Timeline& timeline, int warmup) {
  return median_of(e2e_seconds(timeline, warmup));
}

std::vector<double> step_periods(const Timeline& timeline, int warmup) {
  struct Bounds {
    std::int64_t start = INT64_MAX, compute_start = INT64_MAX, end = INT64_MIN;
    std::int64_t first() const { return compute_start != INT64_MAX ? compute_start : start; }
  };
  std::map<std::pair<int, int>, Bounds> of;  // (rank, step)
  for (const Span& s : timeline.spans) {
    if (s.step < 0) continue;
    Bounds& b = of[{s.rank, s.step}];
    b.start = std::min(b.start, s.start_ns);
    if (s.lane == Lane::kCompute) b.compute_start = std::min(b.compute_start, s.start_ns);
    b.end = std::max(b.end, s.end_ns);
  }
  std::map<int, double> slowest;
  for (const auto& [key, b] : of) {
    const auto [rank, step] = key;
    if (step < warmup) continue;
    const auto next = of.find({rank, step + 1});
    const std::int64_t until = next != of.end() ? next->second.first() : b.end;
    double& s = slowest[step];
    s = std::max(s, static_cast<double>(until - b.first()) / 1e9);
  }
  std::vector<double> out;
  for (const auto& [step, seconds] : slowest) out.push_back(seconds);
  return out;
}

double median_step_period_s(const Timeline& timeline, int warmup) {
  return median_of(step_periods(timeline, warmup));
}

namespace {

double median_field(const nlohmann::json& steps, const char* key) {
  std::vector<double> v;
  for (const auto& s : steps) v.push_back(s.at(key).get<double>() / 1e9);
  return median_of(v);
}

// Why a measured configuration cannot calibrate the simulator yet, or be replayed; "" if it
// can. A replay takes a run over an emulated --link as it was measured (its transfers' times
// hold the emulated wire, and the run's own fit of its link is that wire's); a calibration
// would fit the emulation instead of the machine.
std::string unusable(const TrainConfig& c, const nlohmann::json& config, bool replay) {
  if (!replay && config.value("link_emulated", false)) {
    return "an emulated --link is not simulated yet";
  }
  if (c.device != Device::kCpu)
    return "runs on " + std::string(to_string(c.device)) +
           " calibrate that device, not this machine's cpu";
  return "";
}

// Per rank of a timeline: the union of one lane's spans from step `warmup` on.
std::map<int, IntervalSet> lane_union(const Timeline& t, Lane lane, int warmup) {
  std::map<int, std::vector<Interval>> spans;
  for (const Span& s : t.spans) {
    if (s.lane == lane && s.step >= warmup) spans[s.rank].push_back({s.start_ns, s.end_ns});
  }
  std::map<int, IntervalSet> out;
  for (auto& [rank, v] : spans) out[rank] = union_of(std::move(v));
  return out;
}

bool overlaps(const IntervalSet& v, std::int64_t start, std::int64_t end) {
  return covered_length(v, {start, end}) > 0;
}

}  // namespace

MeasuredRuns read_measured_runs(const std::vector<std::string>& dirs, const std::string& flag,
                                bool replay) {
  MeasuredRuns out;
  for (const std::string& dir : dirs) {
    const nlohmann::json summary = read_json(fs::path(dir) / "summary.json", flag);
    if (!replay && summary.contains("simulated") && !summary["simulated"].is_null()) {
      throw UsageError(flag + " " + dir + ": a simulation, not a measured run");
    }
    const std::string command = summary.value("command", "");
    if (summary.contains("machine") && summary["machine"].is_object()) {
      const auto& m = summary["machine"];
      if (out.memory_bytes == 0 && m.contains("memory_gib") && m["memory_gib"].is_number()) {
        out.memory_bytes = m["memory_gib"].get<double>() * (1ull << 30);
      }
      if (out.machine.empty()) out.machine = m.value("cpu", "");
      if (out.cores == 0 && m.contains("cores") && m["cores"].is_number_integer()) {
        out.cores = m["cores"].get<int>();
      }
    }
    if (command == "train") {
      MeasuredRun run{.what = dir};
      run.config = train_config_from_json(summary.at("config"), flag + " " + dir);
      if (const std::string why = unusable(run.config, summary["config"], replay); !why.empty()) {
        out.skipped.push_back(dir + ": " + why);
        continue;
      }
      run.warmup = run.config.steps = summary["config"].value("steps", 0);
      run.warmup -= summary.value("measured_steps", run.config.steps);
      run.timeline = read_trace(fs::path(dir) / "trace.json", flag);
      run.step_s = median_e2e_s(run.timeline, run.warmup);
      run.backend = summary["config"].value("backend", "");
      out.runs.push_back(std::move(run));
    } else if (command == "characterize") {
      for (const auto& point : summary.at("points")) {
        const std::string id = point.at("id").get<std::string>();
        const nlohmann::json& config = point.at("config");
        const std::string what = dir + " point " + id;
        const nlohmann::json& scenarios = point.at("scenarios");
        const auto contention_of = [&]() -> std::optional<ContentionSample> {
          if (!scenarios.contains("overlapped") || !scenarios.contains("compute-only") ||
              !scenarios.contains("comm-only")) {
            return std::nullopt;
          }
          const auto& ovl = scenarios["overlapped"]["steps"];
          const double overlap = median_field(ovl, "t_ovl_ns");
          return ContentionSample{
              .comp_iso = median_field(scenarios["compute-only"]["steps"], "t_comp_ns"),
              .comp_ovl = median_field(ovl, "t_comp_ns"),
              .comp_beside = overlap,
              .comm_iso = median_field(scenarios["comm-only"]["steps"], "t_comm_ns"),
              .comm_ovl = median_field(ovl, "t_comm_ns"),
              .comm_beside = overlap,
              .what = what};
        };
        if (config.value("workload", "") != "train") {
          // The GEMM + all-reduce microbenchmark (and any workload's four scenarios)
          // still shows contention; its spans are not a training step's.
          if (const auto c = contention_of()) {
            out.contention.push_back(*c);
          } else {
            out.skipped.push_back(what + ": a " + config.value("workload", "?") +
                                  " workload without the four scenarios");
          }
          continue;
        }
        const TrainConfig base = train_config_from_json(config, flag + " " + what);
        if (const std::string why = unusable(base, config, replay); !why.empty()) {
          out.skipped.push_back(what + ": " + why);
          continue;
        }
        std::map<Scenario, std::size_t> at;  // in out.runs
        for (const Scenario scenario : kAllScenarios) {
          const std::string name(to_string(scenario));
          if (!scenarios.contains(name)) continue;
          at[scenario] = out.runs.size();
          MeasuredRun run{
              .what = what + " " + name, .point = id, .config = scenario_config(base, scenario)};
          run.warmup = point.at("warmup").get<int>();
          run.config.steps = run.warmup + point.at("iterations").get<int>();
          run.timeline = read_trace(fs::path(dir) / "points" / id / (name + ".trace.json"), flag);
          run.step_s = median_field(scenarios[name].at("steps"), "e2e_ns");
          run.backend = config.value("backend", "");
          if (scenario == Scenario::kOverlapped && point.contains("metrics") &&
              point["metrics"].contains("e2e_ideal_ns") &&
              point["metrics"]["e2e_ideal_ns"].contains("median") &&
              point["metrics"]["e2e_ideal_ns"]["median"].is_number()) {
            run.e2e_ideal_s = point["metrics"]["e2e_ideal_ns"]["median"].get<double>() / 1e9;
          }
          out.runs.push_back(std::move(run));
        }
        // A tensor-parallel point's passes hold their group's collectives: not a sample of
        // how the data-parallel ones slow compute.
        if (auto c = contention_of(); c && base.model.tensor == 1) {
          time_training_contention(*c, out.runs, at);
          out.contention.push_back(*c);
        }
      }
    } else {
      throw UsageError(flag + " " + dir + ": a " + (command.empty() ? "?" : command) +
                       " result; calibration reads train and characterize runs");
    }
  }
  if (out.memory_bytes <= 0) out.memory_bytes = 1e12;  // not recorded: no memory refusal
  return out;
}

namespace {

// A pass of a unit is its spans of one (rank, step, micro-batch): a transformer block
// records its norms, attention and mlp apart. Keyed (kind, unit, rank, step, micro); the
// loss is the last unit's tag + 1 (U), forward and backward apart; the optimizer -1.
using PassKey = std::tuple<SpanKind, int, int, int, int>;
std::map<PassKey, std::vector<const Span*>> passes_of(const MeasuredRun& run) {
  std::map<PassKey, std::vector<const Span*>> out;
  if (!run.config.compute) return out;
  const int U = ModelLayout(run.config.model).units();
  for (const Span& s : run.timeline.spans) {
    if (s.lane != Lane::kCompute || s.step < run.warmup || s.end_ns <= s.start_ns) continue;
    if (s.kind != SpanKind::kForward && s.kind != SpanKind::kBackward &&
        s.kind != SpanKind::kOptimizer) {
      continue;
    }
    if (s.kind != SpanKind::kOptimizer && (s.tag < 0 || s.tag > U)) continue;
    const int tag = s.kind == SpanKind::kOptimizer ? -1 : s.tag;
    out[{s.kind, tag, s.rank, s.step, s.micro}].push_back(&s);
  }
  return out;
}

double seconds_of(const std::vector<const Span*>& spans) {
  std::int64_t ns = 0;
  for (const Span* s : spans) ns += s->duration_ns();
  return static_cast<double>(ns) / 1e9;
}

// Whether no collective of `rank` (`comm`: each rank's comm lane, lane_union) overlapped
// any of a pass's spans.
bool clean_pass(const std::map<int, IntervalSet>& comm, int rank,
                const std::vector<const Span*>& spans) {
  const auto it = comm.find(rank);
  return it == comm.end() || std::none_of(spans.begin(), spans.end(), [&](const Span* s) {
           return overlaps(it->second, s->start_ns, s->end_ns);
         });
}

}  // namespace

double typical_of(const std::vector<double>& seconds, Typical typical) {
  if (seconds.empty()) return 0;
  const Summary s = summarize(seconds);
  return typical == Typical::kMedian ? s.median : s.mean;
}

std::map<std::pair<SpanKind, int>, double> pass_seconds(const MeasuredRun& run, bool clean_only,
                                                        Typical typical) {
  const auto comm = lane_union(run.timeline, Lane::kComm, run.warmup);
  std::map<std::pair<SpanKind, int>, std::vector<double>> groups;
  for (const auto& [key, spans] : passes_of(run)) {
    const auto [kind, tag, rank, step, micro] = key;
    if (clean_only && !clean_pass(comm, rank, spans)) continue;
    groups[{kind, tag}].push_back(seconds_of(spans));
  }
  std::map<std::pair<SpanKind, int>, double> out;
  for (const auto& [key, seconds] : groups) out[key] = typical_of(seconds, typical);
  return out;
}

double update_seconds(const MeasuredRun& run, bool clean_only, Typical typical) {
  const auto comm = lane_union(run.timeline, Lane::kComm, run.warmup);
  const StagePlan plan = stage_plan(run.config);
  const int tensor = std::max(1, run.config.model.tensor);
  // Per stage: its updates, and those no collective overlapped.
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> by_stage;
  for (const auto& [key, spans] : passes_of(run)) {
    const auto [kind, tag, rank, step, micro] = key;
    if (kind != SpanKind::kOptimizer) continue;
    // The stage of the rank's outer rank (Note [rank order] in engine/tensor_parallel.h).
    auto& [all, clear] = by_stage[plan.stage_of(rank / tensor)];
    all.push_back(seconds_of(spans));
    if (clean_pass(comm, rank, spans)) clear.push_back(all.back());
  }
  // A stage whose updates a receive posted ahead always overlapped (the next step's
  // first, on a pipeline's first stage) is taken as measured: without it the sum would
  // be another stage's alone.
  double seconds = 0;
  for (const auto& [stage, times] : by_stage) {
    const auto& [all, clear] = times;
    seconds += typical_of(clean_only && !clear.empty() ? clear : all, typical);
  }
  if (plan.shape.stages == 1) return seconds;
  // Stages keep gpt's tied embedding twice (on the embedding's stage and the head's): the
  // sum is of the elements they keep, scaled to the model's.
  const ModelLayout layout(run.config.model);
  std::size_t kept = 0;
  for (const auto& [stage, times] : by_stage) {
    kept +=
        stage_kept_numel(layout, stage_kept_units(layout, plan.owned_units(stage, layout.units())));
  }
  return kept == 0 ? seconds
                   : seconds * static_cast<double>(layout.numel()) / static_cast<double>(kept);
}

namespace {

constexpr std::string_view kTensorSpan = "tp";  // to_string(ModelOp::kTensor)

bool is_tensor_span(const Timeline& t, const Span& s) {
  return t.names->name(s.name) == kTensorSpan;
}

// Per (kind, tag, bytes), per occurrence in a step: the median seconds of the collectives
// `pick` keeps, each matched across the ranks of its communicator (Span::group, and the
// pipeline stage) and occurrence, from the latest member's start to the latest end (a collective
// moves once every member has started it: the simulator's rule). `blocked`: each collective's time
// is instead the longest its members stood blocked on it: the wait span around its start on each
// member (the post, the queue before the communication thread took it, the transfer and the
// waiter's wake-up), as a collective waited for in place costs the pass.
// A run's wait spans from its warm-up on, by rank in order of start: which one a rank was
// blocked in at a time.
class WaitSpans {
 public:
  WaitSpans() = default;  // none
  explicit WaitSpans(const MeasuredRun& run) {
    for (const Span& s : run.timeline.spans) {
      if (s.lane == Lane::kWait && s.step >= run.warmup) by_rank_[s.rank].push_back(&s);
    }
    for (auto& [rank, v] : by_rank_) {
      std::sort(v.begin(), v.end(),
                [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    }
  }
  // The wait of `rank` that began last at or before `t`, if it had not ended before `t`.
  const Span* around(std::int32_t rank, std::int64_t t) const {
    const auto it = by_rank_.find(rank);
    if (it == by_rank_.end()) return nullptr;
    const auto& v = it->second;
    const auto w = std::upper_bound(v.begin(), v.end(), t,
                                    [](std::int64_t x, const Span* s) { return x < s->start_ns; });
    if (w == v.begin() || (*std::prev(w))->end_ns < t) return nullptr;
    return *std::prev(w);
  }

 private:
  std::map<std::int32_t, std::vector<const Span*>> by_rank_;
};

// Every instance of a collective in a run from its warm-up on: its kind, tag and bytes,
// its occurrence k among the same (kind, tag, bytes) in its step, and each member's span,
// for the collectives `pick` takes (a rank's k-th span of a collective is its k-th
// instance). The stage (ranks T x P x D, T innermost) keys it as well as the group: a
// simulation's spans name no communicator. A collective without a tag (gpt's tied
// embedding, summed over the first and the last stage of one replica) is keyed by its
// replica instead. A collective one rank recorded is no instance.
template <typename Pick, typename Fn>
void for_each_collective(const MeasuredRun& run, Pick pick, Fn fn) {
  const int tensor = std::max(1, run.config.model.tensor);
  const StagePlan plan = stage_plan(run.config);
  std::map<std::tuple<SpanKind, int, std::int64_t, int, std::uint32_t, int>,
           std::map<std::int32_t, std::vector<const Span*>>>
      by_rank;
  for (const Span& s : run.timeline.spans) {
    if (s.lane != Lane::kComm || s.step < run.warmup || s.end_ns <= s.start_ns || s.bytes <= 0 ||
        !is_collective(s.kind) || !pick(s)) {
      continue;
    }
    const int outer = s.rank / tensor;  // Note [rank order] in engine/tensor_parallel.h
    const int place = s.tag < 0 ? -1 - outer / plan.shape.stages : plan.stage_of(outer);
    by_rank[{s.kind, s.tag, s.bytes, s.step, s.group, place}][s.rank].push_back(&s);
  }
  std::vector<const Span*> members;
  for (auto& [key, ranks] : by_rank) {
    if (ranks.size() < 2) continue;
    std::size_t occurrences = SIZE_MAX;
    for (auto& [rank, spans] : ranks) {
      std::sort(spans.begin(), spans.end(),
                [](const Span* x, const Span* y) { return x->start_ns < y->start_ns; });
      occurrences = std::min(occurrences, spans.size());
    }
    const auto& [kind, tag, bytes, step, group, place] = key;
    for (std::size_t k = 0; k < occurrences; ++k) {
      members.clear();
      for (const auto& [rank, spans] : ranks) members.push_back(spans[k]);
      fn(kind, tag, bytes, k, members);
    }
  }
}

// A collective instance's window: from its last member's start to its last end, when it
// moved (before it, a member that started early waited for the others).
std::pair<std::int64_t, std::int64_t> moving(const std::vector<const Span*>& members) {
  std::int64_t start = INT64_MIN, end = INT64_MIN;
  for (const Span* s : members) {
    start = std::max(start, s->start_ns);
    end = std::max(end, s->end_ns);
  }
  return {start, end};
}

template <typename Pick>
TransferTimes collective_times(const MeasuredRun& run, const std::map<int, IntervalSet>& compute,
                               bool clean_only, bool blocked, Typical typical, Pick pick) {
  const WaitSpans waits = blocked ? WaitSpans(run) : WaitSpans();
  const auto blocked_ns = [&](const Span& s) {
    const Span* w = waits.around(s.rank, s.start_ns);
    return w == nullptr ? s.end_ns - s.start_ns : w->end_ns - w->start_ns;
  };
  const auto clean = [&](const Span& s) {
    const auto it = compute.find(s.rank);
    return it == compute.end() || !overlaps(it->second, s.start_ns, s.end_ns);
  };
  std::map<std::tuple<SpanKind, int, std::int64_t>, std::vector<std::vector<double>>> groups;
  for_each_collective(run, pick,
                      [&](SpanKind kind, int tag, std::int64_t bytes, std::size_t k,
                          const std::vector<const Span*>& members) {
                        auto& per = groups[{kind, tag, bytes}];
                        if (per.size() <= k) per.resize(k + 1);
                        const auto [start, end] = moving(members);
                        std::int64_t longest = 0;
                        bool all_clean = true;
                        for (const Span* s : members) {
                          if (blocked) longest = std::max(longest, blocked_ns(*s));
                          all_clean = all_clean && clean(*s);
                        }
                        const std::int64_t ns = blocked ? longest : end - start;
                        if ((clean_only && !all_clean) || ns <= 0) return;
                        per[k].push_back(static_cast<double>(ns) / 1e9);
                      });
  TransferTimes out;
  for (const auto& [key, per] : groups) {
    for (const auto& seconds : per) {
      out[key].push_back(seconds.empty() ? -1.0 : typical_of(seconds, typical));
    }
  }
  return out;
}

// Per (kind, tag, bytes), per occurrence in a step: the mean of what `samples(members, out)`
// appends for each instance of the collective (0 where none did).
template <typename Samples>
TransferTimes mean_per_collective(const MeasuredRun& run, Samples samples) {
  std::map<std::tuple<SpanKind, int, std::int64_t>, std::vector<std::vector<double>>> groups;
  for_each_collective(
      run, [&](const Span& s) { return !is_tensor_span(run.timeline, s); },
      [&](SpanKind kind, int tag, std::int64_t bytes, std::size_t k,
          const std::vector<const Span*>& members) {
        auto& per = groups[{kind, tag, bytes}];
        if (per.size() <= k) per.resize(k + 1);
        samples(members, per[k]);
      });
  TransferTimes out;
  for (const auto& [key, per] : groups) {
    for (const auto& seconds : per) out[key].push_back(typical_of(seconds, Typical::kMean));
  }
  return out;
}

}  // namespace

// Note [collectives started late]
// A rank's communication thread takes the collectives posted to it in order; the
// simulator starts a collective once every member has posted it and, on one channel,
// finished the ones before (or at once: SimulateOptions::collectives_at_once). On a CPU
// rank the thread shares the training thread's core and may not run until the training
// thread blocks: with the mpi backend, bucketed DDP's second bucket of mlp:4x1024 and
// layerwise's buckets started 3-5 ms after they were posted, behind a whole backward pass,
// every step; with the local backend an fsdp reduce-scatter started 1.7 ms late in some
// steps and on time in others. The replay starts each collective the mean of its delays
// after it could (Transfer::start_delay): the mean, as such delays fall on different
// collectives from step to step while the step time holds (a median per occurrence would
// be the 5-50 us most of them took). The other way round, a training thread waiting for a
// collective may not be woken until the communication thread, going on to the next one,
// leaves the core: fsdp's training thread waited 0.54 ms past the end of a gather while
// the next one was copied. A rank resumes the mean of those wake-ups after the collective
// it waits for ends (Transfer::wake_up; collective_wake_ups). With both, fsdp across mpi
// ranks and namespace hosts replayed 1.5-2.5% short instead of 5-7%; on the local backend
// 8-9% still.
// Note [point-to-point transfers late]
// A pipeline's sends and receives wait on the same shared core as its collectives: a send
// posted just before the optimizer started when the communication thread got the core
// back, 344 us later (the trace's queued_ns), and a stage waiting for its next
// micro-batch resumed 35-56 us after the receive ended, four or five times a step on the
// schedule's critical path. Timed from the later of the two posts to the receive's end,
// the transfers leave both out, and a 2-stage 1f1b replayed 2-4% short at the median
// step, 7% short in the step with the late send. Each step's transfers of a size start
// the mean of their sends' delays after they could, and a stage waiting for one resumes
// the mean of its receives' wake-ups after it ends: the mean, as such delays fall on one
// transfer of a step and not on the others.
namespace {

// A receive from the warm-up on and the send it answers (null: none found, or a
// --tp-overlap ring step's, which transfer_seconds times otherwise).
struct PipelineTransfer {
  const Span* receive = nullptr;
  const Span* send = nullptr;
  bool ring = false;  // a --tp-overlap ring step's receive
};

// Note [pipeline transfers replayed]: a pipeline's receive is posted ahead (a stage
// receives its next micro-batch while it computes), so its span holds the wait for the
// peer's send as well. Its send is the latest send of the same step, micro-batch and bytes
// from another rank that started before the receive ended, not yet claimed by an earlier
// receive (a stage's gradient for a micro-batch cannot leave before the activation it
// answers arrived). Every receive, in order of end.
std::vector<PipelineTransfer> pipeline_transfers(const MeasuredRun& run) {
  std::map<std::tuple<int, int, std::int64_t>, std::vector<const Span*>> sends;
  std::vector<PipelineTransfer> out;
  for (const Span& s : run.timeline.spans) {
    if (s.lane != Lane::kComm || s.step < run.warmup || s.bytes <= 0) continue;
    if (s.kind == SpanKind::kSend && !is_tensor_span(run.timeline, s)) {
      sends[{s.step, s.tag, s.bytes}].push_back(&s);
    } else if (s.kind == SpanKind::kRecv && s.end_ns > s.start_ns) {
      out.push_back({.receive = &s, .ring = is_tensor_span(run.timeline, s)});
    }
  }
  std::ranges::sort(out, {}, [](const PipelineTransfer& t) { return t.receive->end_ns; });
  std::set<const Span*> claimed;
  for (PipelineTransfer& t : out) {
    const Span& r = *t.receive;
    const auto it = sends.find({r.step, r.tag, r.bytes});
    if (t.ring || it == sends.end()) continue;
    for (const Span* x : it->second) {
      if (x->rank != r.rank && x->start_ns <= r.end_ns && !claimed.contains(x) &&
          (t.send == nullptr || x->start_ns > t.send->start_ns)) {
        t.send = x;
      }
    }
    if (t.send != nullptr) claimed.insert(t.send);
  }
  return out;
}

// Per (kSend, -1, bytes): one mean of `sample` over a run's pipeline transfers (not ring
// steps).
TransferTimes mean_per_p2p(
    const std::vector<PipelineTransfer>& transfers,
    const std::function<std::optional<double>(const PipelineTransfer&)>& sample) {
  std::map<std::int64_t, std::vector<double>> by_bytes;
  for (const PipelineTransfer& t : transfers) {
    if (t.ring) continue;
    if (const auto x = sample(t))
      by_bytes[static_cast<std::int64_t>(t.receive->bytes)].push_back(*x);
  }
  TransferTimes out;
  for (const auto& [bytes, v] : by_bytes)
    out[{SpanKind::kSend, -1, bytes}] = {typical_of(v, Typical::kMean)};
  return out;
}

}  // namespace

TransferTimes collective_delays(const MeasuredRun& run, bool at_once) {
  // Per rank, its collectives' (start, end) in order of start: the previous one's end.
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> lane;
  for (const Span& s : run.timeline.spans) {
    if (s.lane == Lane::kComm && is_collective(s.kind) && s.end_ns > s.start_ns)
      lane[s.rank].emplace_back(s.start_ns, s.end_ns);
  }
  for (auto& [rank, spans] : lane) std::sort(spans.begin(), spans.end());
  const auto previous_end = [&](const Span& s) {
    const auto& spans = lane[s.rank];
    const auto it = std::lower_bound(spans.begin(), spans.end(),
                                     std::pair<std::int64_t, std::int64_t>{s.start_ns, INT64_MIN});
    return it == spans.begin() ? INT64_MIN : std::prev(it)->second;
  };
  TransferTimes delays = mean_per_collective(
      run, [&](const std::vector<const Span*>& members, std::vector<double>& out) {
        std::int64_t could = INT64_MIN;
        for (const Span* s : members) {
          if (s->issue_ns <= 0) return;
          could = std::max({could, s->issue_ns, at_once ? INT64_MIN : previous_end(*s)});
        }
        const std::int64_t late = std::max<std::int64_t>(0, moving(members).first - could);
        out.push_back(static_cast<double>(late) / 1e9);
      });
  // Note [point-to-point transfers late]: a send could start once it and its receive were
  // both posted.
  delays.merge(
      mean_per_p2p(pipeline_transfers(run), [](const PipelineTransfer& t) -> std::optional<double> {
        const Span* send = t.send;
        if (send == nullptr || send->issue_ns <= 0) return std::nullopt;
        const Span& r = *t.receive;
        const std::int64_t could =
            std::max(send->issue_ns, r.issue_ns > 0 ? r.issue_ns : r.start_ns);
        return static_cast<double>(std::max<std::int64_t>(0, send->start_ns - could)) / 1e9;
      }));
  return delays;
}

TransferTimes collective_wake_ups(const MeasuredRun& run) {
  const WaitSpans waits(run);
  TransferTimes wake_ups = mean_per_collective(
      run, [&](const std::vector<const Span*>& members, std::vector<double>& out) {
        for (const Span* s : members) {
          const Span* w = waits.around(s->rank, s->end_ns);
          if (w != nullptr && w->tag == s->tag && w->step == s->step)
            out.push_back(static_cast<double>(w->end_ns - s->end_ns) / 1e9);
        }
      });
  // Note [point-to-point transfers late]: a receive's wait is tagged with its micro-batch.
  wake_ups.merge(mean_per_p2p(pipeline_transfers(run),
                              [&](const PipelineTransfer& t) -> std::optional<double> {
                                const Span& r = *t.receive;
                                const Span* w = waits.around(r.rank, r.end_ns);
                                if (w == nullptr || w->tag != r.tag || w->step != r.step)
                                  return std::nullopt;
                                return static_cast<double>(w->end_ns - r.end_ns) / 1e9;
                              }));
  return wake_ups;
}

TransferTimes transfer_seconds(const MeasuredRun& run, bool clean_only, Typical typical) {
  const auto compute = lane_union(run.timeline, Lane::kCompute, run.warmup);
  TransferTimes out =
      collective_times(run, compute, clean_only, /*blocked=*/false, typical,
                       [&](const Span& s) { return !is_tensor_span(run.timeline, s); });
  // A point-to-point transfer is the receiver's span, keyed by its bytes alone, one median
  // for all.
  // Note [ring steps replayed]: a --tp-overlap ring step's is its receive from its issue
  // to the end of the wait its completion fell in (the receive's end where no wait held
  // it). The simulator has one actor for a tensor group, which posts the step and waits for
  // it after the block's product, so what the step costs is what the ranks saw between the
  // two: the queue before the communication thread took it, the peer's send, the transfer
  // and the hand-off to the waiting thread, as the in-place collectives are priced by the
  // time blocked on them. A latency-bound ring's receive spans are a fraction of that
  // (gpt 2x64, --tensor 2: 0.18 ms of receives against 0.78 ms of waiting per step; a
  // replay priced by the spans came 68% short, by this 23%: docs/PERFORMANCE.md).
  const WaitSpans waits(run);
  const auto ring_step_ns = [&](const Span& s) {
    const std::int64_t begin = s.issue_ns > 0 && s.issue_ns < s.start_ns ? s.issue_ns : s.start_ns;
    const Span* w = waits.around(s.rank, s.end_ns);
    return (w == nullptr ? s.end_ns : w->end_ns) - begin;
  };
  // Note [pipeline transfers replayed] (pipeline_transfers): the transfer is timed from the
  // later of the receive's start and its send's. Timed by the receive alone, a 2-stage
  // 1f1b of 4 micro-batches whose 96 KB transfers take 0.1 ms replayed 32% long at 0.75 ms
  // each.
  std::map<std::tuple<SpanKind, int, std::int64_t>, std::vector<double>> p2p;
  for (const PipelineTransfer& t : pipeline_transfers(run)) {
    const Span& s = *t.receive;
    const std::int64_t ns = t.ring              ? ring_step_ns(s)
                            : t.send == nullptr ? s.duration_ns()
                                                : s.end_ns - std::max(s.start_ns, t.send->start_ns);
    const auto it = compute.find(s.rank);
    const bool clean = it == compute.end() || !overlaps(it->second, s.end_ns - ns, s.end_ns);
    if (!clean_only || clean) {
      p2p[{SpanKind::kSend, -1, s.bytes}].push_back(static_cast<double>(ns) / 1e9);
    }
  }
  for (const auto& [key, seconds] : p2p) out[key] = {typical_of(seconds, typical)};
  return out;
}

std::pair<double, double> matched_collective_seconds(const MeasuredRun& a, const MeasuredRun& b) {
  const TransferTimes ta = transfer_seconds(a, /*clean_only=*/false);
  const TransferTimes tb = transfer_seconds(b, /*clean_only=*/false);
  double sum_a = 0, sum_b = 0;
  for (const auto& [key, times] : ta) {
    const auto it = tb.find(key);
    if (it == tb.end() || std::get<0>(key) == SpanKind::kSend) continue;
    for (std::size_t k = 0; k < std::min(times.size(), it->second.size()); ++k) {
      if (times[k] < 0 || it->second[k] < 0) continue;
      sum_a += times[k];
      sum_b += it->second[k];
    }
  }
  return {sum_a, sum_b};
}

PassContention pass_contention(const MeasuredRun& overlapped, const MeasuredRun& compute_only) {
  // Per rank, when it had a collective in flight, its wait for a peer included: the
  // communication thread takes its core from the start.
  const std::map<int, IntervalSet> windows =
      lane_union(overlapped.timeline, Lane::kComm, overlapped.warmup);
  const std::map<std::pair<SpanKind, int>, double> alone =
      pass_seconds(compute_only, /*clean_only=*/false, kFitTypical);
  PassContention out;
  std::vector<double> drift;  // passes no collective ran beside: overlapped / alone
  std::set<std::pair<int, int>> rank_steps;
  for (const auto& [key, spans] : passes_of(overlapped)) {
    const auto [kind, tag, rank, step, micro] = key;
    rank_steps.insert({rank, step});
    const auto it = alone.find({kind, tag});
    if (it == alone.end() || !(it->second > 0)) continue;
    std::int64_t beside = 0;
    if (const auto w = windows.find(rank); w != windows.end()) {
      for (const Span* s : spans) beside += covered_length(w->second, {s->start_ns, s->end_ns});
    }
    const double seconds = seconds_of(spans);
    if (beside == 0) {
      drift.push_back(seconds / it->second);
    } else {
      out.overlapped_s += seconds;
      out.alone_s += it->second;
      out.beside_s += static_cast<double>(beside) / 1e9;
    }
  }
  // Separate runs' compute differs by a few percent from noise alone: the passes no
  // collective ran beside say by how much. Per rank and step, as a scenario's T_comp is.
  const double per = static_cast<double>(std::max<std::size_t>(1, rank_steps.size()));
  out.overlapped_s /= per;
  out.alone_s *= (drift.empty() ? 1 : median_of(drift)) / per;
  out.beside_s /= per;
  return out;
}

void time_training_contention(ContentionSample& sample, const std::vector<MeasuredRun>& runs,
                              const std::map<Scenario, std::size_t>& at) {
  const auto run_of = [&](Scenario s) -> const MeasuredRun* {
    const auto it = at.find(s);
    return it == at.end() ? nullptr : &runs[it->second];
  };
  const MeasuredRun* overlapped = run_of(Scenario::kOverlapped);
  const MeasuredRun* compute_only = run_of(Scenario::kComputeOnly);
  const MeasuredRun* comm_only = run_of(Scenario::kCommOnly);
  if (overlapped == nullptr) return;
  sample.sharded = overlapped->config.reducer.plan.strategy.sharded();
  // Note [contention's collectives]: T_comm counts a collective from this rank's start, so
  // in the overlapped scenario it holds the wait for a peer still computing, which the
  // simulator models on its own (a collective starts when its last member issues it);
  // counted in the slowdown, it made the overlapped collectives look 1-5 times the overlap
  // slower. Timed as the collective samples are, from the last member's start, over the
  // collectives of both scenarios.
  if (comm_only != nullptr) {
    std::tie(sample.comm_ovl, sample.comm_iso) =
        matched_collective_seconds(*overlapped, *comm_only);
  }
  // Note [contention's passes]: the compute pass by pass against the same passes alone,
  // for the time a collective ran beside each; T_comp's difference between two runs was as
  // much noise as contention (a step's compute 1% apart on 230 ms against 5-9 ms of
  // overlap).
  if (compute_only != nullptr) {
    const PassContention p = pass_contention(*overlapped, *compute_only);
    sample.comp_ovl = p.overlapped_s;
    sample.comp_iso = p.alone_s;
    sample.comp_beside = p.beside_s;
  }
}

TransferTimes tensor_transfer_seconds(const MeasuredRun& run, bool clean_only) {
  return collective_times(run, lane_union(run.timeline, Lane::kCompute, run.warmup), clean_only,
                          /*blocked=*/true, Typical::kMedian,
                          [&](const Span& s) { return is_tensor_span(run.timeline, s); });
}

PieceTimes piece_seconds(const MeasuredRun& run, bool clean_only, Typical typical) {
  const auto comm = lane_union(run.timeline, Lane::kComm, run.warmup);
  // (rank, step, micro, kind, unit) -> its spans in order of start.
  std::map<std::tuple<int, int, int, SpanKind, int>, std::vector<const Span*>> passes;
  for (const Span& s : run.timeline.spans) {
    if (s.lane != Lane::kCompute || s.step < run.warmup || s.end_ns <= s.start_ns) continue;
    if (s.kind != SpanKind::kForward && s.kind != SpanKind::kBackward) continue;
    passes[{s.rank, s.step, s.micro, s.kind, s.tag}].push_back(&s);
  }
  std::map<std::tuple<SpanKind, int, std::string, int>, std::vector<double>> groups;
  for (auto& [key, spans] : passes) {
    std::sort(spans.begin(), spans.end(),
              [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    const auto [rank, step, micro, kind, unit] = key;
    std::map<std::string, int> seen;
    for (const Span* s : spans) {
      const std::string name(run.timeline.names->name(s->name));
      const int occurrence = seen[name]++;
      const auto it = comm.find(rank);
      if (clean_only && it != comm.end() && overlaps(it->second, s->start_ns, s->end_ns)) continue;
      groups[{kind, unit, name, occurrence}].push_back(static_cast<double>(s->duration_ns()) / 1e9);
    }
  }
  PieceTimes out;
  for (const auto& [key, seconds] : groups) out[key] = typical_of(seconds, typical);
  return out;
}

namespace {

// A tensor-parallel run's compute samples: its passes are cut by the group's collectives
// (Note [tensor-parallel passes] in simulate/simulator.cpp), so each compute piece is one:
// its FLOPs, bytes and products by weights as unit_costs dealt them out; measured, the
// median of that pass's span of its name and occurrence that no collective overlapped. A
// --tp-overlap ring's blocks are left out (their transfers run beside them), and so is the
// loss's backward (a pass of its own, priced by the pass's bytes as without --tensor).
void tensor_compute_samples(const MeasuredRun& run, const UnitCosts& k,
                            std::vector<ComputeSample>& out) {
  const PieceTimes measured = piece_seconds(run, /*clean_only=*/true, kFitTypical);
  const auto pass = [&](const std::vector<PassPiece>& pieces, SpanKind kind, int unit) {
    for_each_piece_span(
        pieces, kind, unit, run.config.model.tensor,
        [&](const PassPiece& piece, const PieceTimes::key_type& key, int) {
          if (piece.kind != PassPiece::Kind::kCompute) return;
          const auto it = measured.find(key);
          if (it == measured.end() || !(it->second > 0)) return;
          out.push_back({.precision = run.config.precision,
                         .flops = piece.flops,
                         .bytes = piece.streamed,
                         .weight_flops = piece.weight_flops,
                         .weight_bytes = piece.weight_bytes,
                         .seconds = it->second,
                         .what = run.what + ": " + std::string(to_string(std::get<0>(key))) +
                                 " unit " + std::to_string(unit) + " " + std::get<2>(key) + " " +
                                 std::to_string(std::get<3>(key))});
        });
  };
  const int U = static_cast<int>(k.forward.size());
  for (int u = 0; u < U; ++u) {
    pass(k.forward_pieces[static_cast<std::size_t>(u)], SpanKind::kForward, u);
    pass(k.backward_pieces[static_cast<std::size_t>(u)], SpanKind::kBackward, u);
  }
  pass(k.loss_pieces, SpanKind::kForward, U);
  for (const auto& [key, seconds] : pass_seconds(run, /*clean_only=*/true, kFitTypical)) {
    const auto [kind, tag] = key;
    if (kind == SpanKind::kBackward && tag == U) {
      out.push_back({.precision = run.config.precision,
                     .bytes = k.loss_bytes,
                     .seconds = seconds,
                     .what = run.what + ": loss backward"});
    } else if (kind == SpanKind::kOptimizer && !run.config.reducer.plan.strategy.sharded()) {
      out.push_back({.precision = run.config.precision,
                     .bytes = k.optimizer_bytes,
                     .seconds = seconds,
                     .what = run.what + ": optimizer"});
    }
  }
}

}  // namespace

std::vector<ComputeSample> compute_samples(const std::vector<MeasuredRun>& runs) {
  std::vector<ComputeSample> out;
  Cluster unit;  // any rates: only the FLOPs and bytes of unit_costs are used
  unit.device.peak_flops = {1, 1, 1, 1};
  unit.device.memory_bytes_per_s = 1;
  unit.device.gemm_efficiency = 1;
  for (const MeasuredRun& run : runs) {
    if (!run.config.compute) continue;
    const UnitCosts k = unit_costs(run.config, unit);
    const int U = static_cast<int>(k.forward.size());
    if (run.config.model.tensor > 1) {
      tensor_compute_samples(run, k, out);
      continue;
    }
    // A sharded strategy's optimizer updates a shard (in every scenario), not what
    // unit_costs prices: left out.
    const bool sharded_update = run.config.reducer.plan.strategy.sharded();
    // zero2's and fsdp's backward passes rewrite gradients given back, in a step's first
    // micro-batch only: with several, a pass's median is of either kind, so they are left
    // out.
    const bool touches = touched_again(run.config).grads;
    const std::vector<std::int64_t> touched =
        touches ? backward_touched_bytes(
                      ModelLayout(run.config.model, sharded_layout(outer_ranks(run.config))))
                : std::vector<std::int64_t>(static_cast<std::size_t>(U), 0);
    for (const auto& [key, seconds] : pass_seconds(run, /*clean_only=*/true, kFitTypical)) {
      const auto [kind, tag] = key;
      if (kind == SpanKind::kOptimizer && sharded_update) continue;
      ComputeSample sample{.precision = run.config.precision, .seconds = seconds};
      const auto u = static_cast<std::size_t>(std::max(tag, 0));
      std::string name;
      if (kind == SpanKind::kOptimizer) {
        sample.bytes = k.optimizer_bytes;
        // A pipeline's stages summed.
        sample.seconds = update_seconds(run, /*clean_only=*/true, kFitTypical);
        name = "optimizer";
      } else if (tag == U) {
        sample.bytes = k.loss_bytes;
        name = kind == SpanKind::kForward ? "loss" : "loss backward";
      } else if (kind == SpanKind::kForward) {
        sample.flops = k.forward_flops[u];
        sample.bytes = k.forward_bytes[u];
        sample.weight_flops = k.forward_weight_flops[u];
        sample.weight_bytes = k.forward_weight_bytes[u];
        name = "forward unit " + std::to_string(tag);
      } else {
        if (touches && micro_batches(run.config) > 1) continue;
        sample.flops = k.backward_flops[u];
        sample.bytes = k.backward_bytes[u];
        sample.weight_flops = k.backward_weight_flops[u];
        sample.weight_bytes = k.backward_weight_bytes[u];
        sample.touched = static_cast<double>(touched[u]);
        name = "backward unit " + std::to_string(tag);
      }
      sample.what = run.what + ": " + name;
      out.push_back(std::move(sample));
    }
  }
  return out;
}

std::vector<RankSpreadSample> spread_samples(const std::vector<MeasuredRun>& runs) {
  std::vector<RankSpreadSample> out;
  for (const MeasuredRun& run : runs) {
    if (!run.config.compute) continue;
    const int tp = std::max(1, run.config.model.tensor);
    const int stages = std::max(1, run.config.pipeline.stages);
    // (step, stage) -> rank -> compute seconds.
    std::map<std::pair<int, int>, std::map<int, double>> steps;
    for (const Span& s : run.timeline.spans) {
      if (s.lane != Lane::kCompute || s.step < run.warmup) continue;
      steps[{s.step, (s.rank / tp) % stages}][s.rank] += static_cast<double>(s.duration_ns()) / 1e9;
    }
    for (const auto& [key, ranks] : steps) {
      if (ranks.size() < 2) continue;
      RankSpreadSample sample;
      for (const auto& [rank, seconds] : ranks) sample.seconds.push_back(seconds);
      out.push_back(std::move(sample));
    }
  }
  return out;
}

std::vector<IssuerSample> issuer_samples(const std::vector<MeasuredRun>& runs) {
  std::vector<IssuerSample> out;
  for (const MeasuredRun& run : runs) {
    if (!run.config.compute) continue;
    // Per rank, what its training thread did, by start: passes, memory given back, waits.
    std::map<std::int32_t, std::vector<const Span*>> own;
    for (const Span& s : run.timeline.spans) {
      if (s.step < run.warmup) continue;
      if (s.lane == Lane::kCompute || s.lane == Lane::kWait ||
          (s.lane == Lane::kIdle && s.kind == SpanKind::kMemory)) {
        own[s.rank].push_back(&s);
      }
    }
    for (auto& [rank, spans] : own) {
      std::sort(spans.begin(), spans.end(),
                [](const Span* a, const Span* b) { return a->start_ns < b->start_ns; });
    }
    const auto issued = [](const Span* s) { return s->issue_ns > 0 ? s->issue_ns : s->start_ns; };
    // A collective issued while its rank had another in flight waited behind it: the
    // transfer began later, with the rank's next pass under way (the simulator holds no
    // one then), so it says nothing of the hold.
    const std::map<int, IntervalSet> comm = lane_union(run.timeline, Lane::kComm, run.warmup);
    for_each_collective(
        run, [&](const Span& s) { return !is_tensor_span(run.timeline, s); },
        [&](SpanKind, int, std::int64_t, std::size_t, const std::vector<const Span*>& members) {
          const auto [start, end] = moving(members);
          if (end <= start) return;
          const Span* last = *std::max_element(
              members.begin(), members.end(),
              [&](const Span* a, const Span* b) { return issued(a) < issued(b); });
          const auto it = own.find(last->rank);
          if (it == own.end()) return;
          if (const auto c = comm.find(last->rank);
              c != comm.end() && overlaps(c->second, issued(last) - 1, issued(last))) {
            return;
          }
          const auto next =
              std::lower_bound(it->second.begin(), it->second.end(), issued(last),
                               [](const Span* s, std::int64_t t) { return s->start_ns < t; });
          if (next == it->second.end() || (*next)->lane == Lane::kWait) return;
          out.push_back({.held_s = static_cast<double>(std::clamp((*next)->start_ns - start,
                                                                  std::int64_t{0}, end - start)) /
                                   1e9,
                         .moving_s = static_cast<double>(end - start) / 1e9});
        });
  }
  return out;
}

std::vector<double> give_back_samples(const std::vector<MeasuredRun>& runs) {
  std::vector<double> out;
  for (const MeasuredRun& run : runs) {
    for (const Span& s : run.timeline.spans) {
      if (s.lane == Lane::kIdle && s.kind == SpanKind::kMemory && s.step >= run.warmup &&
          run.timeline.names->name(s.name) == to_string(ModelOp::kGiveBack)) {
        out.push_back(static_cast<double>(s.duration_ns()) / 1e9);
      }
    }
  }
  return out;
}

std::vector<CommSample> comm_samples(const std::vector<MeasuredRun>& runs) {
  std::vector<CommSample> out;
  // The comm-only scenario's collectives are the cleanest measurement (every rank issues
  // them at once, nothing computes): where there are any, only they are used.
  const bool comm_only = std::any_of(runs.begin(), runs.end(), [](const MeasuredRun& r) {
    return !r.config.compute && r.config.reducer.mode != CommMode::kOff;
  });
  for (const MeasuredRun& run : runs) {
    if (run.config.reducer.mode == CommMode::kOff || run.config.ranks < 2) continue;
    // A tensor group's collectives, waited for in place: each as long as its ranks stood
    // blocked on it, the hand-off with the transfer (CommSample::handoff).
    const int tensor = run.config.model.tensor;
    if (tensor > 1) {
      for (const auto& [key, occurrences] : tensor_transfer_seconds(run, /*clean_only=*/true)) {
        const auto [kind, tag, bytes] = key;
        for (const double seconds : occurrences) {
          if (seconds < 0) continue;
          out.push_back({.kind = kind,
                         .ranks = tensor,
                         .bytes = static_cast<double>(bytes),
                         .seconds = seconds,
                         .handoff = true,
                         .what = run.what + ": tensor-parallel " + std::string(to_string(kind)) +
                                 " unit " + std::to_string(tag)});
        }
      }
    }
    if (comm_only && run.config.compute) continue;
    // The data-parallel collectives: over the replicas of one stage and tensor position.
    const int members = outer_ranks(run.config) / std::max(1, run.config.pipeline.stages);
    if (members < 2) continue;
    // fsdp's gathers write into units given back (its steps' gathers; between steps none
    // is timed).
    const bool fsdp = touched_again(run.config).params;
    const ModelLayout layout(run.config.model,
                             fsdp ? sharded_layout(outer_ranks(run.config)) : LayoutOptions{});
    for (const auto& [key, occurrences] : transfer_seconds(run, /*clean_only=*/true, kFitTypical)) {
      const auto [kind, tag, bytes] = key;
      if (kind == SpanKind::kSend) continue;  // point to point: not a ring
      const bool touches = fsdp && kind == SpanKind::kAllgather && tag >= 0 && tag < layout.units();
      for (const double seconds : occurrences) {
        if (seconds < 0) continue;
        out.push_back(
            {.kind = kind,
             .ranks = members,
             .bytes = static_cast<double>(bytes),
             .touched = touches ? static_cast<double>(given_back_bytes(layout, tag)) : 0,
             .seconds = seconds,
             .what = run.what + ": " + std::string(to_string(kind)) + " " + std::to_string(tag)});
      }
    }
  }
  return out;
}

namespace {

// Over the steps from `warmup` on: the hidden share, and the mean bubble of a pipeline's
// stages (NaN for one stage).
std::pair<double, double> hidden_and_bubble(const Timeline& timeline, int warmup, int stages) {
  std::vector<StepMetrics> steps;
  for (const StepMetrics& m : compute_step_metrics(timeline)) {
    if (m.step >= warmup) steps.push_back(m);
  }
  const double hidden = hidden_share(steps);
  double bubble = std::numeric_limits<double>::quiet_NaN();
  if (stages > 1) {
    std::vector<double> b;
    for (const StageBubble& s : pipeline_bubbles(timeline, stages)) {
      if (s.step >= warmup) b.push_back(s.bubble());
    }
    if (!b.empty()) bubble = median_of(b);
  }
  return {hidden, bubble};
}

}  // namespace

std::vector<Prediction> predict_runs(const Calibration& calibration, double memory_bytes,
                                     const std::vector<MeasuredRun>& runs) {
  std::vector<Prediction> out;
  for (const MeasuredRun& run : runs) {
    TrainConfig c = run.config;
    c.steps = 3;  // every simulated step is alike after the first
    c.record = true;
    const SimulateOptions options{
        .cluster = calibrated_cluster(calibration, c.ranks, memory_bytes, "calibration")};
    const TrainResult r = simulate_training(c, options);
    Prediction p{
        .what = run.what, .measured_s = run.step_s, .predicted_s = median_e2e_s(r.timeline, 1)};
    const int stages = std::max(1, c.pipeline.stages);
    std::tie(p.measured_hidden, p.measured_bubble) =
        hidden_and_bubble(run.timeline, run.warmup, stages);
    std::tie(p.predicted_hidden, p.predicted_bubble) = hidden_and_bubble(r.timeline, 1, stages);
    out.push_back(p);
  }
  return out;
}

std::string format_predictions(const std::vector<Prediction>& predictions) {
  std::string text =
      "  step ms: measured  predicted   error   hidden: measured  predicted   bubble: measured  "
      "predicted   run\n";
  char line[640];
  std::vector<double> errors;
  const Prediction* worst = nullptr;
  double hidden_gap = 0, bubble_gap = 0;
  const auto percent = [](double v) {
    char b[16];
    if (std::isnan(v)) return std::string("-");
    std::snprintf(b, sizeof b, "%.0f%%", 100 * v);
    return std::string(b);
  };
  for (const Prediction& p : predictions) {
    if (!(p.measured_s > 0)) continue;
    std::snprintf(line, sizeof line,
                  "           %8.2f  %9.2f  %+6.1f%%           %8s  %9s           %8s  %9s   %s\n",
                  p.measured_s * 1e3, p.predicted_s * 1e3, 100 * p.error(),
                  percent(p.measured_hidden).c_str(), percent(p.predicted_hidden).c_str(),
                  percent(p.measured_bubble).c_str(), percent(p.predicted_bubble).c_str(),
                  p.what.c_str());
    text += line;
    errors.push_back(std::abs(p.error()));
    if (worst == nullptr || std::abs(p.error()) > std::abs(worst->error())) worst = &p;
    if (!std::isnan(p.measured_hidden) && !std::isnan(p.predicted_hidden)) {
      hidden_gap = std::max(hidden_gap, std::abs(p.measured_hidden - p.predicted_hidden));
    }
    if (!std::isnan(p.measured_bubble) && !std::isnan(p.predicted_bubble)) {
      bubble_gap = std::max(bubble_gap, std::abs(p.measured_bubble - p.predicted_bubble));
    }
  }
  if (worst != nullptr) {
    std::snprintf(line, sizeof line,
                  "  step time: median |error| %.1f%%, largest %.1f%% (%s), %zu runs; hidden "
                  "share at most %.0f points off, bubble at most %.0f\n",
                  100 * median_of(errors), 100 * std::abs(worst->error()), worst->what.c_str(),
                  errors.size(), 100 * hidden_gap, 100 * bubble_gap);
    text += line;
  }
  return text;
}

}  // namespace tandem
