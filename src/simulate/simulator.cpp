// The simulator's costs and its event-driven engine (simulator.h).
#include "simulate/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/parse.h"
#include "ddp/launch_schedule.h"
#include "ddp/reducer.h"
#include "ddp/shard_schedule.h"
#include "ddp/sharded.h"
#include "model/mlp.h"
#include "model/transformer.h"

namespace tandem {

Straggler Straggler::parse(std::string_view text) {
  const auto kv = parse_key_values(text, "--straggler", "rank compute");
  if (!kv.count("rank") || !kv.count("compute")) {
    throw UsageError("--straggler " + std::string(text) + ": expected rank=R,compute=Fx");
  }
  Straggler s;
  s.rank = static_cast<int>(parse_int_in(kv.at("rank"), "--straggler rank", 0, 1 << 30));
  std::string factor = kv.at("compute");
  if (factor.ends_with('x')) factor.pop_back();
  try {
    std::size_t used = 0;
    s.compute = std::stod(factor, &used);
    if (used != factor.size()) throw std::invalid_argument(factor);
  } catch (const std::exception&) {
    throw UsageError("--straggler " + std::string(text) + ": compute must be a factor like 1.2x");
  }
  if (!(s.compute >= 0.01 && s.compute <= 100)) {
    throw UsageError("--straggler " + std::string(text) + ": compute must be 0.01x..100x");
  }
  return s;
}

namespace {

// A ring of k members moving `bytes`: each sends 2(k-1)/k of it (all-reduce) or (k-1)/k
// (reduce-scatter, all-gather), one latency per hop.
double ring_seconds(int k, double bytes, const LinkProfile& link, double share) {
  if (k <= 1) return 0;
  return share * (k - 1) / k * bytes / link.bandwidth_bytes_per_s +
         share * (k - 1) * link.latency_s;
}

}  // namespace

double collective_seconds(const Cluster& cluster, SpanKind kind, int ranks, double bytes) {
  if (ranks <= 1 || bytes <= 0) return 0;
  TANDEM_CHECK(kind == SpanKind::kAllreduce || kind == SpanKind::kReduceScatter ||
               kind == SpanKind::kAllgather);
  // An all-reduce is a reduce-scatter and an all-gather: twice the traffic of either.
  const double share = kind == SpanKind::kAllreduce ? 2.0 : 1.0;
  const int per_node = std::min(ranks, cluster.devices_per_node);
  const int nodes = (ranks + per_node - 1) / per_node;
  // Inside a node a ring over its devices; across nodes, a ring over the nodes moving each
  // device's 1/d share over its share of the node's NICs.
  double seconds = ring_seconds(per_node, bytes, cluster.intra, share);
  if (nodes > 1) {
    LinkProfile net = cluster.inter;
    net.bandwidth_bytes_per_s =
        cluster.inter.bandwidth_bytes_per_s * cluster.nics_per_node / per_node;
    seconds += ring_seconds(nodes, bytes / per_node, net, share);
  }
  return seconds;
}

double allreduce_seconds(const Cluster& cluster, int ranks, double bytes) {
  return collective_seconds(cluster, SpanKind::kAllreduce, ranks, bytes);
}

UnitCosts unit_costs(const TrainConfig& config, const Cluster& cluster) {
  const ModelSpec& spec = config.model;
  const ModelLayout layout(spec);
  const DeviceProfile& d = cluster.device;
  const double flop_rate = d.peak(config.precision) * d.gemm_efficiency;
  const double bw = d.memory_bytes_per_s;
  const int U = layout.units();
  const int rows = micro_batch_rows(config);
  UnitCosts c;
  c.forward.resize(static_cast<std::size_t>(U));
  c.backward.resize(static_cast<std::size_t>(U));
  c.forward_flops.resize(static_cast<std::size_t>(U));
  c.backward_flops.resize(static_cast<std::size_t>(U));
  c.forward_bytes.resize(static_cast<std::size_t>(U));
  c.backward_bytes.resize(static_cast<std::size_t>(U));
  // Per unit: its GEMMs at the device's GEMM rate, and the memory its passes stream: the
  // weights (forward reads them; backward reads them and updates their gradients) and
  // the activations the elementwise kernels read and write.
  std::vector<double> activation_bytes(static_cast<std::size_t>(U), 0);
  double loss_elements = 0;
  if (spec.is_transformer()) {
    const TransformerShape& s = spec.transformer;
    const double N = static_cast<double>(rows) * s.seq;
    const TransformerFlops f = transformer_flops(spec, rows);
    for (int u = 0; u < U; ++u) {
      const bool block = u >= 1 && u <= s.layers;
      const double fl = u == 0 ? 0 : block ? f.attention + f.mlp : f.head;
      c.forward_flops[static_cast<std::size_t>(u)] = fl;
      c.backward_flops[static_cast<std::size_t>(u)] = 2 * fl;
      // A block's norms, residual adds, activation and softmax over [B, H, T, T]; the
      // embedding writes the stream; the head's norm reads and writes it.
      activation_bytes[static_cast<std::size_t>(u)] =
          4.0 * (block ? N * (12.0 * s.dim + 3.0 * s.hidden) +
                             3.0 * rows * s.heads * static_cast<double>(s.seq) * s.seq
                       : 2.0 * N * s.dim);
    }
    loss_elements = N * s.vocab;
  } else {
    for (int u = 0; u < U; ++u) {
      const LinearLayout& l = layout.layer(u);
      const double fl = 2.0 * rows * l.in * l.out;
      c.forward_flops[static_cast<std::size_t>(u)] = fl;
      c.backward_flops[static_cast<std::size_t>(u)] = (u > 0 ? 2 : 1) * fl;
      activation_bytes[static_cast<std::size_t>(u)] = 4.0 * 2 * rows * l.out;
    }
    loss_elements = static_cast<double>(rows) * spec.classes;
  }
  for (int u = 0; u < U; ++u) {
    const auto i = static_cast<std::size_t>(u);
    const double weights = 4.0 * static_cast<double>(layout.unit_end(u) - layout.unit_begin(u));
    c.forward_bytes[i] = weights + activation_bytes[i];
    c.backward_bytes[i] = 3 * weights + 2 * activation_bytes[i];
    c.forward[i] = c.forward_flops[i] / flop_rate + c.forward_bytes[i] / bw;
    c.backward[i] = c.backward_flops[i] / flop_rate + c.backward_bytes[i] / bw;
  }
  // Softmax cross-entropy: logits read and written, then read again for the gradient.
  c.loss_bytes = 4.0 * 2 * loss_elements;
  c.loss_forward = c.loss_bytes / bw;
  c.loss_backward = c.loss_bytes / bw;
  // SGD with momentum: parameters, gradients and velocity read; parameters and velocity
  // written.
  c.optimizer_numel = static_cast<double>(layout.numel());
  c.optimizer_bytes = 4.0 * 5 * c.optimizer_numel;
  c.optimizer = c.optimizer_bytes / bw;
  return c;
}

namespace {

enum class StepOpKind : std::uint8_t { kCompute, kPost, kWait };

struct StepOp {
  StepOpKind kind = StepOpKind::kCompute;
  SpanKind span = SpanKind::kForward;
  int tag = -1;
  int micro = -1;
  double seconds = 0;
  double flops = 0;
  int collective = -1;  // kPost, kWait: into StepProgram::collectives
};

// A collective of a step: its kind, what it moves, what its spans are tagged with.
struct CollectiveOp {
  SpanKind kind = SpanKind::kAllreduce;
  std::int64_t bytes = 0;
  int tag = -1;
};

// One step of a rank, in the order the rank loop runs it: the compute, and the
// collectives its strategy issues and waits for in between.
struct StepProgram {
  std::vector<StepOp> ops;
  std::vector<CollectiveOp> collectives;  // in issue order; every rank issues the same

