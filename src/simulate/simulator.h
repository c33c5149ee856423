// tandem simulate: predicts training steps on a cluster (cluster.h) and hands back what a
// measured run hands back (a TrainResult: the same spans on the same lanes, step records
// and memory), so every metric, summary.json, trace.json and report.html of a measured run
// come from the same code (docs/SIMULATE.md).
//
// What runs is the engine's plan, not a copy of it: the DDP family's units of
// communication and their launch order are ddp/reducer.h's plan_buckets and
// ddp/launch_schedule.h's LaunchSchedule; the compute per unit is the model layer's FLOPs
// and bytes; the per-rank memory is the model's buffer_bytes. An event-driven engine
// then advances every rank's compute lane and communication lane in virtual time:
//   compute   a unit's pass takes flops / (peak x efficiency) + bytes / memory bandwidth,
//             times the rank's straggler factor and, where ranks jitter, its pace among
//             them (the last rank the expected slowest: Note [ranks apart]);
//   comm      a bucket's all-reduce starts once every rank has issued it and finished the
//             collectives issued before it, and takes the hierarchical ring's time
//             (allreduce_seconds); each rank's span of it starts when that rank's own
//             wire took it up, as a measured span does (Note [a rank's own start]);
//   overlap   while both lanes of a rank are busy, its compute runs
//             1 + overlap_compute_slowdown times slower and the collective (which moves
//             at its slowest rank's pace) 1 + overlap_comm_slowdown times slower; beside
//             a reduce-scatter or an all-gather, by the device's sharded factors
//             (DeviceProfile::compute_slowdown); the rank whose issue set a collective
//             moving computes again only issuer_held into its transfer, its core the
//             communication thread's meanwhile (Note [the last issuer's core]);
//   touch     memory zero2 and fsdp gave back costs its bytes at the device's first-touch
//             rate when a gather or a backward writes it again (given_back_bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/trainer.h"
#include "simulate/cluster.h"

namespace tandem {

struct Straggler {
  int rank = 0;
  double compute = 1;  // its compute takes this many times as long
  // Replay: its idle gaps between passes (SimulateOptions::idle_before, the mean rank's)
  // take this many times as long: the rank whose communication thread held its core.
  double idle = 1;

