// `tandem tune` (docs/TUNE.md): the fastest configuration of a training run, found by
// ranking a space of configurations with the calibrated simulator and measuring the most
// promising on real steps with successive halving.
//
// The pieces, each pure so that a test can drive it with numbers it chose:
//   TuneSpace      the axes (strategy, bucket size, fsdp's prefetch and resharding,
//                  micro-batches, pipeline stages and schedule, threads per rank) and
//                  the candidates they make from the user's run, every one with the same
//                  samples per step over every replica;
//   plan_halving   how many candidates a budget affords, and the steps of each round;
//   TuneSearch     the state of a search: which measurement comes next, what each
//                  measured, and the answer (the best, never slower than the default,
//                  against the default and sequential, and how sure).
// Running the measurements, and who decides in a job of several processes, is the CLI's
// (apps/tandem/tune_command.cpp): the leader asks TuneSearch and tells every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/trainer.h"
#include "experiment/calibrate.h"
#include "experiment/characterize.h"
#include "report/sweep_point.h"
#include "simulate/calibration.h"

namespace tandem {

// What tune minimizes: the median step time, or the energy per step where power is
// measured (every power source of rank 0's host summed over the measured steps).
enum class TuneObjective : std::uint8_t { kTime, kEnergy };

inline constexpr std::string_view kTuneKeys =
    "strategy bucket-mb prefetch reshard micro-batches pipeline schedule threads tensor "
    "sequence-parallel tp-overlap";

// What tune varies. Every axis has a default chosen from the run (below); --space
// KEY=V1,V2 replaces one.
struct TuneSpace {
  std::vector<std::string> strategies;  // as --strategy takes them
  std::vector<double> bucket_mb;        // bucketed only
  std::vector<int> prefetch;            // fsdp only
  std::vector<bool> reshard;            // fsdp only: reshard after forward
  std::vector<int> micro_batches;       // M per replica; a pipeline of P stages runs M x P
  std::vector<int> pipeline;            // stages (1: none)
  std::vector<std::string> schedules;   // pipelines only
  std::vector<int> threads;             // BLAS threads per rank
  std::vector<int> tensor;              // --tensor T (1: none)
  std::vector<bool> sequence_parallel;  // tensor > 1 only
  std::vector<bool> tp_overlap;         // tensor > 1 with sequence parallelism only

  // The default axes for `base` on a machine with `cpus` hardware threads:
  // every strategy, bucket caps of 1, 5, 25 and 100 MiB (the caps above the model's
  // gradient but the smallest of them make the same plan and are left out), prefetch 1
  // and 2, both reshardings, 1, 2, 4 and 8 micro-batches where they divide the batch,
  // pipelines of 1, 2, 4, ... stages where they divide the ranks and fit the units, gpipe,
  // 1f1b and interleaved:2, threads per rank from 1 up to cpus / ranks in powers of 2, and
  // tensor parallelism of 1, 2, 4, ... ranks where validate() takes the run with it (the
  // engine's rules: T divides the ranks, the heads, the MLP width and the vocabulary; a
  // transformer), each without and with sequence parallelism and overlap.
  static TuneSpace defaults(const TrainConfig& base, int cpus);
  // Replaces the axis of one "KEY=V1,V2" (as --sweep writes it); UsageError naming --space.
  void set(std::string_view text);
};

inline constexpr double kUndefinedScore = std::numeric_limits<double>::quiet_NaN();

// One configuration: the user's run with some flags changed.
struct TuneCandidate {
  SweepPoint point;  // (key, value) in kTuneKeys order, only the keys that apply
  // The flags of `tandem train` that make it ("--strategy", "zero2"; a switch has "").
  std::vector<std::pair<std::string, std::string>> flags;
  TrainConfig config;
  bool is_default = false;  // bucketed, 25 MiB, one micro-batch, no pipeline
  std::string refused;  // why it is never tried (it does not fit, it cannot run); "": a candidate
  double predicted_s = 0;         // the simulator's step time
  double memory_bytes = 0;        // per rank, the largest: state, activations, gathered peaks
  std::vector<double> samples_s;  // measured steps (E2E), every round pooled
  std::vector<double> energy_j;   // joules per step, one per measurement (energy objective)
  int rounds = 0;                 // rounds it was measured in
  int measurements = 0;           // measurements made (a round's passes each count)
  double measured_s() const;      // the median of samples_s (NaN: never measured)
  double measured_j() const;      // the median of energy_j (NaN: none)
  // What `objective` minimizes: measured_s() or measured_j().
  double score(TuneObjective objective) const;

