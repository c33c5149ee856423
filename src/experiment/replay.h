// Replay and what-if of tandem's own runs (docs/SIMULATE.md, "Replay"): a measured run's
// configuration simulated with its passes and transfers as they were measured (no
// model), which should reproduce its step, then again with one thing changed: the
// network, contention, overlap, the bucket size, the rank count.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/trainer.h"
#include "experiment/calibrate.h"

namespace tandem {

struct WhatIf {
  double network = 1;           // collectives and transfers this many times as fast
  bool contention_off = false;  // every pass and transfer at its unoverlapped time
  bool slowdown_off = false;    // every pass at its unoverlapped time, transfers as they ran
  bool overlap_off = false;     // communication only after compute (the sequential scenario)
  double bucket_mb = 0;         // > 0: DDP's bucket cap in MiB (bucketed, sequential)
  int ranks = 0;                // > 0: this many ranks, each with the run's per-rank batch

  // "network=2x", "contention=off", "slowdown=off", "overlap=off", "bucket-mb=5",
  // "ranks=16" (repeatable); throws UsageError naming --what-if.
  static WhatIf parse(const std::vector<std::string>& items);
  bool any() const {
    return network != 1 || contention_off || slowdown_off || overlap_off || bucket_mb > 0 ||
           ranks > 0;
  }
  std::string describe() const;  // "network 2x, contention off"
};

// A measured collective's seconds with the network `factor` times as fast (Note [a faster
// network, emulated] in replay.cpp): over an emulated link, `wire` (the run's --link),
// only the wire time it adds for a communicator of `ranks` is divided (a measured time
// shorter than it is all wire); over a real network, the whole. -1 (none measured) stays.
struct FasterNetwork {
  double factor = 1;
  LinkModel wire{};
  int ranks = 1;
  double operator()(SpanKind kind, std::int64_t bytes, double seconds) const;
};

// Collectives never measured, over an emulated link (Note [collectives never measured,
// emulated] in replay.cpp): the emulated wire time, exact, plus the rest (the data moved
// in memory, the hand-offs) fitted to the run's own collectives as a + b x the bytes a
// ring moves per rank.
struct EmulatedCollectives {
  LinkModel wire{};
  double a = 0;  // seconds per collective
  double b = 0;  // seconds per byte a ring moves per rank
  // From measured (kind, bytes, seconds) over a communicator of `ranks`; throws nothing:
  // no usable sample leaves a = b = 0.
  static EmulatedCollectives fit(const LinkModel& wire, int ranks, const TransferTimes& measured);
  double operator()(SpanKind kind, std::int64_t bytes, int ranks) const;  // 0 for one rank
};

struct Replay {
  std::string what;                // the run replayed
  TrainConfig config;              // the what-if's (the run's when none)
  double measured_s = 0;           // the run's median step
  double e2e_ideal_s = 0;          // a characterize point's E2E_ideal (eq. 4); NaN otherwise
  // The run as measured: each step of its middle half replayed by itself, one after
  // another (Note [replayed step by step] in replay.cpp); no warm-up step.
  TrainResult replayed;
  TrainResult what_if;  // with the what-if applied, step by step (the replay again when none)
  // Per replayed step (the run's step number): its E2E measured, replayed and what-if,
  // seconds; the k-th is step k of `replayed` and `what_if`.
  struct Step {
    int step = 0;
    double measured_s = 0, replayed_s = 0, what_if_s = 0;
  };
  std::vector<Step> steps;
  std::vector<std::string> notes;  // what the replay assumed
};

// Replays the overlapped run of `dir` (a train run, or a characterize point's overlapped
// scenario, whose compute-only and comm-only scenarios give the unoverlapped times): a
// characterize directory of one point, or one point of a sweep given as DIR/points/ID.
// Throws UsageError naming --from-trace (a sweep of several points given whole, too).
Replay replay_run(const std::string& dir, const WhatIf& what_if);
// Whether `path` is DIR/points/ID of a characterize run's results (replay_run takes it).
bool is_characterize_point(const std::string& path);

// Per (kind, unit; the optimizer's unit -1; a give-back: kMemory and its unit): the mean
// time a rank stood idle before the pass or give-back, after the end of whatever it did
// before in the step (a pass, a wait or a give-back), over the ranks and steps from the
// warm-up on: the scheduling gaps of a measured run, which the simulator otherwise does
// not have. The mean, as the step pays their sum: with a rank's communication thread
// sharing its core the gaps are few and long, and their median would be 0.
std::map<std::pair<SpanKind, int>, double> idle_gaps(const MeasuredRun& run);

// Whether a rank of the run had two collectives of one communicator (Span::group) in
// flight at once, from the warm-up on: the mpi backend starts each nonblocking collective
// when it is posted, the local one takes them one after another. The replay then runs
// them side by side (SimulateOptions::collectives_at_once).
bool collectives_overlapped(const MeasuredRun& run);

// The run with only its middle half of steps by E2E, from the warm-up on (all of them when
// there are fewer than 4): what the replay's means are taken over (Note [replayed by the
// mean] in replay.cpp). The measured step is their median, which a step that a hiccup of
// the machine made twice as long does not move, and a mean over every step would.
MeasuredRun middle_steps(const MeasuredRun& run);

}  // namespace tandem
