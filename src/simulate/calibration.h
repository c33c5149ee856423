// Calibration (docs/SIMULATE.md, "Calibration"): the simulator's free parameters fitted
// to what tandem measured on this machine, so that `--cluster here` predicts what `train`
// would measure here, and the fit's error says how far to trust it.
//
// What is fitted, each by least squares on relative error (a 1 ms pass weighs as much as
// a 100 ms one):
//   compute     a pass takes pass_seconds (cluster.h): one GEMM rate per precision
//               measured, one memory bandwidth and the rate products read their weights
//               at (in quadrature with their FLOPs), from compute spans that no
//               collective overlapped, each (run, pass, unit) its mean duration (a step pays
//               the sum);
//   collectives a ring over N ranks takes share (N-1)/N x S / B + share (N-1) alpha
//               (share 2 for an all-reduce, 1 for a reduce-scatter or an all-gather),
//               plus a hand-off h once: the bandwidth B and latency alpha from
//               communication spans that no compute overlapped; h the mean of what the
//               ring leaves of the collectives waited for in place (a tensor group's),
//               timed as their ranks stood blocked (0 without any);
//   first touch memory a sharded strategy gave back and touches again costs its bytes /
//               Z on top (DeviceProfile::first_touch_bytes_per_s): Z a third column of the
//               collectives' fit, from fsdp's all-gathers (each writes into a unit given
//               back); without any, a column of the compute fit, from zero2's and fsdp's
//               backward passes (each rewrites a gradient given back); else 0 (free);
//   contention  from the methodology's scenarios of a configuration: while both lanes
//               run, compute goes 1 + c times slower and a collective 1 + m times. In
//               the simulator's model compute that ran B beside communication grows by
//               B c / (1 + c), so c = dC / (B - dC) with dC its time overlapped less
//               its time alone, and m likewise; each lane summed over the
//               configurations (weighted by B) and never below 0; a lane whose B is
//               under a fifth of its time alone is left out of that lane's fit
//               (separate runs differ by a few percent from noise alone), and so is one
//               that grew by B or more (not this model's shape). By what overlaps: the
//               sharded strategies' configurations (reduce-scatters and all-gathers
//               beside compute) fit their own c and m, the others' (all-reduces) theirs;
//               a family with no sample for a lane takes that lane's fit over all;
//   ranks apart how far alike ranks' compute in a step stands from their mean
//               (DeviceProfile::compute_jitter and compute_jitter_s): each rank's squared
//               deviation from its peers' mean compute in a step (times n / (n - 1) for
//               n ranks) fitted as j_s^2 + (j T)^2 for the step's mean T, relative least
//               squares, from every measured step of ranks that run the same work (a
//               pipeline's ranks of one stage); all of it j where the steps' lengths are
//               within half of each other; 0 without two such ranks;
//   last issuer how long the rank that issued a collective last computes nothing once its
//               transfer moves (DeviceProfile::issuer_held): over every measured
//               collective that moved (its last member started), the time from the
//               transfer's start to that rank's next pass, at most the transfer, summed
//               over the transfers' summed times (a collective whose rank waited before
//               its next pass is left out: that pass waited for something else; so is
//               one issued behind another still in flight, which moved later); 0
//               without any.
// A parameter with no sample to fit it is not guessed: the fit says so and the caller
// refuses (compute needs fp32 samples, collectives some; contention without characterize
// runs stays 0). Where noise makes a slope fall (an fp32 rate or a link bandwidth that
// would be negative), the other term is dropped and the fit's error tells how well the
// one left does.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/precision.h"
#include "simulate/cluster.h"
#include "timeline/span.h"

