// Calibration from tandem's own results directories (docs/SIMULATE.md, "Calibration"):
// `tandem simulate --calibrate DIR...` reads measured train and characterize runs, fits
// the simulator's parameters (simulate/calibration.h), and predicts every measured
// configuration on the calibrated machine beside what was measured; `--against DIR...`
// does the same for runs the fit did not see.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/trainer.h"
#include "experiment/workload.h"
#include "model/model_ops.h"
#include "simulate/calibration.h"
#include "simulate/simulator.h"
#include "timeline/recorder.h"

namespace tandem {

// One measured configuration and scenario: a train run, or one scenario of a characterize
// point.
struct MeasuredRun {
  std::string what;    // "runs/a" or "runs/c point bucket-mb=1 overlapped"
  std::string point;   // a characterize point's id ("bucket-mb=1"); empty for a train run
  TrainConfig config;  // as it ran (scenario_config applied)
  Timeline timeline;
  int warmup = 0;       // steps left out
  double step_s = 0;    // median step time (E2E) over the measured steps
  std::string backend;  // "local", "mpi", ... (its config's; empty: not recorded)
  // A characterize point's overlapped scenario: the point's own E2E_ideal (eq. 4, the
  // median of its metric), seconds; NaN otherwise.
  double e2e_ideal_s = std::numeric_limits<double>::quiet_NaN();
};

struct MeasuredRuns {
  std::vector<MeasuredRun> runs;
  std::vector<ContentionSample> contention;  // one per characterize point
  double memory_bytes = 0;                   // of the machine they ran on
  std::string machine;                       // its CPU, for the calibration's source
  int cores = 0;                             // its cores (0: not recorded)
  std::vector<std::string> skipped;          // what was left out, and why
};

// Reads results directories tandem wrote (train: summary.json and trace.json;
// characterize: summary.json and points/*/SCENARIO.trace.json). Throws UsageError naming
// `flag` and the directory for anything else. Device runs are skipped (said in
// `skipped`), and so are runs over an emulated --link unless `replay`.
// `replay`: for a replay, which also takes simulated results (a replay of a simulation
// reproduces it; a calibration from one would fit the simulator to itself) and runs over
// an emulated --link (replayed as measured).
MeasuredRuns read_measured_runs(const std::vector<std::string>& dirs, const std::string& flag,
                                bool replay = false);

// What stands for many measurements of one pass or collective: the mean for a fit and a
// replay, as a step pays the sum of them (Note [a step pays the mean] in calibrate.cpp; a
// replay's over one step's ranks and micro-batches: Note [replayed step by step] in
// experiment/replay.cpp); the median where one odd occurrence must not move a comparison
// (a replay's rank paces, contention's collectives of two scenarios).
enum class Typical : std::uint8_t { kMedian, kMean };
double typical_of(const std::vector<double>& seconds, Typical typical);  // 0 for none

// Per (kind, unit; the loss is the last unit + 1, the optimizer -1): the median (or mean)
// seconds of a run's passes from its warm-up on, each the sum of its spans of one (rank,
// step, micro-batch); `clean_only`: only passes no collective overlapped.
std::map<std::pair<SpanKind, int>, double> pass_seconds(const MeasuredRun& run, bool clean_only,
                                                        Typical typical = Typical::kMedian);
// The seconds of the whole model's update in a step, which UnitCosts::optimizer prices: each
// rank's optimizer spans of a step summed, the median (or mean) over a pipeline stage's
// ranks and steps, summed over the stages and scaled from the elements they keep to the model's (a
// stage updates the units it keeps only; pass_seconds' median over every rank would be
// one stage's or the other's). 0 when none was measured (`clean_only`: none that no
// collective overlapped, or a stage's every update where none was clean).
double update_seconds(const MeasuredRun& run, bool clean_only, Typical typical = Typical::kMedian);
// Per (kind, tag, bytes), per occurrence in a step (in order of start: fsdp gathers a
// unit twice): the median seconds of a run's collectives, from the latest member's start
// to the latest end (-1: no clean one); point-to-point transfers as (kSend, -1, bytes),
// the receiver's span, one median (a --tp-overlap ring step's: from the receive's issue to
// the end of the wait it fell in, Note [ring steps replayed]). `clean_only`: only those no
// pass overlapped.
// Collectives are matched within their communicator (Span::group: the world, a stage's
// replicas, the data-parallel ranks of one tensor position).
using TransferTimes = std::map<std::tuple<SpanKind, int, std::int64_t>, std::vector<double>>;
TransferTimes transfer_seconds(const MeasuredRun& run, bool clean_only,
                               Typical typical = Typical::kMedian);
// Per (kind, tag, bytes), per occurrence in a step, as transfer_seconds keys its
// collectives: the mean seconds each started after it could have (Note [collectives
// started late]): after the latest of its members' issues and, unless `at_once` (a run
// whose collectives ran side by side), of their previous collectives' ends, until its
// latest member's start; 0 where a member's issue was not recorded. A pipeline's
// point-to-point sends as transfer_seconds keys them, (kSend, -1, bytes): the mean over
// them from each send's issue to its start (Note [point-to-point transfers late]).
TransferTimes collective_delays(const MeasuredRun& run, bool at_once);
// The same: the mean seconds from a collective's end on a rank to the end of the rank's
// wait for it, over the ranks and steps where one was waiting for it when it ended (Note
// [collectives started late]); a pipeline's receives, from each one's end to the end of
// the wait around it, one mean.
TransferTimes collective_wake_ups(const MeasuredRun& run);
// The same for a tensor-parallel run's in-place collectives (comm spans named "tp"; tag
// the unit), each matched within its tensor group, timed as its members stood blocked on
// it (the wait span around its start: post, queue, transfer and wake-up, which a
// collective waited for in place costs the pass); left out of transfer_seconds.
TransferTimes tensor_transfer_seconds(const MeasuredRun& run, bool clean_only);
// Seconds per step of the collectives (not point to point) both runs of one configuration
// timed, the same kind, tag, bytes and occurrence in a step, each as transfer_seconds times
// it (every one, from its last member's start): (a's sum, b's sum). Note [contention's
// collectives] in calibrate.cpp: the overlapped scenario's against the comm-only one's.
std::pair<double, double> matched_collective_seconds(const MeasuredRun& a, const MeasuredRun& b);

// Note [contention's passes]: the passes of a configuration's overlapped scenario beside
// which their rank had a collective in flight (its comm spans: from its own start, the
// wait for a peer included, as its communication thread takes the core from then),
// against the same passes alone: the compute-only scenario's median of each, scaled by how
// much the overlapped run's other passes (no collective beside them) differ from theirs,
// the two runs' drift. The collectives' moving windows alone (from the last member's
// start) gave passes that grew by more than that time in 2-3 of 5 configurations here, and
// factors of 34-845%; the rank's own spans 21-123%, with the same step errors.
// Per rank and step of the overlapped scenario:
struct PassContention {
  double overlapped_s = 0;  // those passes' time in the overlapped scenario
  double alone_s = 0;       // theirs alone
  double beside_s = 0;      // how long their rank had a collective in flight beside them
};
PassContention pass_contention(const MeasuredRun& overlapped, const MeasuredRun& compute_only);
// A training configuration's contention sample timed from its scenario runs (`at`: where
// each scenario measured is in `runs`): the collectives from their last member's start
// (matched_collective_seconds, overlapped against comm-only) and the passes beside them
// (pass_contention). What it cannot time stays as `sample` has it (the scenario metrics').
void time_training_contention(ContentionSample& sample, const std::vector<MeasuredRun>& runs,
                              const std::map<Scenario, std::size_t>& at);
// Per (kind, unit, span name, occurrence in the pass): the median seconds of a run's
// compute spans from its warm-up on, the occurrence counted in start order within each
// (rank, step, micro-batch) pass: a tensor-parallel pass's pieces between its collectives
// (Note [tensor-parallel passes] in simulate/simulator.cpp).
using PieceTimes = std::map<std::tuple<SpanKind, int, std::string, int>, double>;
PieceTimes piece_seconds(const MeasuredRun& run, bool clean_only,
                         Typical typical = Typical::kMedian);
// The spans a pass's pieces were recorded as, in piece_seconds' keys: for each compute
// piece and each --tp-overlap ring, f(piece, key of its first span, spans), a ring being
// `ring_steps` spans of its product's name, so the pieces after it key their own.
template <typename Pieces, typename F>
void for_each_piece_span(Pieces& pieces, SpanKind kind, int unit, int ring_steps, F&& f) {
  std::map<std::string, int> seen;
  for (auto& piece : pieces) {
    if (piece.kind == PassPiece::Kind::kCollective) continue;
    std::string name(to_string(static_cast<ModelOp>(piece.name)));
    const int spans = piece.kind == PassPiece::Kind::kCompute ? 1 : ring_steps;
    const int first = seen[name];
    seen[name] += spans;
    f(piece, PieceTimes::key_type{kind, unit, std::move(name), first}, spans);
  }
}

// The samples of calibration.h from the runs' spans: passes no collective overlapped and
// collectives no pass overlapped, each (run, kind, unit or bucket) its median. A
// tensor-parallel run gives each compute piece of its passes (between the group's
// collectives) as a sample, its data-parallel collectives over its replicas, and its
// tensor group's own collectives as long as their ranks stood blocked on them (the
// samples that fit the hand-off, CommSample::handoff).
std::vector<ComputeSample> compute_samples(const std::vector<MeasuredRun>& runs);
std::vector<CommSample> comm_samples(const std::vector<MeasuredRun>& runs);
// The seconds of every unit's memory given back in the runs' steps from their warm-up on
// (the "give back" spans: Note [giving back, timed] in ddp/sharded.cpp).
std::vector<double> give_back_samples(const std::vector<MeasuredRun>& runs);
// Every measured step (from the warm-up on) of ranks that run the same work, each rank's
// compute in it (its compute spans summed): a run's ranks, or a pipeline's ranks of one
// stage; runs that compute nothing give none (Note [ranks apart] in simulate/simulator.cpp).
std::vector<RankSpreadSample> spread_samples(const std::vector<MeasuredRun>& runs);
// Every collective that moved in the runs' steps from their warm-up on (data-parallel and
// sharded ones: a tensor group's are waited for in place), with how long into its transfer
// the rank that issued it last began its next pass (Note [the last issuer's core] in
// simulate/simulator.cpp); one whose rank waited for anything before that pass, or that its
// rank issued with another collective in flight (it queued behind it), gives none.
std::vector<IssuerSample> issuer_samples(const std::vector<MeasuredRun>& runs);

// The median E2E (docs/METRICS.md: the iteration window of the slowest rank) over the
// steps from `warmup` on: how measured and predicted steps are compared.
double median_e2e_s(const Timeline& timeline, int warmup);
// The E2E of each of those steps, in step order (what median_e2e_s takes the median of).
std::vector<double> e2e_seconds(const Timeline& timeline, int warmup);
// Note [step period]: E2E is compute-defined (docs/METRICS.md), so a collective after the
// optimizer (zero1's and zero2's parameter gathers) lies outside it, though the next step
// cannot start before it ends. What a run's throughput follows is the step's period: per
// step from `warmup` on, the slowest rank's time from its first span of the step (compute
// where it has any) to its first of the next, and for the last step to its last span's
// end. tune ranks and measures by it.
std::vector<double> step_periods(const Timeline& timeline, int warmup);
double median_step_period_s(const Timeline& timeline, int warmup);

struct Prediction {
  std::string what;
  double measured_s = 0;
  double predicted_s = 0;
  // The hidden share of communication (T_ovl / T_comm over the steps; NaN without
  // communication) and a pipeline's mean bubble (NaN for one stage), measured and
  // predicted.
  double measured_hidden = 0, predicted_hidden = 0;
  double measured_bubble = 0, predicted_bubble = 0;
  double error() const { return predicted_s / measured_s - 1; }
};
// Each run simulated on `calibration`'s machine with as many ranks.
std::vector<Prediction> predict_runs(const Calibration& calibration, double memory_bytes,
                                     const std::vector<MeasuredRun>& runs);
// A table of predictions with the median and largest absolute error.
std::string format_predictions(const std::vector<Prediction>& predictions);

}  // namespace tandem