  // "rank=3,compute=1.2x"; throws UsageError naming --straggler.
  static Straggler parse(std::string_view text);
};

struct UnitCosts;

struct SimulateOptions {
  Cluster cluster;
  std::vector<Straggler> stragglers;
  // The timeline keeps the spans of at most this many ranks (0: all): the first rank of
  // every class of alike ranks (each straggler, each pipeline stage), then the others in
  // rank order. The rest are exact copies of a recorded rank; a timeline of thousands of
  // ranks would only repeat them. Step records and memory cover every rank.
  int recorded_ranks = 0;
  // Replay (docs/SIMULATE.md, "Replay"): the passes' seconds as measured instead of the
  // cluster's model, and a collective's or a point-to-point transfer's (kSend, its
  // micro-batch) as measured: kind, tag, bytes -> seconds, < 0 for the model's.
  const UnitCosts* costs = nullptr;
  std::function<double(SpanKind kind, int tag, std::int64_t bytes)> collective_seconds;
  // The same for a tensor group's in-place collectives (--tensor; tag: the unit).
  std::function<double(SpanKind kind, int tag, std::int64_t bytes)> tensor_seconds;
  // Replay: the seconds a collective started after it could have (every member had posted
  // it and, on one channel, finished the ones before): a communication thread that got
  // its core late (Note [collectives started late] in experiment/calibrate.cpp). Asked for
  // each collective and each pipeline transfer (kSend; Note [point-to-point transfers
  // late]) with collective_seconds, in the same order; empty: none.
  std::function<double(SpanKind kind, int tag, std::int64_t bytes)> collective_delay;
  // Replay: the seconds a rank waiting for a collective resumes after it ends (its training
  // thread woken late), asked the same way; empty: none.
  std::function<double(SpanKind kind, int tag, std::int64_t bytes)> collective_wake_up;
  // A rank's collectives run side by side, each from when its members posted it, as the
  // mpi backend's nonblocking ones do, instead of each after the ones posted before it
  // (the local backend's communication thread, NCCL's stream). Replay: the run's did
  // (collectives_overlapped in experiment/replay.h).
  bool collectives_at_once = false;
  // Replay: the seconds a rank idles before each pass (kind, unit; the loss is the last
  // unit + 1, the optimizer -1), as measured; empty: none.
  std::function<double(SpanKind kind, int tag)> idle_before;
};

// Seconds of a collective (all-reduce, reduce-scatter or all-gather) of `bytes` over
// `ranks` ranks placed node by node on `cluster`, hierarchically: a ring inside each node
// over its devices, and a ring across the nodes moving each device's 1/d share over its
// share of the node's NICs. A ring of k members moves 2(k-1)/k of the data for an
// all-reduce, (k-1)/k for a reduce-scatter or an all-gather, plus a latency per hop
// (twice as many for an all-reduce). One rank: 0.
double collective_seconds(const Cluster& cluster, SpanKind kind, int ranks, double bytes);
double allreduce_seconds(const Cluster& cluster, int ranks, double bytes);

// The expected largest of n independent standard normal draws (0 for n < 2): how many
// standard deviations the slowest of n jittering ranks stands past their mean (Note
// [ranks apart] in simulator.cpp).
double expected_slowest(int n);

// One piece of a tensor-parallel rank's pass (--tensor; Note [tensor-parallel passes] in
// simulator.cpp): compute, a collective of the tensor group waited for in place, or a ring
// of T - 1 point-to-point steps (--tp-overlap) cut with the product it feeds (a gather)
// or consumes (a reduce-scatter) into T token blocks.
struct PassPiece {
  enum class Kind : std::uint8_t { kCompute, kCollective, kRingGather, kRingReduceScatter };
  Kind kind = Kind::kCompute;
  double seconds = 0;  // compute and rings: the (whole) product's, at full rate
  double flops = 0;
  // Compute and rings: what pass_seconds prices it from (its bytes besides the weights its
  // products read, and those products' FLOPs and weights).
  double streamed = 0;
  double weight_flops = 0;
  double weight_bytes = 0;
  NameId name = kNoName;                       // compute: the engine's span name (ModelOp)
  SpanKind collective = SpanKind::kAllreduce;  // kCollective: which
  std::int64_t bytes = 0;  // kCollective: as the engine counts it; a ring: one step's send
};

// Seconds of each pass on one device (before contention and stragglers), by pass_seconds.
struct UnitCosts {
  std::vector<double> forward;   // per unit
  std::vector<double> backward;  // per unit
  std::vector<double> forward_flops, backward_flops;
  // Bytes streamed besides the weights the products read.
  std::vector<double> forward_bytes, backward_bytes;
  // The products that multiply by the unit's weights (forward: all of its weights';
  // backward: the input gradient's), their FLOPs and the weights they read.
  std::vector<double> forward_weight_flops, backward_weight_flops;
  std::vector<double> forward_weight_bytes, backward_weight_bytes;
  double loss_forward = 0, loss_backward = 0;
  double loss_bytes = 0;  // each of the loss's forward and backward
  double optimizer = 0;
  double optimizer_bytes = 0;
  double optimizer_numel = 0;  // the elements the optimizer's time is for (0: measured, as is)
  // The device's rates the passes were priced at, for work priced by its size too
  // (--compress; 0 when replaying measured passes: not priced).
  PassRates rates;
  // Seconds per byte of memory given back and touched again (DeviceProfile::
  // first_touch_bytes_per_s; 0: free, and when replaying: the measured passes and
  // collectives hold it).
  double touch_seconds = 0;
  // Seconds per unit's memory given back (DeviceProfile::give_back_s; when replaying, the
  // run's measured median).
  double give_back = 0;
  // --tensor T: each unit's passes as the split model runs them, its compute (which sums
  // to forward[u] and backward[u]) cut by the tensor group's collectives; the loss's
  // forward too. Empty without tensor parallelism.
  std::vector<std::vector<PassPiece>> forward_pieces, backward_pieces;  // per unit
  std::vector<PassPiece> loss_pieces;
};
UnitCosts unit_costs(const TrainConfig& config, const Cluster& cluster);

// The bytes of unit u's parameters (or gradients) that a sharded strategy gives back to
// the operating system on a host (ShardedSync, core/page_array.h) and that writing the
// unit again faults back in: the huge pages its values cover (flat_array advises each
// unit's range), within its range up to the next unit; none where that range is under
// PageMemory::kMinGiveBack (zeroed in place, not given back). They cost
// DeviceProfile::first_touch_bytes_per_s.
std::int64_t given_back_bytes(const ModelLayout& layout, int u);
// zero2 and fsdp give every unit's gradient back once its reduce-scatter is settled: per
// unit, the given-back bytes its backward is the first of a step to write, backward running
// from the last unit to the first (gpt's head writes the tied embedding's gradient before
// the embedding's own backward does).
std::vector<std::int64_t> backward_touched_bytes(const ModelLayout& layout);
// What a configuration's strategy gives back on a host and writes again every step
// (ShardedSync): fsdp its units' parameters (each gather writes a unit released), zero2
// and fsdp their gradients (each unit's first backward of a step rewrites one given back
// when its reduce-scatter settled). Nothing without communication (a compute-only
// scenario), for the DDP family or for zero1.
struct TouchedAgain {
  bool params = false;
  bool grads = false;
};
TouchedAgain touched_again(const TrainConfig& config);

// --split auto in a simulation: the pipeline's units per chunk balanced by the predicted
// forward + backward time of each unit (the cluster's model, or options.costs when
// replaying; the loss in the last unit), as --split auto balances measured ones where a
// run trains. simulate_training resolves it for a caller that did not (one that reports
// the split resolves it first).
std::vector<int> predicted_split(const TrainConfig& config, const SimulateOptions& options);

// Simulates config.steps steps of `config` (the DDP family, zero1, zero2 and fsdp,
// accumulation, pipeline stages, tensor parallelism, every model). The
// ranks must fit the cluster, and a rank's state the device's memory (UsageError with the
// bytes).
TrainResult simulate_training(const TrainConfig& config, const SimulateOptions& options);

}  // namespace tandem
