// The simulator's costs and its event-driven engine (simulator.h).
#include "simulate/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/parse.h"
#include "ddp/launch_schedule.h"
#include "ddp/reducer.h"
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

double allreduce_seconds(const Cluster& cluster, int ranks, double bytes) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const int per_node = std::min(ranks, cluster.devices_per_node);
  const int nodes = (ranks + per_node - 1) / per_node;
  // Inside a node: reduce-scatter then all-gather (2 x (d-1)/d); across nodes: an
  // all-reduce of each device's 1/d share over its share of the node's NICs.
  double seconds = ring_seconds(per_node, bytes, cluster.intra, 2.0);
  if (nodes > 1) {
    LinkProfile net = cluster.inter;
    net.bandwidth_bytes_per_s =
        cluster.inter.bandwidth_bytes_per_s * cluster.nics_per_node / per_node;
    seconds += ring_seconds(nodes, bytes / per_node, net, 2.0);
  }
  return seconds;
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
    c.forward[i] = c.forward_flops[i] / flop_rate + (weights + activation_bytes[i]) / bw;
    c.backward[i] = c.backward_flops[i] / flop_rate + (3 * weights + 2 * activation_bytes[i]) / bw;
  }
  // Softmax cross-entropy: logits read and written, then read again for the gradient.
  c.loss_forward = 4.0 * 2 * loss_elements / bw;
  c.loss_backward = 4.0 * 2 * loss_elements / bw;
  // SGD with momentum: parameters, gradients and velocity read; parameters and velocity
  // written.
  c.optimizer = 4.0 * 5 * static_cast<double>(layout.numel()) / bw;
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
  int bucket = -1;  // kPost, kWait
};

// One step of a rank, as the trainer's loop runs it with the Reducer (engine/trainer.cpp,
// ddp/reducer.cpp): every micro-batch's forward, loss and backward; in the last one each
// unit's backward marks its gradients ready and the buckets that became ready are issued
// in plan order; before the optimizer the rest is issued and every bucket waited for.
std::vector<StepOp> step_program(const TrainConfig& config, const UnitCosts& costs,
                                 const std::vector<Bucket>& buckets,
                                 const std::vector<GradParam>& params) {
  const int U = static_cast<int>(costs.forward.size());
  const int A = micro_batches(config);
  const bool comm = config.reducer.mode != CommMode::kOff;
  const bool overlap = config.reducer.mode == CommMode::kOverlapped &&
                       config.reducer.plan.strategy.kind != StrategyKind::kSequential;
  const double work = config.compute ? 1.0 : 0.0;  // comm-only: the same collectives
  LaunchSchedule schedule(params, buckets);
  schedule.reset();
  std::vector<StepOp> program;
  auto post = [&](int b) {
    if (comm &&
        buckets[static_cast<std::size_t>(b)].end > buckets[static_cast<std::size_t>(b)].begin) {
      program.push_back({.kind = StepOpKind::kPost, .tag = b, .bucket = b});
    }
  };
  for (int m = 0; m < A; ++m) {
    for (int u = 0; u < U; ++u) {
      const auto i = static_cast<std::size_t>(u);
      program.push_back({.span = SpanKind::kForward,
                         .tag = u,
                         .micro = m,
                         .seconds = work * costs.forward[i],
                         .flops = costs.forward_flops[i]});
    }
    program.push_back(
        {.span = SpanKind::kForward, .tag = U, .micro = m, .seconds = work * costs.loss_forward});
    program.push_back(
        {.span = SpanKind::kBackward, .tag = U, .micro = m, .seconds = work * costs.loss_backward});
    for (int u = U - 1; u >= 0; --u) {
      const auto i = static_cast<std::size_t>(u);
      program.push_back({.span = SpanKind::kBackward,
                         .tag = u,
                         .micro = m,
                         .seconds = work * costs.backward[i],
                         .flops = costs.backward_flops[i]});
      if (m != A - 1) continue;
      schedule.mark_unit_ready(u);
      if (!overlap) continue;
      for (int b = schedule.take_ready(); b >= 0; b = schedule.take_ready()) post(b);
    }
  }
  for (int b = schedule.take_next(); b >= 0; b = schedule.take_next()) post(b);
  if (comm) {
    for (const Bucket& b : buckets) {
      if (b.end > b.begin)
        program.push_back({.kind = StepOpKind::kWait, .tag = b.index, .bucket = b.index});
    }
  }
  program.push_back({.span = SpanKind::kOptimizer, .seconds = work * costs.optimizer});
  return program;
}

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
  int step = 0;
  int bucket = 0;
  double remaining = 0;  // seconds at full rate
  int issued = 0;        // actors that issued it
  bool started = false;
  bool done = false;
  double start = 0;
};

std::int64_t ns(double seconds) { return std::llround(seconds * 1e9); }

}  // namespace