  int post(SpanKind kind, std::int64_t bytes, int tag) {
    const int c = static_cast<int>(collectives.size());
    collectives.push_back({.kind = kind, .bytes = bytes, .tag = tag});
    ops.push_back({.kind = StepOpKind::kPost, .tag = tag, .collective = c});
    return c;
  }
  void wait(int c) {
    ops.push_back({.kind = StepOpKind::kWait,
                   .tag = collectives[static_cast<std::size_t>(c)].tag,
                   .collective = c});
  }
  void compute(SpanKind span, int tag, int micro, double seconds, double flops) {
    ops.push_back({.span = span, .tag = tag, .micro = micro, .seconds = seconds, .flops = flops});
  }
};

// A strategy's side of a step, at the points the rank loop calls its GradSync
// (ddp/grad_sync.h): each appends the collectives the real strategy issues and waits for
// there, from the same plan code.
class SimSync {
 public:
  virtual ~SimSync() = default;
  virtual void before_forward(StepProgram& p, int unit) { (void)p, (void)unit; }
  virtual void after_forward(StepProgram& p, int unit) { (void)p, (void)unit; }
  virtual void before_backward(StepProgram& p, int unit) { (void)p, (void)unit; }
  virtual void after_backward(StepProgram& p, int unit, bool last_micro) = 0;
  virtual void before_optimizer(StepProgram& p) = 0;
  virtual double optimizer_seconds(const UnitCosts& costs) const { return costs.optimizer; }
  virtual void after_optimizer(StepProgram& p) { (void)p; }
  virtual void end_step(StepProgram& p) { (void)p; }
};

// The rank loop (engine/trainer.cpp's run_step, one stage): every micro-batch's forward,
// loss and backward with the strategy's hooks around each unit's pass, then the update.
StepProgram step_program(const TrainConfig& config, const UnitCosts& costs, SimSync& sync) {
  const int U = static_cast<int>(costs.forward.size());
  const int A = micro_batches(config);
  const double work = config.compute ? 1.0 : 0.0;  // comm-only: the same collectives
  StepProgram p;
  for (int m = 0; m < A; ++m) {
    for (int u = 0; u < U; ++u) {
      const auto i = static_cast<std::size_t>(u);
      sync.before_forward(p, u);
      p.compute(SpanKind::kForward, u, m, work * costs.forward[i], costs.forward_flops[i]);
      sync.after_forward(p, u);
    }
    p.compute(SpanKind::kForward, U, m, work * costs.loss_forward, 0);
    p.compute(SpanKind::kBackward, U, m, work * costs.loss_backward, 0);
    for (int u = U - 1; u >= 0; --u) {
      const auto i = static_cast<std::size_t>(u);
      sync.before_backward(p, u);
      p.compute(SpanKind::kBackward, u, m, work * costs.backward[i], costs.backward_flops[i]);
      sync.after_backward(p, u, m == A - 1);
    }
  }
  sync.before_optimizer(p);
  p.compute(SpanKind::kOptimizer, -1, -1, work * sync.optimizer_seconds(costs), 0);
  sync.after_optimizer(p);
  sync.end_step(p);
  return p;
}

// The DDP family, as the Reducer runs it (ddp/reducer.cpp, ddp/grad_sync.cpp): in the last
// micro-batch each unit's backward marks its gradients ready and the buckets that became
// ready are issued in plan order (LaunchSchedule); before the optimizer the rest is issued
// and every bucket waited for.
class SimReducer final : public SimSync {
 public:
  SimReducer(const TrainConfig& config, const ModelLayout& layout)
      : params_(grad_params(layout)),
        buckets_(plan_buckets(params_, layout.numel(), config.reducer.plan)),
        schedule_(params_, buckets_),
        comm_(config.reducer.mode != CommMode::kOff),
        overlap_(config.reducer.mode == CommMode::kOverlapped &&
                 config.reducer.plan.strategy.kind != StrategyKind::kSequential),
        issued_(buckets_.size(), -1) {
    schedule_.reset();
  }