namespace tandem {

struct ComputeSample {
  Precision precision = Precision::kFp32;
  double flops = 0;
  double bytes = 0;  // streamed besides the weights its products read
  // Its products by weights: their FLOPs (of `flops`) and the weights they read (Note [a
  // GEMM's weights] in cluster.cpp).
  double weight_flops = 0;
  double weight_bytes = 0;
  double touched = 0;  // bytes of memory given back that the pass wrote again
  double seconds = 0;  // measured
  std::string what;    // "runs/a: mlp:4x512 forward unit 2"
};

struct CommSample {
  SpanKind kind = SpanKind::kAllreduce;
  int ranks = 2;
  double bytes = 0;
  double touched = 0;  // bytes of memory given back that it wrote again (an fsdp gather)
  double seconds = 0;
  // The time holds the hand-off around the transfer (a collective waited for in place,
  // timed as its ranks stood blocked on it), not the transfer alone (a collective's span).
  bool handoff = false;
  std::string what;
};

// One configuration's scenarios (docs/METRICS.md), per step, in seconds: each lane's time
// alone and in the overlapped scenario, and how long the other lane ran beside it there.
struct ContentionSample {
  // Compute: T_comp of compute-only and overlapped, and T_ovl; for a training workload the
  // passes beside which their rank had a collective in flight (experiment/calibrate.h,
  // pass_contention).
  double comp_iso = 0, comp_ovl = 0, comp_beside = 0;
  // Communication: T_comm of comm-only and overlapped, and T_ovl; for a training workload
  // its collectives timed from their last member's start (matched_collective_seconds).
  double comm_iso = 0, comm_ovl = 0, comm_beside = 0;
  // A sharded strategy's: its collectives beside compute are reduce-scatters and
  // all-gathers (DeviceProfile::sharded_compute_slowdown), not all-reduces.
  bool sharded = false;
  std::string what;
};

// One measured collective that moved: how long its transfer ran, and for how much of it
// the rank that issued it last computed nothing (its next pass began that late into it).
struct IssuerSample {
  double held_s = 0;
  double moving_s = 0;
};

// One measured step of ranks that run the same work: each one's compute time in it.
struct RankSpreadSample {
  std::vector<double> seconds;
};

// How well the fitted model reproduces its samples: |predicted / measured - 1|.
struct FitError {
  int samples = 0;
  double median = 0;
  double max = 0;
  std::string worst;  // the sample with the largest error
};

// One characterized configuration's part in the contention fit: each lane's own factor
// (the growth over the rest of the time beside, as the pooled fit takes it), or why that
// lane was left out of the fit.
struct ContentionPoint {
  std::string what;
  bool sharded = false;                         // ContentionSample::sharded
  double compute = 0, comm = 0;                 // the factor (0.19: 19% slower) where fitted
  std::string compute_left_out, comm_left_out;  // empty: fitted
};

struct Calibration {
  std::array<double, 4> gemm_flops_per_s{};  // by Precision; 0: no sample
  double memory_bytes_per_s = 0;
  double weight_bytes_per_s = 0;       // DeviceProfile::weight_bytes_per_s; 0: no product sampled
  double first_touch_bytes_per_s = 0;  // 0: not fitted (free)
  double give_back_s = 0;              // per unit's memory given back; 0: none measured
  double compute_jitter = 0;           // DeviceProfile::compute_jitter
  double compute_jitter_s = 0;         // DeviceProfile::compute_jitter_s
  int jitter_samples = 0;              // the rank-steps it stands on (0: not measured)
  double issuer_held = 0;              // DeviceProfile::issuer_held
  int issuer_samples = 0;              // the collectives it stands on (0: not measured)
  LinkProfile link;
  double overlap_compute_slowdown = 0;
  double overlap_comm_slowdown = 0;
  // Beside reduce-scatters and all-gathers (DeviceProfile::sharded_compute_slowdown): from
  // the sharded configurations' samples alone, a lane without any the same as above.
  double sharded_compute_slowdown = 0;
  double sharded_comm_slowdown = 0;
  int contention_samples = 0;     // 0: not fitted (left at 0)
  int sharded_contention_samples = 0;  // of them, sharded configurations'
  int contention_candidates = 0;  // configurations whose scenarios were measured
  // Each candidate's own factors: the spread the pooled ones stand for (not read back
  // from calibration.json; printed by --calibrate and written there).
  std::vector<ContentionPoint> contention_points;
  FitError compute, comm;
};

// Throws UsageError naming --calibrate when a parameter cannot be fitted: no compute
// sample in fp32, or no collective. `give_backs`: the measured seconds of each unit's
// memory given back (the "give back" spans); their median is the fit's. `spread`: the
// measured steps of alike ranks the ranks' jitter is taken from (none: 0). `issuers`: the
// collectives the last issuer's hold is taken from (none: 0).
Calibration fit_calibration(const std::vector<ComputeSample>& compute,
                            const std::vector<CommSample>& comm,
                            const std::vector<ContentionSample>& contention,
                            const std::vector<double>& give_backs = {},
                            const std::vector<RankSpreadSample>& spread = {},
                            const std::vector<IssuerSample>& issuers = {});

// The seconds the fitted model gives a sample.
double predict(const Calibration& c, const ComputeSample& s);
double predict(const Calibration& c, const CommSample& s);

// The machine the calibration describes as a cluster: one node of `ranks` devices, each
// computing at the fitted rates (efficiency 1), linked by the fitted ring, slowed by the
// fitted contention; `memory_bytes` each (this machine's memory: its ranks share it).
Cluster calibrated_cluster(const Calibration& c, int ranks, double memory_bytes,
                           const std::string& source);

// The cluster JSON of docs/SIMULATE.md (so `--cluster FILE` reads it as well), with the
// fit's details under "calibration".
nlohmann::json calibration_json(const Calibration& c, double memory_bytes,
                                const std::string& source);
// The files a calibration directory holds: the fit, and every sample it was fitted to
// beside what the fit predicts for it (calibration_samples_csv).
inline constexpr const char* kCalibrationFile = "calibration.json";
inline constexpr const char* kCalibrationSamplesFile = "samples.csv";

// One row per sample: lane (compute or comm), what (run and pass or collective),
// precision or collective kind, ranks, flops, bytes, the products' FLOPs and weights,
// touched bytes, measured and predicted seconds, and the relative error predicted /
// measured - 1.
std::string calibration_samples_csv(const Calibration& c, const std::vector<ComputeSample>& compute,
                                    const std::vector<CommSample>& comm);

// Reads what calibration_json wrote; throws UsageError naming `flag` and the file.
Calibration read_calibration(const std::string& path, const std::string& flag, double* memory_bytes,
                             std::string* source);

// The cluster of --cluster TEXT: "here" is this machine as `calibration_dir` describes
// it, with `ranks` devices; anything else is parse_cluster's, and then a calibration is
// refused (it describes this machine, not a datasheet's device). Throws UsageError
// naming --cluster or --calibration.
Cluster resolve_cluster(const std::string& text, const std::string& calibration_dir, int ranks);

}  // namespace tandem