TrainResult simulate_training(const TrainConfig& config, const SimulateOptions& options) {
  const Cluster& cluster = options.cluster;
  if (config.reducer.plan.strategy.sharded()) {
    throw UsageError("--strategy " + config.reducer.plan.strategy.to_string() +
                     ": tandem simulate predicts the DDP family (sequential, layerwise, "
                     "bucketed, chunked:N) so far; sharded strategies are not simulated yet");
  }
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
  const ModelLayout layout(config.model);
  // Memory: a whole replica (the Reducer's StateBytes) and the passes' buffers (the
  // model layer's own formula), against the device's capacity.
  const auto replica = static_cast<std::int64_t>(layout.numel() * sizeof(float));
  StateBytes state{.params = replica, .grads = replica, .optimizer = replica};
  const int rows = micro_batch_rows(config);
  state.activations = config.model.is_transformer() ? Transformer::buffer_bytes(config.model, rows)
                                                    : Mlp::buffer_bytes(config.model, rows);
  if (casts_gemm_inputs(config.precision)) state.activations += replica / 2;  // 16-bit weights
  const double need = static_cast<double>(state.persistent() + state.activations);
  if (need > cluster.device.memory_bytes) {
    throw UsageError("--model " + config.model.text + " with --batch " +
                     std::to_string(config.batch) + " needs " + format_bytes(need) +
                     " per device (" + std::to_string(static_cast<long long>(need)) +
                     " bytes: parameters, gradients, momentum and activations), but " +
                     cluster.device.name + " has " + format_bytes(cluster.device.memory_bytes));
  }
  for (const Straggler& s : options.stragglers) {
    if (s.rank >= config.ranks) {
      throw UsageError("--straggler rank=" + std::to_string(s.rank) + ": the run has " +
                       std::to_string(config.ranks) + " ranks");
    }
  }

  const UnitCosts costs = unit_costs(config, cluster);
  const std::vector<GradParam> params = grad_params(layout);
  const std::vector<Bucket> buckets = plan_buckets(params, layout.numel(), config.reducer.plan);
  const std::vector<StepOp> program = step_program(config, costs, buckets, params);

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
  const int nb = static_cast<int>(buckets.size());
  std::vector<Collective> collectives(static_cast<std::size_t>(nb) *
                                      static_cast<std::size_t>(std::max(1, config.steps)));
  for (int s = 0; s < config.steps; ++s) {
    for (const Bucket& b : buckets) {
      Collective& c = collectives[static_cast<std::size_t>(s * nb + b.index)];
      c.step = s;
      c.bucket = b.index;
      c.remaining = allreduce_seconds(cluster, config.ranks, static_cast<double>(b.bytes()));
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
            const Collective& c =
                collectives[static_cast<std::size_t>(a.step * nb + program[a.pc].bucket)];
            if (!c.done) break;
            a.spans.push_back({.lane = Lane::kWait,
                               .kind = SpanKind::kWait,
                               .step = a.step,
                               .tag = c.bucket,
                               .start_ns = ns(a.wait_start),
                               .end_ns = ns(t)});
            a.waiting = false;
            ++a.pc;
            progress = true;
            continue;
          }
          if (a.pc == program.size()) {  // the step is done
            a.steps.emplace_back(a.step_start, t);
            a.step_start = -1;
            a.pc = 0;
            a.finished = ++a.step == config.steps;
            progress = true;
            continue;
          }
          if (a.step_start < 0) a.step_start = t;
          const StepOp& op = program[a.pc];
          if (op.kind == StepOpKind::kPost) {
            const int id = a.step * nb + op.bucket;
            ++collectives[static_cast<std::size_t>(id)].issued;
            a.queue.push_back(id);
            a.issued_at[id] = t;
            ++a.pc;
          } else if (op.kind == StepOpKind::kWait) {
            if (collectives[static_cast<std::size_t>(a.step * nb + op.bucket)].done) {
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
          c.started = true;
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
      const StepOp& op = program[a.pc];
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
        const Bucket& b = buckets[static_cast<std::size_t>(c.bucket)];
        for (Actor& a : actors) {
          a.spans.push_back({.lane = Lane::kComm,
                             .kind = SpanKind::kAllreduce,
                             .step = c.step,
                             .tag = c.bucket,
                             .start_ns = ns(c.start),
                             .end_ns = ns(t),
                             .bytes = b.bytes(),
                             .issue_ns = ns(a.issued_at[in_flight])});
          a.issued_at.erase(in_flight);
          a.queue.pop_front();
        }
        in_flight = -1;
      }
    }
  }

  // The measured run's shape: every rank's spans and steps.
  TrainResult result;
  result.timeline.ranks = config.ranks;
  for (const Actor& a : actors) {
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
      result.memory.push_back({.rank = r, .state = state});
    }
  }
  std::sort(result.steps.begin(), result.steps.end(), [](const StepRecord& x, const StepRecord& y) {
    return std::tie(x.step, x.rank) < std::tie(y.step, y.rank);
  });
  std::sort(result.memory.begin(), result.memory.end(),
            [](const RankMemory& x, const RankMemory& y) { return x.rank < y.rank; });
  result.buckets = buckets;
  result.sync = config.reducer.plan.strategy.to_string() + ", " + std::to_string(buckets.size()) +
                (buckets.size() == 1 ? " bucket" : " buckets");
  for (const Bucket& b : buckets) {
    if (config.reducer.mode != CommMode::kOff) result.bytes_per_step += b.bytes();
  }
  char blas[160];
  std::snprintf(blas, sizeof blas, "simulated %s GEMMs at %.0f%% of %s's peak (%.1f TFLOP/s)",
                std::string(to_string(config.precision)).c_str(),
                100 * cluster.device.gemm_efficiency, cluster.device.name.c_str(),
                cluster.device.peak(config.precision) / 1e12);
  result.blas = blas;
  result.backend = "simulated";
  result.backend_details = "hierarchical ring all-reduce on " + cluster.describe();
  const int per_node = std::min(config.ranks, cluster.devices_per_node);
  result.hosts = (config.ranks + per_node - 1) / per_node;
  result.ranks_per_host = per_node;
  result.device = "simulated";
  result.device_details = cluster.device.name + " (" + cluster.device.source + ")";
  result.timing_source = "simulated";
  return result;
}

}  // namespace tandem