  void after_backward(StepProgram& p, int unit, bool last_micro) override {
    if (!last_micro) return;
    schedule_.mark_unit_ready(unit);
    if (!overlap_) return;
    for (int b = schedule_.take_ready(); b >= 0; b = schedule_.take_ready()) post(p, b);
  }
  void before_optimizer(StepProgram& p) override {
    for (int b = schedule_.take_next(); b >= 0; b = schedule_.take_next()) post(p, b);
    for (const int c : issued_) {
      if (c >= 0) p.wait(c);
    }
  }

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void post(StepProgram& p, int b) {
    const Bucket& bucket = buckets_[static_cast<std::size_t>(b)];
    if (!comm_ || bucket.end <= bucket.begin) return;
    issued_[static_cast<std::size_t>(b)] = p.post(SpanKind::kAllreduce, bucket.bytes(), b);
  }

  std::vector<GradParam> params_;
  std::vector<Bucket> buckets_;
  LaunchSchedule schedule_;
  bool comm_;
  bool overlap_;
  std::vector<int> issued_;  // per bucket: its collective in the step, -1 before
};

// zero1, zero2 and fsdp, as ShardedSync runs them (ddp/sharded.cpp): the same
// ShardSchedule decides fsdp's gathers, waits and releases; every unit's gradient is
// reduce-scattered after its last backward; zero1/zero2 gather the updated blocks after
// the optimizer, and the step's end waits for what is still in flight.
class SimSharded final : public SimSync {
 public:
  SimSharded(const TrainConfig& config, const ModelLayout& layout)
      : kind_(config.reducer.plan.strategy.kind),
        comm_(config.reducer.mode != CommMode::kOff),
        sequential_(config.reducer.mode == CommMode::kSequential),
        schedule_(reads_of(layout), micro_batches(config), sequential_ ? 0 : config.shard.prefetch,
                  config.shard.reshard_after_forward),
        gather_(static_cast<std::size_t>(layout.units()), -1),
        reduce_(static_cast<std::size_t>(layout.units()), -1) {
    for (int u = 0; u < layout.units(); ++u) {
      const UnitInfo& info = layout.unit(u);
      bytes_.push_back(static_cast<std::int64_t>((info.padded_end - info.begin) * sizeof(float)));
      shard_numel_ += (info.padded_end - info.begin) / static_cast<std::size_t>(config.ranks);
    }
  }