  std::string id() const { return point_id(point); }
  std::string label() const { return describe(point); }
  // "strategy=zero2", "pipeline=2 schedule=1f1b": what the first round has one of each.
  std::string family() const;
};

// The candidates of `space` on `base`, in a fixed order (every rank of a job makes the same
// list). Every candidate runs global_batch(base) samples per step: a pipeline of P stages
// gets P times the rows per replica, tensor parallelism over T ranks T times (T ranks hold
// one replica); with a single replica the strategies' candidates are one (bucketed, 25 MiB:
// nothing to average). The default is always among them (added if the
// space leaves it out). `split_auto`: pipelines balance their stages by measured unit
// times (--split auto), else by FLOPs. Configurations that validate(config, runs_here)
// refuses (they do not fit this machine's memory, or cannot run) are kept, refused, with
// its reason.
std::vector<TuneCandidate> tune_candidates(const TrainConfig& base, const TuneSpace& space,
                                           bool split_auto, bool runs_here = true);

// Successive halving (with a factor of 3, as Hyperband's rounds): round r measures n_r
// candidates for steps_r steps each and keeps the fastest third (by the median of
// everything each measured so far; at least 2), until 2 are left; the steps triple round
// by round up to `final_steps` in the last (at least `min_steps` in the first), measured
// there in kFinalPasses alternating passes of final_steps / kFinalPasses steps. The default
// is measured in every round besides them.
// The last round measures its candidates in kFinalPasses passes, alternating (A B D A B
// D): a shared machine's slow spells, seconds long, then fall on all of them alike
// instead of on whichever was being measured.
inline constexpr int kFinalPasses = 2;
// What made a plan's first round smaller than asked: nothing, the budget, or kGridShare.
enum class PlanLimit { kNone, kBudget, kGridShare };
struct HalvingPlan {
  std::vector<int> candidates;  // per round, the default aside
  std::vector<int> steps;       // per round: steps of one measurement
  std::vector<int> passes;      // per round: measurements of each candidate (empty: 1 each)
  double cost_s = 0;            // predicted seconds of measuring
  double grid_cost_s = 0;       // predicted seconds of the grid (plan_search; else 0)
  PlanLimit limit = PlanLimit::kNone;
  int passes_of(int round) const {
    return passes.empty() ? 1 : passes[static_cast<std::size_t>(round)];
  }
};
// `cost_s(rank, steps)`: predicted seconds to measure the rank-th candidate of the first
// round for `steps` steps (its warm-up and setup included; rank `first` is the default).
// The plan for `first` candidates, or for fewer when it would not fit `budget_s` (never
// fewer than `least`, 2 by default, where there are).
HalvingPlan plan_halving(int first, double budget_s, int final_steps, int min_steps,
                         const std::function<double(int rank, int steps)>& cost_s, int least = 2);

// The grid's predicted cost: every one of `count` candidates for `final_steps` steps.
double grid_cost(int count, int final_steps,
                 const std::function<double(int rank, int steps)>& cost_s);
inline constexpr double kGridShare = 0.25;
// What the plan aims at, so that the search measures within kGridShare: step times on a
// shared machine move by a fifth between the search and the grid (a search planned at
// 24-25% took 22-28% of the grid's measured time; Note [a quarter of the grid]).
inline constexpr double kGridShareAim = 0.20;
inline constexpr int kLeastFirstRound = 8;
// The plan tune makes by itself (no --candidates; Note [a quarter of the grid] in
// tune.cpp): plan_halving for `first` within `budget_s`, shrunk further, to `least`
// candidates at least (least_first_round), until `spent_s` (the default's
// characterization) and the plan together are predicted at most kGridShareAim of the
// grid, every one of the `count` candidates measured for `final_steps` steps.
HalvingPlan plan_search(int first, int least, int count, double spent_s, double budget_s,
                        int final_steps, int min_steps,
                        const std::function<double(int rank, int steps)>& cost_s);

// The runnable candidates in the order the search's first round takes them (Note [family
// picks] in tune.cpp: every family's best, the best families first, then the close
// seconds), then the others by prediction: a round of k measures the first k, and a plan
// is priced by them (plan_halving's cost_s).
std::vector<int> measuring_order(const std::vector<TuneCandidate>& candidates);

// The first round's size by default: the best predicted of every family (a strategy, or a
// pipeline's stages and schedule, so that one family the simulator misjudges is still
// measured) and each family's second best where predicted within 10% of its best (Note
// [family picks] in tune.cpp), and at least kLeastFirstRound where there are.
int default_first_round(const std::vector<TuneCandidate>& candidates);
// What kGridShare may cut that first round to: the best predicted of every family, and at
// least kLeastFirstRound where there are.
int least_first_round(const std::vector<TuneCandidate>& candidates);

// One measurement to make: a candidate, measured for `steps` steps in round `round`.
struct TuneMeasurement {
  int candidate = 0;  // index into the candidates
  int round = 0;
  int steps = 0;
  int pass = 0;  // which of the round's passes
  // "r<round>.<candidate index>" (".<pass>" after the first pass): the resumable point's name
  std::string id() const;
  nlohmann::json to_json() const;
  static TuneMeasurement from_json(const nlohmann::json& j);
};

struct TuneAnswer {
  TuneObjective objective = TuneObjective::kTime;
  int best = -1;       // index of the recommended candidate
  int runner_up = -1;  // the next best of the last round (-1: none)
  int default_index = -1;
  double best_s = 0, default_s = 0;  // medians
  double sequential_s = 0;           // the default's sequential scenario (NaN: not measured)
  // The energy objective's joules per step (NaN for the time objective).
  double best_j = kUndefinedScore, default_j = kUndefinedScore, sequential_j = kUndefinedScore;
  // In the objective's terms: runner-up / best - 1, and (p90 - p10) / 2 / median of the
  // best's samples (its steps' times, or its measurements' energies).
  double gap = 0;
  double spread = 0;
  bool default_is_best = false;
  bool sure() const { return gap > spread; }
};

class TuneSearch {
 public:
  // `candidates` with predictions (refused ones are never measured); `plan` from
  // plan_halving. The first round measures the best predicted candidate of each family
  // (the best families first), then each family's second best where predicted within 10%
  // of its best, then the next best predicted, up to the plan's count.
  TuneSearch(std::vector<TuneCandidate> candidates, HalvingPlan plan,
             TuneObjective objective = TuneObjective::kTime);