  void before_forward(StepProgram& p, int unit) override {
    (void)unit;
    if (fsdp()) gather_and_wait(p);
  }
  void after_forward(StepProgram& p, int unit) override {
    (void)p, (void)unit;
    if (fsdp()) schedule_.releases_after(event_);
    ++event_;
  }
  void before_backward(StepProgram& p, int unit) override {
    (void)unit;
    if (fsdp()) gather_and_wait(p);
  }
  void after_backward(StepProgram& p, int unit, bool last_micro) override {
    if (fsdp()) schedule_.releases_after(event_);
    ++event_;
    if (!comm_ || !last_micro) return;
    reduce_[static_cast<std::size_t>(unit)] = p.post(SpanKind::kReduceScatter, bytes(unit), unit);
    if (sequential_) settle(p);
  }
  void before_optimizer(StepProgram& p) override { settle(p); }
  double optimizer_seconds(const UnitCosts& costs) const override {
    if (!comm_) return costs.optimizer;
    // SGD on the rank's shards: the same bytes per element as on a replica.
    return costs.optimizer * static_cast<double>(shard_numel_) /
           static_cast<double>(costs.optimizer_numel);
  }
  void after_optimizer(StepProgram& p) override {
    if (!comm_ || fsdp()) return;
    for (int u = 0; u < static_cast<int>(bytes_.size()); ++u) {
      gather_[static_cast<std::size_t>(u)] = p.post(SpanKind::kAllgather, bytes(u), u);
    }
  }
  void end_step(StepProgram& p) override {
    for (std::size_t u = 0; u < bytes_.size(); ++u) {
      for (int* c : {&gather_[u], &reduce_[u]}) {
        if (*c < 0) continue;
        p.wait(*c);
        *c = -1;
      }
    }
  }

  // fsdp: the most parameter bytes gathered or being gathered at once (ShardedSync's
  // gathered_peak); the schedule's states change only at the hooks, in program order.
  std::int64_t gathered_peak() const { return gathered_peak_; }
  std::int64_t shard_bytes() const {
    return static_cast<std::int64_t>(shard_numel_ * sizeof(float));
  }
  std::int64_t unit_bytes(int u) const { return bytes(u); }
  const ShardSchedule& schedule() const { return schedule_; }

 private:
  bool fsdp() const { return comm_ && kind_ == StrategyKind::kFsdp; }
  std::int64_t bytes(int u) const { return bytes_[static_cast<std::size_t>(u)]; }

  static std::vector<std::vector<int>> reads_of(const ModelLayout& layout) {
    std::vector<std::vector<int>> out;
    for (int u = 0; u < layout.units(); ++u) out.push_back(layout.units_read(u));
    return out;
  }