  // What to measure next; nullopt when the search is done.
  std::optional<TuneMeasurement> next() const;
  // The steps of a measurement (E2E seconds, warm-up left out), its wall time and, for
  // the energy objective, its joules per step.
  void record(const TuneMeasurement& m, const std::vector<double>& samples_s, double wall_s,
              double energy_j = kUndefinedScore);
  // The default's sequential scenario, measured with the calibration (NaN: none).
  void set_sequential(double seconds, double joules = kUndefinedScore) {
    sequential_s_ = seconds;
    sequential_j_ = joules;
  }
  TuneObjective objective() const { return objective_; }

  // The fastest of the last round measured; the default when nothing beat it.
  TuneAnswer answer() const;

  const std::vector<TuneCandidate>& candidates() const { return candidates_; }
  const HalvingPlan& plan() const { return plan_; }
  int round() const { return round_; }
  double measured_wall_s() const { return wall_s_; }
  // Measurements left in this plan (for progress).
  int remaining() const;

 private:
  void start_round(int round);

  std::vector<TuneCandidate> candidates_;
  HalvingPlan plan_;
  int default_ = -1;
  int round_ = 0;
  std::vector<int> in_round_;  // candidates of the current round, in measuring order
  std::size_t done_in_round_ = 0;  // in the current pass
  int pass_ = 0;
  TuneObjective objective_;
  double sequential_s_ = 0;
  double sequential_j_ = kUndefinedScore;
  double wall_s_ = 0;
};

// The simulator's calibration from the four scenarios of one characterized configuration
// (`base`, as characterized): compute from compute-only, collectives from comm-only,
// contention from the overlapped scenario against both (simulate/calibration.h); and
// from `more` measured runs besides (a compute-only run of the same model in smaller
// micro-batches: the passes' FLOPs and bytes in another ratio, without which every
// sample of a model of equal layers has the same one and the GEMM rate and the memory
// bandwidth cannot be told apart). Throws UsageError when a parameter cannot be fitted
// (no collective: one rank).
Calibration calibrate_from(const Characterization& c, const TrainConfig& base,
                           const std::vector<MeasuredRun>& more = {});

// Each candidate that is not refused, simulated for a few steps on `cluster`: its step
// time (the median period after the first step: Note [step period]) and its memory per
// rank. One the simulator refuses (it does not fit the device's memory) is refused with
// the simulator's reason. `progress` (if set) hears before each candidate but the first
// how many are done, of how many.
void predict_candidates(std::vector<TuneCandidate>& candidates, const Cluster& cluster,
                        const std::function<void(std::size_t, std::size_t)>& progress = {});

// summary.json's "tune" body pieces.
nlohmann::json to_json(const TuneCandidate& c);
nlohmann::json to_json(const TuneAnswer& a, const std::vector<TuneCandidate>& candidates);

// The Pareto front of (measured time, memory) over the measured candidates: indices, by time.
std::vector<int> pareto_front(const std::vector<TuneCandidate>& candidates);

}  // namespace tandem