  void gather_and_wait(StepProgram& p) {
    for (const int v : schedule_.gathers_before(event_)) {
      gather_[static_cast<std::size_t>(v)] = p.post(SpanKind::kAllgather, bytes(v), v);
      note_gathered();
    }
    for (const int v : schedule_.waits_before(event_)) {
      p.wait(gather_[static_cast<std::size_t>(v)]);
      gather_[static_cast<std::size_t>(v)] = -1;
    }
  }
  // Waits for every reduce-scatter in flight, in unit order (settle_reduces(true)).
  void settle(StepProgram& p) {
    for (int& c : reduce_) {
      if (c < 0) continue;
      p.wait(c);
      c = -1;
    }
  }
  void note_gathered() {
    std::int64_t gathered = 0;
    for (int u = 0; u < schedule_.units(); ++u) {
      if (schedule_.resident(u) || schedule_.gathering(u)) gathered += bytes(u);
    }
    gathered_peak_ = std::max(gathered_peak_, gathered);
  }

  StrategyKind kind_;
  bool comm_;
  bool sequential_;
  ShardSchedule schedule_;
  std::vector<std::int64_t> bytes_;  // per unit, padded
  std::size_t shard_numel_ = 0;
  std::vector<int> gather_;  // per unit: its all-gather in flight, -1 if none
  std::vector<int> reduce_;  // per unit: its reduce-scatter in flight, -1 if none
  int event_ = 0;
  std::int64_t gathered_peak_ = 0;
};

// Ranks that behave alike (the same compute speed) are simulated once: a class.
struct Actor {
  double slowdown = 1;     // straggler factor on compute
  std::vector<int> ranks;  // the ranks it stands for
  std::size_t pc = 0;
  int step = 0;
  bool finished = false;
  bool computing = false;
  double remaining = 0;  // of the current compute op, in seconds at full rate
  double op_start = 0;
  bool waiting = false;
  double wait_start = 0;
  double step_start = -1;
  std::deque<int> queue;            // issued collectives not yet done, in order
  std::map<int, double> issued_at;  // collective -> when this actor issued it
  std::vector<Span> spans;
  std::vector<std::pair<double, double>> steps;  // start, end per step
};

struct Collective {
  double remaining = 0;  // seconds at full rate
  int issued = 0;        // actors that issued it
  bool done = false;
  double start = 0;
};

std::int64_t ns(double seconds) { return std::llround(seconds * 1e9); }

// zero2 and fsdp: the most bytes of full gradients an actor holds at once. A unit's full
// gradient lives from the first backward of the step that writes it (its own, and the
// head's for gpt's tied embedding) until its reduce-scatter ends, when a device gives it
// back (on the host ShardedSync gives it back at its next hook: a little later).
std::int64_t grads_peak(const std::vector<Span>& spans, const SimSharded& sync) {
  const ShardSchedule& schedule = sync.schedule();
  const int U = schedule.units();
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> live;  // step -> per unit
  for (const Span& s : spans) {
    auto& units = live[s.step];
    units.resize(static_cast<std::size_t>(U), {std::numeric_limits<std::int64_t>::max(), -1});
    if (s.lane == Lane::kCompute && s.kind == SpanKind::kBackward && s.tag >= 0 && s.tag < U) {
      // Backward event of unit u in micro-batch 0: 2U-1-u.
      for (const int v : schedule.needs(2 * U - 1 - s.tag)) {
        auto& first = units[static_cast<std::size_t>(v)].first;
        first = std::min(first, s.start_ns);
      }
    } else if (s.lane == Lane::kComm && s.kind == SpanKind::kReduceScatter) {
      units[static_cast<std::size_t>(s.tag)].second = s.end_ns;
    }
  }
  std::int64_t peak = 0;
  for (const auto& [step, units] : live) {
    std::vector<std::pair<std::int64_t, std::int64_t>> changes;  // time, +-bytes
    for (int u = 0; u < U; ++u) {
      const auto& [from, to] = units[static_cast<std::size_t>(u)];
      if (to < 0 || from > to) continue;
      changes.emplace_back(from, sync.unit_bytes(u));
      changes.emplace_back(to, -sync.unit_bytes(u));
    }
    std::sort(changes.begin(), changes.end());  // at a tie the release comes first
    std::int64_t now = 0;
    for (const auto& [time, delta] : changes) peak = std::max(peak, now += delta);
  }
  return peak;
}

}  // namespace

TrainResult simulate_training(const TrainConfig& config, const SimulateOptions& options) {
  const Cluster& cluster = options.cluster;
  const Strategy& strategy = config.reducer.plan.strategy;
  if (config.pipeline.stages > 1) {
    throw UsageError("--pipeline: pipeline stages are not simulated yet (docs/SIMULATE.md)");
  }
  if (config.ranks > cluster.devices()) {
    throw UsageError("--ranks " + std::to_string(config.ranks) + ": the cluster " + cluster.name +
                     " has " + std::to_string(cluster.devices()) + " devices");
  }
  if (cluster.device.peak(config.precision) <= 0) {
    throw UsageError("--precision " + std::string(to_string(config.precision)) + ": " +
                     cluster.device.name + " has no " + std::string(to_string(config.precision)) +
                     " GEMMs");
  }
  for (const Straggler& s : options.stragglers) {
    if (s.rank >= config.ranks) {
      throw UsageError("--straggler rank=" + std::to_string(s.rank) + ": the run has " +
                       std::to_string(config.ranks) + " ranks");
    }
  }
  const bool sharded = strategy.sharded();
  const bool comm = config.reducer.mode != CommMode::kOff;
  // The layout the trainer gives the strategy (engine/trainer.cpp): a sharded one pads
  // every unit to a multiple of the ranks, which the collectives move.
  const ModelLayout layout(config.model, sharded ? sharded_layout(config.ranks) : LayoutOptions{});
  const UnitCosts costs = unit_costs(config, cluster);
  std::unique_ptr<SimReducer> reducer;
  std::unique_ptr<SimSharded> shards;
  SimSync* sync = nullptr;
  if (sharded) {
    shards = std::make_unique<SimSharded>(config, layout);
    sync = shards.get();
  } else {
    reducer = std::make_unique<SimReducer>(config, layout);
    sync = reducer.get();
  }
  const StepProgram program = step_program(config, costs, *sync);

  // Classes of alike ranks.
  std::vector<double> factor(static_cast<std::size_t>(config.ranks), 1.0);
  for (const Straggler& s : options.stragglers)
    factor[static_cast<std::size_t>(s.rank)] = s.compute;
  std::vector<Actor> actors;
  for (int r = 0; r < config.ranks; ++r) {
    const double f = factor[static_cast<std::size_t>(r)];
    auto it =
        std::find_if(actors.begin(), actors.end(), [&](const Actor& a) { return a.slowdown == f; });
    if (it == actors.end()) {
      actors.push_back(Actor{.slowdown = f});
      it = actors.end() - 1;
    }
    it->ranks.push_back(r);
  }
  const int nc = static_cast<int>(program.collectives.size());
  std::vector<Collective> collectives(static_cast<std::size_t>(nc) *
                                      static_cast<std::size_t>(std::max(1, config.steps)));
  for (int s = 0; s < config.steps; ++s) {
    for (int c = 0; c < nc; ++c) {
      const CollectiveOp& op = program.collectives[static_cast<std::size_t>(c)];
      collectives[static_cast<std::size_t>(s * nc + c)].remaining =
          collective_seconds(cluster, op.kind, config.ranks, static_cast<double>(op.bytes));
    }
  }
  const auto n_actors = static_cast<int>(actors.size());
  const double cs = cluster.device.overlap_compute_slowdown;
  const double ms = cluster.device.overlap_comm_slowdown;
  constexpr double kEps = 1e-15;

  double t = 0;
  int in_flight = -1;  // the collective moving now (every rank takes part in every one)
  for (;;) {
    // Everything that happens at time t without time passing.
    for (bool progress = true; progress;) {
      progress = false;
      for (Actor& a : actors) {
        while (!a.finished && !a.computing) {
          if (a.waiting) {
            const StepOp& op = program.ops[a.pc];
            if (!collectives[static_cast<std::size_t>(a.step * nc + op.collective)].done) break;
            a.spans.push_back({.lane = Lane::kWait,
                               .kind = SpanKind::kWait,
                               .step = a.step,
                               .tag = op.tag,
                               .start_ns = ns(a.wait_start),
                               .end_ns = ns(t)});
            a.waiting = false;
            ++a.pc;
            progress = true;
            continue;
          }
          if (a.pc == program.ops.size()) {  // the step is done
            a.steps.emplace_back(a.step_start, t);
            a.step_start = -1;
            a.pc = 0;
            a.finished = ++a.step == config.steps;
            progress = true;
            continue;
          }
          if (a.step_start < 0) a.step_start = t;
          const StepOp& op = program.ops[a.pc];
          if (op.kind == StepOpKind::kPost) {
            const int id = a.step * nc + op.collective;
            ++collectives[static_cast<std::size_t>(id)].issued;
            a.queue.push_back(id);
            a.issued_at[id] = t;
            ++a.pc;
          } else if (op.kind == StepOpKind::kWait) {
            if (collectives[static_cast<std::size_t>(a.step * nc + op.collective)].done) {
              ++a.pc;  // a finished collective costs no wait (ddp/grad_sync.cpp)
            } else {
              a.waiting = true;
              a.wait_start = t;
            }
          } else {
            a.computing = true;
            a.remaining = op.seconds * a.slowdown;
            a.op_start = t;
          }
          progress = true;
        }
      }
      // A collective starts once every rank issued it and finished those before it.
      if (in_flight < 0 && !actors.front().queue.empty()) {
        const int id = actors.front().queue.front();
        Collective& c = collectives[static_cast<std::size_t>(id)];
        const bool heads = std::all_of(actors.begin(), actors.end(), [&](const Actor& a) {
          return !a.queue.empty() && a.queue.front() == id;
        });
        if (c.issued == n_actors && heads) {
          c.start = t;
          in_flight = id;
          progress = true;
        }
      }
    }
    if (std::all_of(actors.begin(), actors.end(), [](const Actor& a) { return a.finished; })) break;

    // Rates until the next event, and the time to it.
    double dt = std::numeric_limits<double>::infinity();
    double comm_rate = 1;
    for (const Actor& a : actors) {
      if (a.computing) {
        const double rate = in_flight >= 0 ? 1 / (1 + cs) : 1.0;
        dt = std::min(dt, a.remaining / rate);
        if (in_flight >= 0) comm_rate = std::min(comm_rate, 1 / (1 + ms));
      }
    }
    if (in_flight >= 0) {
      dt = std::min(dt, collectives[static_cast<std::size_t>(in_flight)].remaining / comm_rate);
    }
    TANDEM_CHECK(std::isfinite(dt));  // something always moves: the program has no cycles
    t += dt;
    for (Actor& a : actors) {
      if (!a.computing) continue;
      a.remaining -= dt * (in_flight >= 0 ? 1 / (1 + cs) : 1.0);
      if (a.remaining > kEps * std::max(1.0, t)) continue;
      const StepOp& op = program.ops[a.pc];
      a.spans.push_back({.lane = Lane::kCompute,
                         .kind = op.span,
                         .step = a.step,
                         .tag = op.tag,
                         .micro = op.micro,
                         .start_ns = ns(a.op_start),
                         .end_ns = ns(t),
                         .flops = op.flops});
      a.computing = false;
      ++a.pc;
    }
    if (in_flight >= 0) {
      Collective& c = collectives[static_cast<std::size_t>(in_flight)];
      c.remaining -= dt * comm_rate;
      if (c.remaining <= kEps * std::max(1.0, t)) {
        c.done = true;
        const CollectiveOp& op = program.collectives[static_cast<std::size_t>(in_flight % nc)];
        for (Actor& a : actors) {
          a.spans.push_back({.lane = Lane::kComm,
                             .kind = op.kind,
                             .step = in_flight / nc,
                             .tag = op.tag,
                             .start_ns = ns(c.start),
                             .end_ns = ns(t),
                             .bytes = op.bytes,
                             .issue_ns = ns(a.issued_at[in_flight])});
          a.issued_at.erase(in_flight);
          a.queue.pop_front();
        }
        in_flight = -1;
      }
    }
  }

  // Memory per rank, as the strategy keeps it (StateBytes) and the passes' buffers (the
  // model layer's own formula, the one train checks host and device memory with).
  const auto replica = static_cast<std::int64_t>(layout.numel() * sizeof(float));
  StateBytes state{.params = replica, .grads = replica, .optimizer = replica};
  if (sharded && comm) {
    const std::int64_t shards_bytes = shards->shard_bytes();
    std::int64_t full = 0;
    for (int u = 0; u < layout.units(); ++u) full += shards->unit_bytes(u);
    state = {.params = strategy.kind == StrategyKind::kFsdp ? shards_bytes : full,
             .grads = shards_bytes + (strategy.kind == StrategyKind::kZero1 ? full : 0),
             .optimizer = shards_bytes,
             .gathered_peak = shards->gathered_peak()};
  }
  const int rows = micro_batch_rows(config);
  state.activations = config.model.is_transformer() ? Transformer::buffer_bytes(config.model, rows)
                                                    : Mlp::buffer_bytes(config.model, rows);
  // 16-bit copies of the weights a GEMM reads.
  const std::int64_t casts = casts_gemm_inputs(config.precision) ? replica / 2 : 0;

  TrainResult result;
  result.timeline.ranks = config.ranks;
  double need = 0;
  for (const Actor& a : actors) {
    StateBytes mine = state;
    if (sharded && comm && strategy.kind != StrategyKind::kZero1) {
      mine.grads_peak = grads_peak(a.spans, *shards);
    }
    need = std::max(need, static_cast<double>(mine.persistent() + mine.activations +
                                              mine.gathered_peak + mine.grads_peak + casts));
    for (const int r : a.ranks) {
      for (Span s : a.spans) {
        s.rank = r;
        if (config.record) result.timeline.spans.push_back(s);
      }
      for (int s = 0; s < config.steps; ++s) {
        const auto& [start, end] = a.steps[static_cast<std::size_t>(s)];
        result.steps.push_back(
            {.rank = r, .step = s, .has_loss = false, .start_ns = ns(start), .end_ns = ns(end)});
      }
      result.memory.push_back({.rank = r, .state = mine});
    }
  }
  if (need > cluster.device.memory_bytes) {
    throw UsageError("--model " + config.model.text + " with --batch " +
                     std::to_string(config.batch) + " and --strategy " + strategy.to_string() +
                     " needs " + format_bytes(need) + " per device (" +
                     std::to_string(static_cast<long long>(need)) +
                     " bytes: parameters, gradients, optimizer state and activations), but " +
                     cluster.device.name + " has " + format_bytes(cluster.device.memory_bytes));
  }
  std::sort(result.steps.begin(), result.steps.end(), [](const StepRecord& x, const StepRecord& y) {
    return std::tie(x.step, x.rank) < std::tie(y.step, y.rank);
  });
  std::sort(result.memory.begin(), result.memory.end(),
            [](const RankMemory& x, const RankMemory& y) { return x.rank < y.rank; });
  if (reducer) {
    result.buckets = reducer->buckets();
    result.sync = strategy.to_string() + ", " + std::to_string(result.buckets.size()) +
                  (result.buckets.size() == 1 ? " bucket" : " buckets");
  } else {
    result.sync = strategy.to_string() + ", " + std::to_string(layout.units()) +
                  " units sharded over " + std::to_string(config.ranks) + " ranks";
    if (strategy.kind == StrategyKind::kFsdp) {
      result.sync += ", prefetch " + std::to_string(config.shard.prefetch);
      if (!config.shard.reshard_after_forward) result.sync += ", kept from forward to backward";
    }
  }
  for (const CollectiveOp& op : program.collectives) result.bytes_per_step += op.bytes;
  char blas[160];
  std::snprintf(blas, sizeof blas, "simulated %s GEMMs at %.0f%% of %s's peak (%.1f TFLOP/s)",
                std::string(to_string(config.precision)).c_str(),
                100 * cluster.device.gemm_efficiency, cluster.device.name.c_str(),
                cluster.device.peak(config.precision) / 1e12);
  result.blas = blas;
  result.backend = "simulated";
  result.backend_details = "hierarchical ring collectives on " + cluster.describe();
  const int per_node = std::min(config.ranks, cluster.devices_per_node);
  result.hosts = (config.ranks + per_node - 1) / per_node;
  result.ranks_per_host = per_node;
  result.device = "simulated";
  result.device_details = cluster.device.name + " (" + cluster.device.source + ")";
  result.timing_source = "simulated";
  return result;
}

}  // namespace tandem
