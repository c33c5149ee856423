// The simulator's costs and its event-driven engine (simulator.h).
#include "simulate/simulator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <numeric>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/page_array.h"
#include "core/parse.h"
#include "ddp/launch_schedule.h"
#include "ddp/reducer.h"
#include "ddp/shard_schedule.h"
#include "ddp/sharded.h"
#include "ddp/stage_sync.h"
#include "engine/pipeline.h"
#include "engine/pipeline_schedule.h"
#include "model/mlp.h"
#include "model/model_ops.h"
#include "model/transformer.h"

namespace tandem {

Straggler Straggler::parse(std::string_view text) {
  const auto kv = parse_key_values(text, "--straggler", "rank compute");
  if (!kv.count("rank") || !kv.count("compute")) {
    throw UsageError("--straggler " + std::string(text) + ": expected rank=R,compute=Fx");
  }
  Straggler s;
  s.rank = static_cast<int>(parse_int_in(kv.at("rank"), "--straggler rank", 0, 1 << 30));
  s.compute = parse_factor(kv.at("compute"), "--straggler compute", {.min = 0.01, .max = 100});
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

namespace {

// `per_node` members on each of the `nodes` nodes `node_of` numbers: a ring inside each
// node over its members (at the slowest node's link), and across the nodes each member's
// 1/per_node share over its device's share of the node's NICs (every device of a node has
// one: the node may run other groups beside this one), at the slowest node's network:
// a ring, or for an all-reduce a tree where that is faster (NCCL picks the faster of the
// two by size; the tree's bandwidth term is taken as the ring's 2 S / B, no better, and
// its latency as 2 log2(n) hops instead of 2 (n-1)).
double hierarchical_seconds(const Cluster& cluster, SpanKind kind, int per_node, int nodes,
                            const std::function<int(int)>& node_of, double bytes) {
  if (per_node * nodes <= 1 || bytes <= 0) return 0;
  TANDEM_CHECK(kind == SpanKind::kAllreduce || kind == SpanKind::kReduceScatter ||
               kind == SpanKind::kAllgather);
  // An all-reduce is a reduce-scatter and an all-gather: twice the traffic of either.
  const double share = kind == SpanKind::kAllreduce ? 2.0 : 1.0;
  double intra = 1, network = 1;
  for (const DegradedLink& d : cluster.degraded) {
    for (int i = 0; i < nodes; ++i) {
      if (node_of(i) != d.node) continue;
      intra = std::min(intra, d.intra);
      network = std::min(network, d.network);
    }
  }
  LinkProfile link = cluster.intra;
  link.bandwidth_bytes_per_s *= intra;
  double seconds = ring_seconds(per_node, bytes, link, share);
  if (nodes > 1) {
    LinkProfile net = cluster.inter;
    net.bandwidth_bytes_per_s = network * cluster.inter.bandwidth_bytes_per_s *
                                cluster.nics_per_node /
                                std::max(per_node, cluster.devices_per_node);
    const double part = bytes / per_node;
    double across = ring_seconds(nodes, part, net, share);
    if (kind == SpanKind::kAllreduce) {
      const double tree = 2 * part / net.bandwidth_bytes_per_s +
                          2 * std::ceil(std::log2(static_cast<double>(nodes))) * net.latency_s;
      across = std::min(across, tree);
    }
    seconds += across;
  }
  return seconds;
}

}  // namespace

double collective_seconds(const Cluster& cluster, SpanKind kind, int ranks, double bytes) {
  const int per_node = std::min(ranks, cluster.devices_per_node);
  return hierarchical_seconds(
      cluster, kind, per_node, (ranks + per_node - 1) / per_node, [](int i) { return i; }, bytes);
}

double expected_slowest(int n) {
  if (n < 2) return 0;
  // The integral of x n phi(x) Phi(x)^(n - 1) over x, by Simpson's rule on [-12, 12]:
  // beyond, the integrand is under 1e-30 for any n an int holds.
  constexpr int kSteps = 4800;
  constexpr double kLo = -12, kHi = 12, kH = (kHi - kLo) / kSteps;
  double sum = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double x = kLo + i * kH;
    const double cdf = 0.5 * std::erfc(-x / std::numbers::sqrt2);
    if (!(cdf > 0)) continue;
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    const double weight = i == 0 || i == kSteps ? 1 : i % 2 == 1 ? 4 : 2;
    sum += weight * x * n * pdf * std::exp((n - 1) * std::log(cdf));
  }
  return sum * kH / 3;
}

double allreduce_seconds(const Cluster& cluster, int ranks, double bytes) {
  return collective_seconds(cluster, SpanKind::kAllreduce, ranks, bytes);
}

namespace {

// Note [tensor-parallel passes]: with --tensor T a unit's pass is what the split model
// (model/transformer_passes.h) runs on one rank of the group, in its order: its compute
// cut by the tensor group's collectives, each waited for in place (the next product reads
// its result), or with --tp-overlap by the rings that feed or consume a product block by
// block. The FLOPs of each piece are the engine's spans'; the unit's bytes (unit_costs)
// are dealt out as the elementwise kernels stream them (a norm reads and writes n x D, a
// residual add reads two and writes one, a norm's backward reads three and writes one;
// n = N / T tokens with sequence parallelism), the rest to the products by their FLOPs.
// Per micro-batch, with N tokens of width D (E = N x D floats, counted as the engine's
// TensorParallel counts them):
//   plain     forward: the embedding's all-reduce E, two per block (after attention's and
//             the MLP's row-parallel products); the loss's row maxima gathered (N x T) and
//             its sums all-reduced (2N). backward: one all-reduce E after each
//             column-parallel product's input gradient (qkv, up, the head).
//   sequence  each all-reduce E a reduce-scatter E, and an all-gather E before each
//             column-parallel product (forward; in backward again for its weight gradient,
//             and the row-parallel products' output gradients), the norms' gradients
//             summed (2D gpt, D llama) after each norm's backward.
//   overlap   every gather and reduce-scatter of the blocks, the embedding and the head
//             is a ring of T - 1 steps of n x D each; the loss's and the norms' stay.
struct PieceList {
  std::vector<PassPiece> pieces;
  std::vector<double> bytes;  // per piece: the bytes it streams, < 0: a share of the rest

  void compute(ModelOp op, double flops, double streamed = -1) {
    pieces.push_back({.flops = flops, .name = op_name(op)});
    bytes.push_back(streamed);
  }
  void collective(SpanKind kind, double moved) {
    pieces.push_back({.kind = PassPiece::Kind::kCollective,
                      .collective = kind,
                      .bytes = static_cast<std::int64_t>(moved)});
    bytes.push_back(0);
  }
  void ring(bool gather, ModelOp op, double flops, double step_bytes) {
    pieces.push_back(
        {.kind = gather ? PassPiece::Kind::kRingGather : PassPiece::Kind::kRingReduceScatter,
         .flops = flops,
         .name = op_name(op),
         .bytes = static_cast<std::int64_t>(step_bytes)});
    bytes.push_back(-1);
  }
  // Prices the compute: `total_bytes` dealt out as above, and the pass's products by
  // weights (`weight_flops` reading `weight_bytes`) likewise among the products, at the
  // device's rates; the pieces' seconds sum to the pass's (pass_seconds is homogeneous).
  std::vector<PassPiece> priced(double total_bytes, double weight_flops, double weight_bytes,
                                const PassRates& rates) {
    double explicit_bytes = 0, product_flops = 0;
    int products = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (bytes[i] >= 0) {
        explicit_bytes += bytes[i];
      } else {
        product_flops += pieces[i].flops;
        ++products;
      }
    }
    const double rest = std::max(0.0, total_bytes - explicit_bytes);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      PassPiece& piece = pieces[i];
      if (piece.kind == PassPiece::Kind::kCollective) continue;
      const double share = product_flops > 0 ? piece.flops / product_flops
                           : products > 0    ? 1.0 / products
                                             : 0.0;
      const bool product = bytes[i] < 0;
      piece.streamed = product ? rest * share : bytes[i];
      piece.weight_flops = product ? weight_flops * share : 0;
      piece.weight_bytes = product ? weight_bytes * share : 0;
      piece.seconds =
          pass_seconds(rates, piece.flops, piece.streamed, piece.weight_flops, piece.weight_bytes);
    }
    return std::move(pieces);
  }
};

double pieces_seconds(const std::vector<PassPiece>& pieces) {
  double total = 0;
  for (const PassPiece& piece : pieces) {
    if (piece.kind != PassPiece::Kind::kCollective) total += piece.seconds;
  }
  return total;
}

// The tensor-parallel pieces of every unit's forward and backward and of the loss's
// forward (Note [tensor-parallel passes]), priced from the unit's FLOPs and bytes.
void tensor_pieces(const ModelSpec& spec, int rows, const PassRates& rates, UnitCosts& c) {
  const TransformerShape& s = spec.transformer;
  const TensorShard shard = TensorShard::of(spec);
  const bool gpt = spec.kind == ModelKind::kGpt;
  const double N = static_cast<double>(rows) * s.seq, D = s.dim, T = shard.ranks;
  const double n = static_cast<double>(shard.local(static_cast<std::size_t>(N)));
  const double W = shard.width, F = shard.hidden, Tn = s.seq, up = gpt ? F : 2 * F;
  const double E = 4 * N * D;          // bytes of an [N, D] tensor
  const double ring_step = 4 * n * D;  // one ring step's send
  const double norm_grads = 4 * (gpt ? 2 * D : D);
  const bool sequence = shard.sequence, overlap = shard.overlap;
  const TransformerFlops f = transformer_flops(spec, rows);
  const int L = s.layers, U = L + 2;
  const double norm_fwd = 4 * 2 * n * D, residual = 4 * 3 * n * D, norm_bwd = 4 * 4 * n * D;
  c.forward_pieces.assign(static_cast<std::size_t>(U), {});
  c.backward_pieces.assign(static_cast<std::size_t>(U), {});
  // A row-parallel product's partial sums: all-reduced, or reduce-scattered to this rank's
  // tokens; a column-parallel product's input: every token's, gathered with sequence
  // parallelism.
  const auto row_sum = [&](PieceList& p) {
    p.collective(sequence ? SpanKind::kReduceScatter : SpanKind::kAllreduce, E);
  };
  const auto every_token = [&](PieceList& p) {
    if (sequence) p.collective(SpanKind::kAllgather, E);
  };
  const auto norm_backward = [&](PieceList& p) {
    p.compute(ModelOp::kNorm, 0, norm_bwd);
    if (sequence) p.collective(SpanKind::kAllreduce, norm_grads);
  };
  // A block's forward (or, `replay`, its recomputation up to the down projection).
  const auto block_forward = [&](PieceList& p, bool replay) {
    const ModelOp attention = replay ? ModelOp::kRecompute : ModelOp::kAttention;
    const ModelOp mlp = replay ? ModelOp::kRecompute : ModelOp::kMlp;
    p.compute(ModelOp::kNorm, 0, norm_fwd);
    if (overlap) {
      p.ring(true, attention, 2 * N * D * 3 * W, ring_step);
      p.compute(attention, 4 * N * Tn * W);
      p.ring(false, attention, 2 * N * W * D, ring_step);
    } else {
      every_token(p);
      p.compute(attention, f.attention);
      row_sum(p);
    }
    p.compute(ModelOp::kResidual, 0, residual);
    p.compute(ModelOp::kNorm, 0, norm_fwd);
    if (overlap) {
      p.ring(true, mlp, 2 * N * D * up, ring_step);
      p.compute(mlp, 0, 4 * N * (up + F));
      if (replay) return;
      p.ring(false, mlp, 2 * N * F * D, ring_step);
    } else {
      every_token(p);
      p.compute(mlp, replay ? f.mlp - 2 * N * F * D : f.mlp);
      if (replay) return;
      row_sum(p);
    }
    p.compute(ModelOp::kResidual, 0, residual);
  };
  for (int u = 0; u < U; ++u) {
    const auto i = static_cast<std::size_t>(u);
    PieceList fwd, bwd;
    if (u == 0) {
      if (overlap) {
        fwd.ring(false, ModelOp::kEmbedding, 0, ring_step);
      } else {
        fwd.compute(ModelOp::kEmbedding, 0);
        row_sum(fwd);
      }
      if (gpt) fwd.compute(ModelOp::kEmbedding, 0, 4 * 2 * n * D);
      if (overlap) {
        bwd.ring(true, ModelOp::kEmbedding, 0, ring_step);
      } else {
        every_token(bwd);
        bwd.compute(ModelOp::kEmbedding, 0);
      }
    } else if (u == L + 1) {
      fwd.compute(ModelOp::kNorm, 0, norm_fwd);
      if (overlap) {
        fwd.ring(true, ModelOp::kHead, f.head, ring_step);
        bwd.ring(true, ModelOp::kHead, f.head, ring_step);   // the weight's gradient
        bwd.ring(false, ModelOp::kHead, f.head, ring_step);  // the input's
      } else {
        every_token(fwd);
        fwd.compute(ModelOp::kHead, f.head);
        every_token(bwd);
        bwd.compute(ModelOp::kHead, 2 * f.head);
        row_sum(bwd);
      }
      norm_backward(bwd);
    } else {
      block_forward(fwd, false);
      if (spec.recompute == Recompute::kFull) block_forward(bwd, true);
      // The MLP: its output gradient gathered (sequence parallelism), the down and up
      // products' backward, the up's input gradient summed, the norm's backward.
      if (overlap) {
        bwd.ring(true, ModelOp::kMlp, 4 * N * F * D, ring_step);
        bwd.compute(ModelOp::kMlp, 0, 4 * N * (up + 2 * F));
        bwd.ring(true, ModelOp::kMlp, 2 * N * D * up, ring_step);
        bwd.ring(false, ModelOp::kMlp, 2 * N * D * up, ring_step);
      } else {
        every_token(bwd);
        bwd.compute(ModelOp::kMlp, 2 * f.mlp);
        if (sequence) {
          every_token(bwd);  // the norm's output again, for the up's weight gradient
          bwd.compute(ModelOp::kMlp, 0);
        }
        row_sum(bwd);
      }
      norm_backward(bwd);
      if (spec.recompute == Recompute::kSelective) bwd.compute(ModelOp::kRecompute, 4 * N * Tn * W);
      if (overlap) {
        bwd.ring(true, ModelOp::kAttention, 4 * N * W * D, ring_step);
        bwd.compute(ModelOp::kAttention, 8 * N * Tn * W);
        bwd.ring(true, ModelOp::kAttention, 2 * N * D * 3 * W, ring_step);
        bwd.ring(false, ModelOp::kAttention, 2 * N * D * 3 * W, ring_step);
      } else {
        every_token(bwd);
        bwd.compute(ModelOp::kAttention, 2 * f.attention);
        if (sequence) {
          every_token(bwd);
          bwd.compute(ModelOp::kAttention, 0);
        }
        row_sum(bwd);
      }
      norm_backward(bwd);
    }
    c.forward_pieces[i] =
        fwd.priced(c.forward_bytes[i], c.forward_weight_flops[i], c.forward_weight_bytes[i], rates);
    c.backward_pieces[i] = bwd.priced(c.backward_bytes[i], c.backward_weight_flops[i],
                                      c.backward_weight_bytes[i], rates);
    c.forward[i] = pieces_seconds(c.forward_pieces[i]);
    c.backward[i] = pieces_seconds(c.backward_pieces[i]);
  }
  // The parallel cross-entropy: row maxima, gathered; exponentials' sums and the targets'
  // logits, all-reduced; each rank normalizes its columns (Note [parallel cross-entropy]).
  PieceList loss;
  loss.compute(ModelOp::kLoss, 0, c.loss_bytes / 4);
  loss.collective(SpanKind::kAllgather, 4 * N * T);
  loss.compute(ModelOp::kLoss, 0, c.loss_bytes / 2);
  loss.collective(SpanKind::kAllreduce, 4 * 2 * N);
  loss.compute(ModelOp::kLoss, 0, c.loss_bytes / 4);
  c.loss_pieces = loss.priced(c.loss_bytes, 0, 0, rates);
  c.loss_forward = pieces_seconds(c.loss_pieces);
}

}  // namespace

UnitCosts unit_costs(const TrainConfig& config, const Cluster& cluster) {
  const ModelSpec& spec = config.model;
  const ModelLayout layout(spec);
  const DeviceProfile& d = cluster.device;
  const double flop_rate = d.peak(config.precision) * d.gemm_efficiency;
  const double bw = d.memory_bytes_per_s;
  UnitCosts c;
  c.rates = {.flop_s = 1 / flop_rate, .byte_s = 1 / bw, .weight_byte_s = 1 / d.weight_rate()};
  const PassRates& rates = c.rates;
  const int U = layout.units();
  const int rows = micro_batch_rows(config);
  const auto per_unit = static_cast<std::size_t>(U);
  for (auto* v : {&c.forward, &c.backward, &c.forward_flops, &c.backward_flops, &c.forward_bytes,
                  &c.backward_bytes, &c.forward_weight_flops, &c.backward_weight_flops,
                  &c.forward_weight_bytes, &c.backward_weight_bytes}) {
    v->assign(per_unit, 0);
  }
  // Per unit: its GEMMs, those by its weights apart (Note [a GEMM's weights] in
  // cluster.cpp), and the memory its passes stream: the activations the elementwise
  // kernels read and write, the weights' gradients (read and written in backward) and the
  // weights no product reads (an embedding's rows).
  std::vector<double> activation_bytes(per_unit, 0);
  double loss_elements = 0;
  if (spec.is_transformer()) {
    const TransformerShape& s = spec.transformer;
    // A tensor-parallel rank's share (its heads and MLP width; with sequence parallelism
    // its tokens of the D-wide tensors); the whole model without.
    const TensorShard shard = TensorShard::of(spec);
    const double N = static_cast<double>(rows) * s.seq;
    const double n = static_cast<double>(shard.local(static_cast<std::size_t>(N)));
    const TransformerFlops f = transformer_flops(spec, rows);
    // The attention's scores and weighted sum multiply activations, not weights.
    const double scores = 4 * N * s.seq * shard.width;
    for (int u = 0; u < U; ++u) {
      const auto i = static_cast<std::size_t>(u);
      const bool block = u >= 1 && u <= s.layers;
      const double fl = u == 0 ? 0 : block ? f.attention + f.mlp : f.head;
      c.forward_flops[i] = fl;
      c.backward_flops[i] = 2 * fl;
      c.forward_weight_flops[i] = u == 0 ? 0 : block ? fl - scores : fl;
      c.backward_weight_flops[i] = c.forward_weight_flops[i];  // the input's gradient
      // A block's norms, residual adds, activation and softmax over [B, H, T, T]; the
      // embedding writes the stream; the head's norm reads and writes it.
      const double softmax = 3.0 * rows * shard.heads * static_cast<double>(s.seq) * s.seq;
      activation_bytes[i] =
          4.0 * (block ? n * 12.0 * s.dim + N * 3.0 * shard.hidden + softmax : 2.0 * n * s.dim);
      // --recompute (Note [activation recomputation] in model/transformer_passes.h): a
      // block's backward runs its forward again but the down projection (full), or the
      // attention's scores, softmax and weighted sum (selective). The bytes follow below
      // with the backward's.
      const double down = 2 * N * shard.hidden * s.dim;
      if (block && spec.recompute == Recompute::kFull) {
        c.backward_flops[i] += fl - down;
        c.backward_weight_flops[i] += c.forward_weight_flops[i] - down;
      } else if (block && spec.recompute == Recompute::kSelective) {
        c.backward_flops[i] += scores;
      }
    }
    loss_elements = N * shard.vocab;
  } else {
    for (int u = 0; u < U; ++u) {
      const auto i = static_cast<std::size_t>(u);
      const LinearLayout& l = layout.layer(u);
      const double fl = 2.0 * rows * l.in * l.out;
      c.forward_flops[i] = c.forward_weight_flops[i] = fl;
      // The first layer computes no input gradient.
      c.backward_flops[i] = (u > 0 ? 2 : 1) * fl;
      c.backward_weight_flops[i] = u > 0 ? fl : 0;
      activation_bytes[i] = 4.0 * 2 * rows * l.out;
    }
    loss_elements = static_cast<double>(rows) * spec.classes;
  }
  for (int u = 0; u < U; ++u) {
    const auto i = static_cast<std::size_t>(u);
    const double weights = 4.0 * static_cast<double>(layout.unit_end(u) - layout.unit_begin(u));
    // Backward adds into the weights' gradient (read and written).
    const double gradient = 2 * weights;
    if (c.forward_weight_flops[i] > 0) {
      // Every product reads its weights; backward's input gradient reads them again. A
      // tied head multiplies by the embedding's table, which is not its unit's.
      double read = weights;
      if (spec.is_transformer() && u == U - 1) {
        read = std::max(read, 4.0 * TensorShard::of(spec).vocab * spec.transformer.dim);
      }
      c.forward_weight_bytes[i] = read;
      c.forward_bytes[i] = activation_bytes[i];
      c.backward_weight_bytes[i] = c.backward_weight_flops[i] > 0 ? read : 0;
      c.backward_bytes[i] = gradient + 2 * activation_bytes[i];
    } else {
      // An embedding is a lookup: it reads (and its backward adds into) one row of the
      // table per token, and gpt's positions, not the whole vocabulary.
      double looked_up = weights;
      if (spec.is_transformer()) {
        const TransformerShape& s = spec.transformer;
        looked_up = std::min(weights, 4.0 * (static_cast<double>(rows) + 1) * s.seq * s.dim);
      }
      c.forward_bytes[i] = looked_up + activation_bytes[i];
      c.backward_bytes[i] = 3 * looked_up + 2 * activation_bytes[i];
    }
    const bool block = spec.is_transformer() && u >= 1 && u <= spec.transformer.layers;
    if (block && spec.recompute == Recompute::kFull) {
      c.backward_bytes[i] += c.forward_bytes[i];
      c.backward_weight_bytes[i] += c.forward_weight_bytes[i];
    } else if (block && spec.recompute == Recompute::kSelective) {
      const TransformerShape& s = spec.transformer;
      c.backward_bytes[i] +=
          4.0 * 3 * rows * TensorShard::of(spec).heads * static_cast<double>(s.seq) * s.seq;
    }
    c.forward[i] = pass_seconds(rates, c.forward_flops[i], c.forward_bytes[i],
                                c.forward_weight_flops[i], c.forward_weight_bytes[i]);
    c.backward[i] = pass_seconds(rates, c.backward_flops[i], c.backward_bytes[i],
                                 c.backward_weight_flops[i], c.backward_weight_bytes[i]);
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
  c.touch_seconds = d.first_touch_bytes_per_s > 0 ? 1 / d.first_touch_bytes_per_s : 0;
  c.give_back = d.give_back_s;
  if (spec.tensor > 1) tensor_pieces(spec, rows, rates, c);
  return c;
}

std::int64_t given_back_bytes(const ModelLayout& layout, int u) {
  const std::size_t huge = PageMemory::kHugePage;
  const auto round_up = [huge](std::size_t bytes) { return (bytes + huge - 1) / huge * huge; };
  std::size_t owned = (layout.owned_end(u) - layout.unit_begin(u)) * sizeof(float);
  if (owned < PageMemory::kMinGiveBack) return 0;
  // The array's last unit owns the rest of its last huge page too.
  if (layout.owned_end(u) == layout.numel()) {
    owned = round_up(layout.numel() * sizeof(float)) - layout.unit_begin(u) * sizeof(float);
  }
  // A write faults whole pages back in: huge ones (flat_array advises a unit's range).
  const std::size_t written = (layout.unit(u).padded_end - layout.unit_begin(u)) * sizeof(float);
  return static_cast<std::int64_t>(std::min(owned, round_up(written)));
}

TouchedAgain touched_again(const TrainConfig& config) {
  if (config.reducer.mode == CommMode::kOff) return {};
  const StrategyKind kind = config.reducer.plan.strategy.kind;
  return {.params = kind == StrategyKind::kFsdp,
          .grads = kind == StrategyKind::kZero2 || kind == StrategyKind::kFsdp};
}

std::vector<std::int64_t> backward_touched_bytes(const ModelLayout& layout) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(layout.units()), 0);
  std::vector<bool> written(out.size(), false);
  for (int u = layout.units() - 1; u >= 0; --u) {
    for (const int v : layout.units_read(u)) {
      if (written[static_cast<std::size_t>(v)]) continue;
      written[static_cast<std::size_t>(v)] = true;
      out[static_cast<std::size_t>(u)] += given_back_bytes(layout, v);
    }
  }
  return out;
}

namespace {

// kIdle: the rank does nothing for a while (a replay's measured gap before a pass).
enum class StepOpKind : std::uint8_t { kCompute, kPost, kWait, kIdle };

struct StepOp {
  StepOpKind kind = StepOpKind::kCompute;
  SpanKind span = SpanKind::kForward;
  int tag = -1;
  int micro = -1;
  double seconds = 0;
  double flops = 0;
  int transfer = -1;  // kPost, kWait: into StepPlan::transfers
  NameId name = kNoName;  // a compute span's (ModelOp), as the real rank records it
};

// A collective or a point-to-point transfer of a step, and who takes part: a collective
// moves once every participant has issued it and finished the collectives it issued
// before on the same communicator (one per channel, in order, as a NCCL stream or
// tandem's communication thread runs them); a transfer (sender, receiver) once both have
// posted it, whatever else is in flight.
struct Transfer {
  SpanKind kind = SpanKind::kAllreduce;  // point to point: kSend (the receiver's span: kRecv)
  std::int64_t bytes = 0;
  int tag = -1;
  // 0: the run's communicator (with --tensor, a tensor-parallel position's: Note [rank
  // order] in engine/tensor_parallel.h); 1: a stage's replicas; 2: gpt's tied embedding;
  // 3: a tensor group's
  int channel = 0;
  std::vector<int> actors;  // participants; point to point: {sender, receiver}
  double seconds = 0;       // at full rate
  // A tensor group's ring step (--tp-overlap): every member sends to the next and receives
  // from the one before at once; its actor (the group) records a send and a receive.
  bool ring = false;
  NameId name = kNoName;  // its comm spans' (tensor-parallel ones: tp)
  // Replay: its seconds are a measured collective's, which already hold whatever sharing
  // of links and contention the run had: it runs at full rate, shared with nothing. (A
  // point-to-point transfer's measured time is its transfer alone, from the later of the
  // two posts: it shares as the model's do.)
  bool measured = false;
  // Replay: the seconds it starts after it could (SimulateOptions::collective_delay).
  double start_delay = 0;
  // Replay: the seconds a rank waiting for it resumes after it ends.
  double wake_up = 0;
  bool p2p() const { return kind == SpanKind::kSend; }
};

// Every actor's program for one step, and the transfers they share.
struct StepPlan {
  std::vector<std::vector<StepOp>> programs;  // per actor
  std::vector<Transfer> transfers;
};

// One actor's step as it is built: compute, and the transfers it posts and waits for.
// `collective` makes the transfer a strategy issues (its participants and channel are the
// builder's business).
struct ProgramBuilder {
  std::vector<StepOp>* ops = nullptr;
  // (kind, bytes, tag, extra seconds: memory the collective touches again) -> transfer.
  std::function<int(SpanKind, std::int64_t, int, double)> collective;
  // A collective of the rank's tensor group (kSend: a ring step), tagged with its unit.
  std::function<int(SpanKind, std::int64_t, int)> tensor;
  // Seconds the rank idles before a pass (kind, unit), as measured; null: none.
  const std::function<double(SpanKind, int)>* idle_before = nullptr;
  int tensor_ranks = 1;  // --tensor: the ring's steps

  // Note [gaps beside waits]: a measured gap runs from the end of the rank's own work
  // before the pass (a pass, a give-back, a wait it recorded), and a recorded wait ends
  // where the pass starts (what follows one is 0.4-5 us per rank and step in
  // scripts/validate-simulate's runs): a gap is the time its thread was off its core, and
  // a collective that finished meanwhile cost no wait span (ddp/grad_sync.cpp). So the
  // gap runs beside the waits the pass follows: it goes before the first of them (a post
  // among them, issued once the thread is back, after it), and the pass starts when both
  // are over. After them, a rank whose all-reduce ran while it was off its core waited
  // for it twice (c-mlp replayed +4.1%, its steps up to 10% long).
  std::vector<StepOp>::iterator gap_at() const {
    auto at = ops->end();
    for (auto it = ops->end(); it != ops->begin();) {
      --it;
      if (it->kind == StepOpKind::kWait) {
        at = it;
      } else if (it->kind != StepOpKind::kPost) {
        break;
      }
    }
    return at;
  }
  int post(SpanKind kind, std::int64_t bytes, int tag, double extra_seconds = 0) {
    const int t = collective(kind, bytes, tag, extra_seconds);
    post_transfer(t, tag);
    return t;
  }
  void post_transfer(int t, int tag) {
    ops->push_back({.kind = StepOpKind::kPost, .tag = tag, .transfer = t});
  }
  void wait(int t, int tag) {
    ops->push_back({.kind = StepOpKind::kWait, .tag = tag, .transfer = t});
  }
  void compute(SpanKind span, int tag, int micro, double seconds, double flops,
               NameId name = kNoName) {
    if (idle_before != nullptr && *idle_before) {
      const double idle = (*idle_before)(span, tag);
      if (idle > 0) ops->insert(gap_at(), {.kind = StepOpKind::kIdle, .seconds = idle});
    }
    ops->push_back({.span = span,
                    .tag = tag,
                    .micro = micro,
                    .seconds = seconds,
                    .flops = flops,
                    .name = name});
  }
};

// One --compress fp16|bf16 cast of `elements` (either way: 4 bytes read and 2 written, or
// 2 and 4) at `byte_seconds` per byte streamed.
double cast_seconds(double elements, double byte_seconds) { return 6 * elements * byte_seconds; }

// A strategy's side of a step, at the points the rank loop calls its GradSync
// (ddp/grad_sync.h): each appends the collectives the real strategy issues and waits for
// there, from the same plan code.
class SimSync {
 public:
  virtual ~SimSync() = default;
  virtual void before_forward(ProgramBuilder& p, int unit) { (void)p, (void)unit; }
  virtual void after_forward(ProgramBuilder& p, int unit) { (void)p, (void)unit; }
  virtual void before_backward(ProgramBuilder& p, int unit) { (void)p, (void)unit; }
  virtual void after_backward(ProgramBuilder& p, int unit, bool last_micro) = 0;
  // Seconds unit's backward spends writing gradient memory the strategy gave back
  // (UnitCosts::touch_seconds), asked once per backward in program order.
  virtual double backward_touch(int unit) {
    (void)unit;
    return 0;
  }
  // Before the step's first forward (double buffering posts the previous step's buckets).
  virtual void begin_step(ProgramBuilder& p) { (void)p; }
  virtual void before_optimizer(ProgramBuilder& p) = 0;
  virtual double optimizer_seconds(const UnitCosts& costs) const { return costs.optimizer; }
  // The update: one optimizer span of optimizer_seconds, or (--overlap-optimizer) a span per
  // bucket or unit, each after its own wait. `work` scales compute (0: comm-only).
  virtual void optimizer(ProgramBuilder& p, const UnitCosts& costs, double work) {
    p.compute(SpanKind::kOptimizer, -1, -1, work * optimizer_seconds(costs), 0);
  }
  virtual void after_optimizer(ProgramBuilder& p) { (void)p; }
  virtual void end_step(ProgramBuilder& p) { (void)p; }
};

// The DDP family, as the Reducer runs it (ddp/reducer.cpp, ddp/grad_sync.cpp): in the last
// micro-batch each unit's backward marks its gradients ready and the buckets that became
// ready are issued in plan order (LaunchSchedule); before the optimizer the rest is issued
// and every bucket waited for. A pipeline stage's (StageSync) plans over its own units
// only, and launches the tied embedding's bucket only before the optimizer.
class SimReducer final : public SimSync {
 public:
  SimReducer(const TrainConfig& config, const ModelLayout& layout, const std::vector<bool>& units,
             bool hold_embedding, bool communicates, const UnitCosts& costs)
      : params_(grad_params(layout, units)),
        kept_numel_(units.empty() ? 0 : stage_kept_numel(layout, units)),
        buckets_(plan_buckets(params_, layout.numel(), config.reducer.plan)),
        schedule_(params_, buckets_),
        comm_(communicates && config.reducer.mode != CommMode::kOff),
        overlap_(config.reducer.mode == CommMode::kOverlapped &&
                 config.reducer.plan.strategy.kind != StrategyKind::kSequential),
        hold_embedding_(hold_embedding),
        overlap_optimizer_(config.reducer.overlap_optimizer &&
                           config.reducer.mode == CommMode::kOverlapped),
        double_buffer_(config.reducer.double_buffer),
        sequential_(config.reducer.mode == CommMode::kSequential),
        issued_(buckets_.size(), -1),
        compress_(config.reducer.compress),
        compute_(config.compute),
        costs_(costs) {
    schedule_.reset();
    if (compress_.kind == Compression::Kind::kPowerSgd) {
      const auto members = powersgd_params(layout, buckets_, params_);
      for (std::size_t b = 0; b < buckets_.size(); ++b) {
        powersgd_.push_back(
            powersgd_size(members[b], buckets_[b].end - buckets_[b].begin, compress_.rank));
      }
    }
  }

  // --double-buffer (Note [double buffering] in ddp/reducer.cpp): the previous step's
  // gradients go out as the step begins (in the steady state every step has some), in
  // the overlapped scenario; the sequential one posts them before the optimizer.
  void begin_step(ProgramBuilder& p) override {
    if (!double_buffer_ || sequential_) return;
    for (int b = schedule_.take_next(); b >= 0; b = schedule_.take_next()) post(p, b);
  }
  void after_backward(ProgramBuilder& p, int unit, bool last_micro) override {
    if (!last_micro || (unit == 0 && hold_embedding_) || double_buffer_) return;
    schedule_.mark_unit_ready(unit);
    if (!overlap_) return;
    for (int b = schedule_.take_ready(); b >= 0; b = schedule_.take_ready()) post(p, b);
  }
  void before_optimizer(ProgramBuilder& p) override {
    if (hold_embedding_) schedule_.mark_unit_ready(0);
    for (int b = schedule_.take_next(); b >= 0; b = schedule_.take_next()) post(p, b);
    // PowerSGD's second round (Reducer::launch_second_round): each P waited for in plan
    // order, its Q computed and all-reduced.
    for (std::size_t b = 0; b < powersgd_.size(); ++b) {
      if (issued_[b] < 0 || powersgd_[b].q_numel == 0) continue;
      p.wait(issued_[b], static_cast<int>(b));
      compress(p, b, 1.0 / 3);
      issued_[b] = p.post(SpanKind::kAllreduce,
                          static_cast<std::int64_t>(powersgd_[b].q_numel * sizeof(float)),
                          static_cast<int>(b));
    }
    if (overlap_optimizer_) return;  // each bucket waited for before its own update
    for (std::size_t b = 0; b < issued_.size(); ++b) wait(p, b);
  }
  // --overlap-optimizer (Note [optimizer overlap] in ddp/reducer.cpp): each bucket's update
  // after its own wait, in plan order (the simulator does not find buckets done during
  // backward: it updates every one after backward, which the real reducer does for those
  // still in flight).
  void optimizer(ProgramBuilder& p, const UnitCosts& costs, double work) override {
    if (!overlap_optimizer_ || costs.optimizer_numel <= 0) {
      SimSync::optimizer(p, costs, work);
      return;
    }
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      wait(p, b);
      const double share = static_cast<double>(buckets_[b].end - buckets_[b].begin) /
                           static_cast<double>(costs.optimizer_numel);
      p.compute(SpanKind::kOptimizer, static_cast<int>(b), -1, work * costs.optimizer * share, 0);
    }
  }
  // Comm-only runs no update: what it did not wait for is waited for here.
  void end_step(ProgramBuilder& p) override {
    for (std::size_t b = 0; b < issued_.size(); ++b) wait(p, b);
  }
  // A pipeline stage (StageSync) updates the units it keeps only: the same bytes per element
  // as the whole model's update.
  double optimizer_seconds(const UnitCosts& costs) const override {
    if (kept_numel_ == 0 || costs.optimizer_numel <= 0) return costs.optimizer;
    return costs.optimizer * static_cast<double>(kept_numel_) / costs.optimizer_numel;
  }

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  // Waits for bucket b's all-reduce if it is in flight (Reducer::wait_for), then widens it
  // or computes PowerSGD's approximation.
  void wait(ProgramBuilder& p, std::size_t b) {
    if (issued_[b] < 0) return;
    p.wait(issued_[b], static_cast<int>(b));
    issued_[b] = -1;
    compress(p, b, 1.0 / 3);
  }
  void post(ProgramBuilder& p, int b) {
    const Bucket& bucket = buckets_[static_cast<std::size_t>(b)];
    if (bucket.end <= bucket.begin) return;
    const auto i = static_cast<std::size_t>(b);
    if (!comm_) {
      // Compute-only: the compression's whole compute, no collective (Reducer::launch).
      for (int phase = 0; phase < (compress_.casts() ? 2 : 3); ++phase) compress(p, i, 1.0 / 3);
      return;
    }
    std::int64_t bytes = bucket.bytes();
    if (compress_.casts()) {
      bytes /= 2;
    } else if (!powersgd_.empty()) {
      bytes = static_cast<std::int64_t>(powersgd_[i].p_numel * sizeof(float));
    }
    compress(p, i, 1.0 / 3);
    issued_[i] = p.post(SpanKind::kAllreduce, bytes, b);
  }
  // The compute of --compress around bucket b's collectives (Note [compression] in
  // ddp/reducer.cpp), priced by the device's rates: a cast streams 4 + 2 bytes per element;
  // PowerSGD's three phases each take `share` of its products and elementwise bytes.
  void compress(ProgramBuilder& p, std::size_t b, double share) {
    if (!compute_ || !compress_.enabled()) return;
    const Bucket& bucket = buckets_[b];
    double seconds = 0, flops = 0;
    if (compress_.casts()) {
      seconds = cast_seconds(static_cast<double>(bucket.end - bucket.begin), costs_.rates.byte_s);
    } else {
      flops = share * powersgd_[b].flops;
      seconds = flops * costs_.rates.flop_s + share * powersgd_[b].bytes * costs_.rates.byte_s;
    }
    p.compute(SpanKind::kOther, static_cast<int>(b), -1, seconds, flops,
              op_name(ModelOp::kCompress));
  }

  std::vector<GradParam> params_;
  std::size_t kept_numel_;  // a pipeline stage's (0: the whole model's)
  std::vector<Bucket> buckets_;
  LaunchSchedule schedule_;
  bool comm_;
  bool overlap_;
  bool hold_embedding_;
  bool overlap_optimizer_;
  bool double_buffer_;
  bool sequential_;
  std::vector<int> issued_;  // per bucket: its transfer in the step, -1 before
  Compression compress_;
  bool compute_;
  const UnitCosts& costs_;
  std::vector<PowerSgdSize> powersgd_;  // --compress powersgd:R, per bucket
};

// zero1, zero2 and fsdp, as ShardedSync runs them (ddp/sharded.cpp): the same
// ShardSchedule decides fsdp's gathers, waits and releases; every unit's gradient is
// reduce-scattered after its last backward; zero1/zero2 gather the updated blocks after
// the optimizer, and the step's end waits for what is still in flight.
class SimSharded final : public SimSync {
 public:
  SimSharded(const TrainConfig& config, const ModelLayout& layout, const UnitCosts& costs)
      : kind_(config.reducer.plan.strategy.kind),
        comm_(config.reducer.mode != CommMode::kOff),
        sequential_(config.reducer.mode == CommMode::kSequential),
        schedule_(reads_of(layout), micro_batches(config), sequential_ ? 0 : config.shard.prefetch,
                  config.shard.reshard_after_forward),
        overlap_optimizer_(config.reducer.overlap_optimizer &&
                           config.reducer.mode == CommMode::kOverlapped),
        ranks_(config.ranks),
        gather_(static_cast<std::size_t>(layout.units()), -1),
        reduce_(static_cast<std::size_t>(layout.units()), -1),
        casts_(config.reducer.compress.casts() && config.compute ? costs.rates.byte_s : 0),
        halves_(config.reducer.compress.casts()),
        touch_(costs.touch_seconds),
        give_back_(costs.give_back),
        touched_again_(touched_again(config)),
        backward_touched_(backward_touched_bytes(layout)),
        grads_touched_(static_cast<std::size_t>(layout.units()), false) {
    for (int u = 0; u < layout.units(); ++u) {
      const UnitInfo& info = layout.unit(u);
      bytes_.push_back(static_cast<std::int64_t>((info.padded_end - info.begin) * sizeof(float)));
      given_back_.push_back(given_back_bytes(layout, u));
      shard_numel_ += (info.padded_end - info.begin) / static_cast<std::size_t>(config.ranks);
    }
  }

  void before_forward(ProgramBuilder& p, int unit) override {
    (void)unit;
    if (fsdp()) gather_and_wait(p);
  }
  void after_forward(ProgramBuilder& p, int unit) override {
    (void)unit;
    if (fsdp()) release_after(p);
    ++event_;
  }
  void before_backward(ProgramBuilder& p, int unit) override {
    (void)unit;
    if (fsdp()) gather_and_wait(p);
  }
  void after_backward(ProgramBuilder& p, int unit, bool last_micro) override {
    if (fsdp()) release_after(p);
    ++event_;
    if (!last_micro) return;
    // --compress fp16|bf16 (Note [sharded compression] in ddp/sharded.cpp): the unit cast
    // to 16 bits (4 + 2 bytes per element streamed), reduce-scattered in 16 bits; the
    // compute-only scenario casts and widens without the collective.
    cast(p, unit, static_cast<double>(bytes(unit)) / sizeof(float));
    if (!comm_) {
      cast(p, unit, static_cast<double>(bytes(unit)) / sizeof(float) / ranks_);
      return;
    }
    reduce_[static_cast<std::size_t>(unit)] =
        p.post(SpanKind::kReduceScatter, halves_ ? bytes(unit) / 2 : bytes(unit), unit);
    if (sequential_) settle(p);
  }
  // zero2 and fsdp give a unit's gradient back once its reduce-scatter is settled
  // (ShardedSync::settled): the step's first backward that writes it touches it again.
  double backward_touch(int unit) override {
    const auto u = static_cast<std::size_t>(unit);
    if (!touched_again_.grads || grads_touched_[u]) return 0;
    grads_touched_[u] = true;  // the step's first micro-batch
    return touch_ * static_cast<double>(backward_touched_[u]);
  }
  void before_optimizer(ProgramBuilder& p) override {
    if (!overlap_optimizer_) settle(p);  // else each unit before its own update
  }
  // --overlap-optimizer (Note [sharded optimizer overlap] in ddp/sharded.cpp): each unit's
  // shard updated after its own reduce-scatter, in unit order.
  void optimizer(ProgramBuilder& p, const UnitCosts& costs, double work) override {
    if (!overlap_optimizer_ || costs.optimizer_numel <= 0) {
      SimSync::optimizer(p, costs, work);
      return;
    }
    for (std::size_t u = 0; u < reduce_.size(); ++u) {
      settle(p, u);
      const double shard = static_cast<double>(bytes_[u]) / sizeof(float) / ranks_;
      p.compute(SpanKind::kOptimizer, static_cast<int>(u), -1,
                work * costs.optimizer * shard / static_cast<double>(costs.optimizer_numel), 0);
    }
  }
  double optimizer_seconds(const UnitCosts& costs) const override {
    // SGD on the rank's shards (in the compute-only scenario too: ShardedSync runs the
    // overlapped scenario's optimizer work there): the same bytes per element as on a
    // replica.
    if (costs.optimizer_numel <= 0) return costs.optimizer;  // measured: a shard's already
    return costs.optimizer * static_cast<double>(shard_numel_) /
           static_cast<double>(costs.optimizer_numel);
  }
  void after_optimizer(ProgramBuilder& p) override {
    if (!comm_ || fsdp()) return;
    for (int u = 0; u < static_cast<int>(bytes_.size()); ++u) {
      gather_[static_cast<std::size_t>(u)] = p.post(SpanKind::kAllgather, bytes(u), u);
    }
  }
  void end_step(ProgramBuilder& p) override {
    for (std::size_t u = 0; u < bytes_.size(); ++u) {
      for (int* t : {&gather_[u], &reduce_[u]}) {
        if (*t < 0) continue;
        p.wait(*t, static_cast<int>(u));
        *t = -1;
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

  // fsdp: every gather writes into a unit given back at its release (or, the first, by
  // ShardedSync's constructor), so it touches that memory again.
  void gather_and_wait(ProgramBuilder& p) {
    for (const int v : schedule_.gathers_before(event_)) {
      gather_[static_cast<std::size_t>(v)] =
          p.post(SpanKind::kAllgather, bytes(v), v,
                 touch_ * static_cast<double>(given_back_[static_cast<std::size_t>(v)]));
      note_gathered();
    }
    for (const int v : schedule_.waits_before(event_)) {
      p.wait(gather_[static_cast<std::size_t>(v)], v);
      gather_[static_cast<std::size_t>(v)] = -1;
    }
  }
  // fsdp: the units released after this event give their parameters back.
  void release_after(ProgramBuilder& p) {
    for (const int v : schedule_.releases_after(event_)) give_back(p, v);
  }
  // A unit's memory given back, on the rank's own thread (Note [giving back, timed] in
  // ddp/sharded.cpp): an idle-lane span, as the engine records it.
  void give_back(ProgramBuilder& p, int u) {
    if (give_back_ > 0) {
      p.compute(SpanKind::kMemory, u, -1, give_back_, 0, op_name(ModelOp::kGiveBack));
    }
  }
  // Waits for every reduce-scatter in flight, in unit order (settle_reduces(true)).
  void settle(ProgramBuilder& p) {
    for (std::size_t u = 0; u < reduce_.size(); ++u) settle(p, u);
  }
  // Waits for unit u's reduce-scatter if it is in flight, then widens the rank's block.
  void settle(ProgramBuilder& p, std::size_t u) {
    if (reduce_[u] < 0) return;
    p.wait(reduce_[u], static_cast<int>(u));
    reduce_[u] = -1;
    cast(p, static_cast<int>(u),
         static_cast<double>(bytes(static_cast<int>(u))) / sizeof(float) / ranks_);
    if (touched_again_.grads) give_back(p, static_cast<int>(u));  // ShardedSync::settled
  }
  void cast(ProgramBuilder& p, int u, double elements) {
    if (casts_ > 0) {
      p.compute(SpanKind::kOther, u, -1, cast_seconds(elements, casts_), 0,
                op_name(ModelOp::kCompress));
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
  bool overlap_optimizer_;
  int ranks_;
  std::vector<std::int64_t> bytes_;  // per unit, padded
  std::size_t shard_numel_ = 0;
  std::vector<int> gather_;  // per unit: its all-gather in flight, -1 if none
  std::vector<int> reduce_;  // per unit: its reduce-scatter in flight, -1 if none
  double casts_;             // --compress fp16|bf16 with compute: seconds per byte streamed; else 0
  bool halves_;              // --compress fp16|bf16: the reduce-scatters move 16-bit values
  double touch_;             // seconds per byte given back and touched again
  double give_back_;         // seconds per unit's memory given back
  TouchedAgain touched_again_;
  std::vector<std::int64_t> backward_touched_;  // per unit: backward_touched_bytes
  std::vector<std::int64_t> given_back_;        // per unit: given_back_bytes
  std::vector<bool> grads_touched_;             // per unit: its backward has run this step
  int event_ = 0;
  std::int64_t gathered_peak_ = 0;
};

// The rank loop of one stage (engine/trainer.cpp's run_step, engine/pipeline.cpp's
// StageRunner): the actions of the stage's schedule (one stage: each micro-batch's forward,
// loss and backward), the strategy's hooks around each unit's pass, point-to-point
// transfers to the neighbouring stages, then the update.
struct StageContext {
  const TrainConfig* config = nullptr;
  const UnitCosts* costs = nullptr;
  const StagePlan* plan = nullptr;
  int stage = 0;
  std::vector<double> boundary_bytes;  // per unit u >= 1: the activation entering it
  // The transfer of an activation (g -> g+1) or a gradient (g+1 -> g) of a micro-batch,
  // made once by whichever side posts it first.
  std::function<int(bool activation, int chunk, int micro, std::int64_t bytes)> p2p;
  std::function<int(std::int64_t bytes)> tied_allreduce;  // gpt's embedding group
};

// A tensor-parallel unit's pass (Note [tensor-parallel passes]), as the split model runs
// it: its compute, each collective of the group posted and waited for in place, and each
// ring (TensorOn's ring_gather and ring_reduce_scatter) as T steps: a gather posts step k,
// computes the block it holds and waits for the step; a reduce-scatter computes block k's
// partial sum, waits for the sum arriving from the step before and posts it on. The comm-
// only scenario runs no passes, so none of this (the engine's tensor collectives are the
// passes').
void pass_pieces(ProgramBuilder& p, const std::vector<PassPiece>& pieces, SpanKind kind, int unit,
                 int micro) {
  for (const PassPiece& piece : pieces) {
    switch (piece.kind) {
      case PassPiece::Kind::kCompute:
        p.compute(kind, unit, micro, piece.seconds, piece.flops, piece.name);
        break;
      case PassPiece::Kind::kCollective: {
        const int t = p.tensor(piece.collective, piece.bytes, unit);
        p.post_transfer(t, unit);
        p.wait(t, unit);
        break;
      }
      case PassPiece::Kind::kRingGather:
      case PassPiece::Kind::kRingReduceScatter: {
        const bool gather = piece.kind == PassPiece::Kind::kRingGather;
        const int steps = p.tensor_ranks;
        int previous = -1;
        for (int k = 0; k < steps; ++k) {
          const int t = k + 1 < steps ? p.tensor(SpanKind::kSend, piece.bytes, unit) : -1;
          if (gather && t >= 0) p.post_transfer(t, unit);
          p.compute(kind, unit, micro, piece.seconds / steps, piece.flops / steps, piece.name);
          if (gather && t >= 0) p.wait(t, unit);
          if (!gather) {
            if (previous >= 0) p.wait(previous, unit);
            if (t >= 0) p.post_transfer(t, unit);
            previous = t;
          }
        }
        break;
      }
    }
  }
}

void stage_program(const StageContext& ctx, SimSync& sync, ProgramBuilder& p) {
  const TrainConfig& config = *ctx.config;
  const UnitCosts& costs = *ctx.costs;
  const StagePlan& plan = *ctx.plan;
  const int U = static_cast<int>(costs.forward.size());
  const int M = plan.shape.micro_batches;
  const CommMode mode = config.reducer.mode;
  const double work = config.compute ? 1.0 : 0.0;  // comm-only: the same transfers
  const std::vector<PipelineAction> actions = stage_actions(plan.shape, ctx.stage);
  const auto n = actions.size();
  // The receive of action i (-1: none): a forward whose first unit is not 0, a backward
  // whose last unit is not the model's.
  std::vector<int> receive(n, -1);
  std::vector<bool> posted(n, false);
  const auto bytes_into = [&](int unit) {
    return static_cast<std::int64_t>(ctx.boundary_bytes[static_cast<std::size_t>(unit)]);
  };
  for (std::size_t i = 0; i < n && mode != CommMode::kOff; ++i) {
    const PipelineAction& a = actions[i];
    const int g = global_chunk(plan.shape, ctx.stage, a.chunk);
    const auto [first, last] = plan.chunks[static_cast<std::size_t>(g)];
    if (a.kind == PipelineAction::kForward && first > 0) {
      receive[i] = ctx.p2p(true, g - 1, a.micro, bytes_into(first));
    } else if (a.kind == PipelineAction::kBackward && last < U - 1) {
      receive[i] = ctx.p2p(false, g, a.micro, bytes_into(last + 1));
    }
  }
  const auto post_receive = [&](std::size_t i) {
    if (i >= n || receive[i] < 0 || posted[i]) return;
    posted[i] = true;
    p.post_transfer(receive[i], actions[i].micro);
  };
  sync.begin_step(p);
  std::vector<std::pair<int, int>> sends;  // transfer, micro: waited for at the step's end
  for (std::size_t i = 0; i < n; ++i) {
    if (mode == CommMode::kOverlapped) {
      post_receive(i);
      post_receive(i + 1);
    }
    const PipelineAction& a = actions[i];
    const int g = global_chunk(plan.shape, ctx.stage, a.chunk);
    const auto [first, last] = plan.chunks[static_cast<std::size_t>(g)];
    if (a.kind == PipelineAction::kForward) {
      if (receive[i] >= 0) {
        post_receive(i);
        p.wait(receive[i], a.micro);
      }
      for (int u = first; u <= last; ++u) {
        const auto k = static_cast<std::size_t>(u);
        sync.before_forward(p, u);
        if (k < costs.forward_pieces.size() && config.compute) {
          pass_pieces(p, costs.forward_pieces[k], SpanKind::kForward, u, a.micro);
        } else {
          p.compute(SpanKind::kForward, u, a.micro, work * costs.forward[k],
                    costs.forward_flops[k]);
        }
        sync.after_forward(p, u);
      }
      if (last == U - 1 && !costs.loss_pieces.empty() && config.compute) {
        pass_pieces(p, costs.loss_pieces, SpanKind::kForward, U, a.micro);
      } else if (last == U - 1) {
        p.compute(SpanKind::kForward, U, a.micro, work * costs.loss_forward, 0);
      } else if (mode != CommMode::kOff) {
        const int t = ctx.p2p(true, g, a.micro, bytes_into(last + 1));
        p.post_transfer(t, a.micro);
        sends.emplace_back(t, a.micro);
      }
    } else {
      if (last == U - 1) {
        p.compute(SpanKind::kBackward, U, a.micro, work * costs.loss_backward, 0);
      } else if (receive[i] >= 0) {
        post_receive(i);
        p.wait(receive[i], a.micro);
      }
      for (int u = last; u >= first; --u) {
        const auto k = static_cast<std::size_t>(u);
        sync.before_backward(p, u);
        const double touch = config.compute ? sync.backward_touch(u) : 0;
        if (k < costs.backward_pieces.size() && config.compute) {
          if (touch > 0) {  // on the pass's first compute piece
            std::vector<PassPiece> pieces = costs.backward_pieces[k];
            const auto product = std::find_if(pieces.begin(), pieces.end(), [](const PassPiece& x) {
              return x.kind == PassPiece::Kind::kCompute;
            });
            if (product != pieces.end()) product->seconds += touch;
            pass_pieces(p, pieces, SpanKind::kBackward, u, a.micro);
          } else {
            pass_pieces(p, costs.backward_pieces[k], SpanKind::kBackward, u, a.micro);
          }
        } else {
          p.compute(SpanKind::kBackward, u, a.micro, work * costs.backward[k] + touch,
                    costs.backward_flops[k]);
        }
        sync.after_backward(p, u, a.micro == M - 1);
      }
      if (first > 0 && mode != CommMode::kOff) {
        const int t = ctx.p2p(false, g - 1, a.micro, bytes_into(first));
        p.post_transfer(t, a.micro);
        sends.emplace_back(t, a.micro);
      }
    }
  }
  // gpt's tied embedding on two stages: the two halves of its gradient summed.
  if (ctx.tied_allreduce && mode != CommMode::kOff) {
    const int t = ctx.tied_allreduce(static_cast<std::int64_t>(ctx.boundary_bytes[0]));
    if (t >= 0) {
      p.post_transfer(t, -1);
      p.wait(t, -1);
    }
  }
  sync.before_optimizer(p);
  sync.optimizer(p, costs, work);
  sync.after_optimizer(p);
  for (const auto& [t, micro] : sends) p.wait(t, micro);
  sync.end_step(p);
}

// Ranks that behave alike are simulated once: an actor.
struct Actor {
  double slowdown = 1;     // straggler factor on compute
  double idle_scale = 1;   // and on its idle gaps (Straggler::idle)
  int stage = 0;
  int replica_class = 0;   // pipelines: whose stages it talks to (actor_of's row)
  std::vector<int> ranks;  // the ranks it stands for
  std::size_t pc = 0;
  int step = 0;
  bool finished = false;
  bool computing = false;
  bool idling = false;   // the current op is kIdle: time passes, nothing computes
  double remaining = 0;  // of the current compute or idle op, in seconds at full rate
  double op_start = 0;
  bool waiting = false;
  double wait_start = 0;
  double step_start = -1;
  int held_by = -1;   // the transfer it set moving that holds its core (Note [the last
                      // issuer's core]); -1: none
  int in_flight = 0;  // transfers it takes part in that are moving
  int in_flight_sharded = 0;  // of them, reduce-scatters and all-gathers (sharded_collective)
  int sending = 0;    // of them, those that send from it (a collective both sends and
  int receiving = 0;  // receives), and those that receive into it
  std::vector<Span> spans;
  std::vector<std::pair<double, double>> steps;  // start, end per step
};

// One transfer of one step, as it runs.
struct Instance {
  double remaining = 0;  // seconds at full rate
  int posted = 0;        // participants that posted it
  int holder = -1;       // the actor whose core it holds (Actor::held_by); -1: none
  std::vector<double> posted_at;
  bool done = false;
  double start = 0;
  double ready = -1;  // when it could start (Transfer::start_delay before it does); -1: not yet
  double end = 0;     // when it ended (done)
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

// Seconds of a collective over `ranks` (any subset of the cluster's ranks, placed node by
// node): hierarchical over the most members any node holds and the nodes they span.
double group_seconds(const Cluster& cluster, SpanKind kind, const std::vector<int>& ranks,
                     double bytes) {
  std::map<int, int> per_node;
  for (const int r : ranks) ++per_node[r / cluster.devices_per_node];
  int most = 0;
  std::vector<int> nodes;
  for (const auto& [node, count] : per_node) {
    most = std::max(most, count);
    nodes.push_back(node);
  }
  return hierarchical_seconds(
      cluster, kind, most, static_cast<int>(nodes.size()),
      [&](int i) { return nodes[static_cast<std::size_t>(i)]; }, bytes);
}

// A point-to-point transfer between two ranks: over the node's link, or its share of
// the node's NICs.
double p2p_seconds(const Cluster& cluster, int from, int to, double bytes) {
  const int a = from / cluster.devices_per_node, b = to / cluster.devices_per_node;
  if (a == b) {
    return bytes / (cluster.intra.bandwidth_bytes_per_s * cluster.intra_factor(a)) +
           cluster.intra.latency_s;
  }
  const double share = std::min(cluster.network_factor(a), cluster.network_factor(b)) *
                       cluster.inter.bandwidth_bytes_per_s * cluster.nics_per_node /
                       std::max(1, cluster.devices_per_node);
  return bytes / share + cluster.inter.latency_s;
}

// Each unit's forward and backward pass of one micro-batch, the loss's with the last unit
// (the last stage's).
std::vector<double> unit_seconds(const UnitCosts& costs) {
  std::vector<double> seconds;
  for (std::size_t u = 0; u < costs.forward.size(); ++u) {
    seconds.push_back(costs.forward[u] + costs.backward[u]);
  }
  TANDEM_CHECK(!seconds.empty());
  seconds.back() += costs.loss_forward + costs.loss_backward;
  return seconds;
}

}  // namespace

std::vector<int> predicted_split(const TrainConfig& config, const SimulateOptions& options) {
  const UnitCosts costs =
      options.costs != nullptr ? *options.costs : unit_costs(config, options.cluster);
  return balance_units(unit_seconds(costs), static_cast<int>(stage_plan(config).chunks.size()));
}

TrainResult simulate_training(const TrainConfig& given, const SimulateOptions& options) {
  TrainConfig config = given;
  if (config.pipeline.split_auto && config.pipeline.split.empty()) {
    config.pipeline.split = predicted_split(config, options);
  }
  const Cluster& cluster = options.cluster;
  const Strategy& strategy = config.reducer.plan.strategy;
  if (config.ranks > cluster.devices()) {
    throw UsageError("--ranks " + std::to_string(config.ranks) + ": the cluster " + cluster.name +
                     " has " + std::to_string(cluster.devices()) + " devices");
  }
  if (cluster.device.peak(config.precision) <= 0) {
    throw UsageError("--precision " + std::string(to_string(config.precision)) + ": " +
                     cluster.device.name + " has no " + std::string(to_string(config.precision)) +
                     " GEMMs");
  }
  // Each rank's pace: (compute, idle) factors.
  std::vector<std::pair<double, double>> factor(static_cast<std::size_t>(config.ranks), {1, 1});
  for (const Straggler& s : options.stragglers) {
    if (s.rank >= config.ranks) {
      throw UsageError("--straggler rank=" + std::to_string(s.rank) + ": the run has " +
                       std::to_string(config.ranks) + " ranks");
    }
    factor[static_cast<std::size_t>(s.rank)] = {s.compute, s.idle};
  }
  // Note [ranks apart]
  // Ranks that run the same work do not take the same time over it: on the 2-core VM a
  // rank's compute in a step stood 8-9% from the two ranks' mean (a standard deviation,
  // pooled over two runs of scripts/validate-simulate; 0.4-16% run by run), and a step
  // that synchronizes its ranks ends with the slowest. Measured steps are the slowest
  // rank's (E2E, docs/METRICS.md) while the fitted passes are every rank's mean: the
  // slower rank's compute in a step averaged 0.2-9.8% over the mean in those runs, which
  // a model of alike ranks leaves out; at scale the slowest of N drifts further out (the
  // expected largest of N standard normals, expected_slowest: 0.56 for 2, 3.25 for 1,024,
  // 3.97 for 16,384). So with a device's compute_jitter sigma the last rank computes at
  // the expected slowest pace, 1 + sigma e(N), and every other at the pace that keeps the
  // ranks' mean, 1 - sigma e(N) / (N - 1): for two ranks exactly the expected slower and
  // faster of the two. One rank slow for a whole step is the plain reading; a step
  // synchronized at every unit (fsdp) waits for each unit's slowest, which it prices low.
  // The paces are set below, once the passes are priced.
  const bool sharded = strategy.sharded();
  const bool comm = config.reducer.mode != CommMode::kOff;
  // --tensor T (Note [rank order] in engine/tensor_parallel.h): world rank = outer x T +
  // tensor rank. The job is, for each tensor-parallel position, the P x D job over the
  // outer ranks, whose plans below are the engine's over `outer` ranks; a tensor group's T
  // ranks behave alike (each waits for the others at every collective of the passes), so
  // one actor stands for them all, at its slowest member's pace.
  const int tp = std::max(1, config.model.tensor);
  const int outer = outer_ranks(config);
  TrainConfig per_position = config;  // what the strategies see: the outer ranks
  per_position.ranks = outer;
  const auto world_rank = [tp](int outer_rank) { return outer_rank * tp; };
  const auto group_factor = [&](int outer_rank) {
    // The slowest member's (a rank faster than the typical one keeps its pace: a replay's).
    auto f = factor[static_cast<std::size_t>(outer_rank * tp)];
    for (int t = 1; t < tp; ++t) {
      const auto& [compute, idle] = factor[static_cast<std::size_t>(outer_rank * tp + t)];
      f = {std::max(f.first, compute), std::max(f.second, idle)};
    }
    return f;
  };
  const auto add_group = [tp](Actor& a, int outer_rank) {
    for (int t = 0; t < tp; ++t) a.ranks.push_back(outer_rank * tp + t);
  };
  const StagePlan plan = stage_plan(config);
  const int P = plan.shape.stages;
  const bool pipeline = P > 1;
  // The layout the trainer gives the strategy (engine/trainer.cpp): a sharded one pads
  // every unit to a multiple of the ranks, which the collectives move.
  const ModelLayout layout(config.model, sharded ? sharded_layout(outer) : LayoutOptions{});
  const UnitCosts costs = options.costs != nullptr ? *options.costs : unit_costs(config, cluster);
  // A pipeline's stages run different work: the N ranks alike are one stage's (its
  // replicas and their tensor-parallel members, as --calibrate measures them), and the
  // slowest of each stage is its last replica's last rank. A pipeline of one replica has
  // none alike: its stages keep the model's paces (the last rank had been taken for the
  // slowest, which made the lighter last stage of a 2-stage mlp the slower one).
  // sigma: sqrt(compute_jitter^2 + (compute_jitter_s / T)^2) for a rank's compute in a
  // step T as the model prices it (a pipeline's shared among its stages): a part of every
  // step's and a part in proportion to it (Note [ranks apart, fitted] in calibration.cpp).
  std::pair<double, double> typical{1, 1};  // the pace of a rank the jitter does not single out
  const int alike = config.ranks / P;  // a stage's ranks (rank order: Note [rank order])
  if (const DeviceProfile& d = cluster.device;
      (d.compute_jitter > 0 || d.compute_jitter_s > 0) && alike > 1) {
    const std::vector<double> units = unit_seconds(costs);
    const double step = (micro_batches(config) * std::accumulate(units.begin(), units.end(), 0.0) +
                         costs.optimizer) /
                        P;
    const double relative = step > 0 ? d.compute_jitter_s / step : 0;
    const double spread = std::sqrt(d.compute_jitter * d.compute_jitter + relative * relative) *
                          expected_slowest(alike);
    typical.first = std::max(0.01, 1 - spread / (alike - 1));
    for (int r = 0; r < config.ranks; ++r) {
      // The last replica's ranks are outer ranks (D - 1) P .. D P - 1, each the last of
      // its stage's; the last tensor member of each stands for its group.
      const bool slowest = r / tp >= (alike / tp - 1) * P && r % tp == tp - 1;
      factor[static_cast<std::size_t>(r)].first *= slowest ? 1 + spread : typical.first;
    }
  }
  TANDEM_CHECK_EQ(costs.forward.size(), static_cast<std::size_t>(layout.units()));
  // Every lookup prices the transfer about to be added to the step's plan.
  StepPlan step_plan;
  std::set<std::size_t> measured_transfers;
  std::map<std::size_t, std::pair<double, double>> late;  // start delay, wake-up
  // `late_too`: its start delay and wake-up asked as well (a ring step's time holds both).
  const auto measured_or = [&](SpanKind kind, int tag, std::int64_t bytes, double model,
                               bool late_too = true) {
    const double m =
        options.collective_seconds ? options.collective_seconds(kind, tag, bytes) : -1.0;
    if (m >= 0) measured_transfers.insert(step_plan.transfers.size());
    if (late_too && (options.collective_delay || options.collective_wake_up)) {
      late[step_plan.transfers.size()] = {
          options.collective_delay ? options.collective_delay(kind, tag, bytes) : 0.0,
          options.collective_wake_up ? options.collective_wake_up(kind, tag, bytes) : 0.0};
    }
    return m >= 0 ? m : model;
  };
  // A --tp-overlap ring's steps are point-to-point transfers: measured as a pipeline's are.
  const auto measured_tensor = [&](SpanKind kind, int tag, std::int64_t bytes, double model) {
    if (kind == SpanKind::kSend) return measured_or(kind, tag, bytes, model, /*late_too=*/false);
    const double m = options.tensor_seconds ? options.tensor_seconds(kind, tag, bytes) : -1.0;
    if (m >= 0) measured_transfers.insert(step_plan.transfers.size());
    return m >= 0 ? m : model;
  };
  const int U = layout.units();
  const int rows = micro_batch_rows(config);

  // Actors: ranks alike in stage and speed. A pipeline's replica holding a straggler is
  // simulated on its own (its stages talk to each other, not to the others').
  std::vector<Actor> actors;
  std::vector<std::vector<int>> actor_of;  // [replica class][stage]
  std::vector<int> class_replica;          // a replica of each class (its ranks' placement)
  if (!pipeline) {
    for (int r = 0; r < outer; ++r) {
      const auto [compute, idle] = group_factor(r);
      auto it = std::find_if(actors.begin(), actors.end(), [&](const Actor& a) {
        return a.slowdown == compute && a.idle_scale == idle;
      });
      if (it == actors.end()) {
        actors.push_back(Actor{.slowdown = compute, .idle_scale = idle});
        it = actors.end() - 1;
      }
      add_group(*it, r);
    }
  } else {
    std::vector<int> normal, special;
    for (int replica = 0; replica < plan.replicas; ++replica) {
      bool slow = false;
      for (int s = 0; s < P; ++s) slow = slow || group_factor(plan.rank_of(s, replica)) != typical;
      (slow ? special : normal).push_back(replica);
    }
    std::vector<std::vector<int>> classes;
    if (!normal.empty()) classes.push_back(normal);
    for (const int replica : special) classes.push_back({replica});
    for (const auto& members : classes) {
      actor_of.emplace_back();
      class_replica.push_back(members.front());
      for (int s = 0; s < P; ++s) {
        const auto [compute, idle] = group_factor(plan.rank_of(s, members.front()));
        Actor a{.slowdown = compute,
                .idle_scale = idle,
                .stage = s,
                .replica_class = static_cast<int>(actor_of.size()) - 1};
        for (const int replica : members) add_group(a, plan.rank_of(s, replica));
        actor_of.back().push_back(static_cast<int>(actors.size()));
        actors.push_back(std::move(a));
      }
    }
  }
  const auto n_actors = static_cast<int>(actors.size());

  // The step plan: every actor's program over shared transfers.
  step_plan.programs.resize(static_cast<std::size_t>(n_actors));
  std::vector<int> everyone(static_cast<std::size_t>(n_actors));
  std::iota(everyone.begin(), everyone.end(), 0);
  std::map<std::tuple<int, int>, int> stage_collective;      // (stage, k-th) -> transfer
  std::map<std::tuple<int, bool, int, int>, int> transfers;  // (class, activation, chunk, micro)
  std::map<int, int> tied;                                   // class -> transfer
  std::map<int, std::vector<int>> stage_ranks;               // stage -> every rank of it
  // What enters unit u: a transformer's residual stream (with --sequence-parallel the
  // rank's tokens of it, which is what its stage sends), an mlp layer's input.
  std::vector<double> boundary_bytes(static_cast<std::size_t>(U), 0);
  for (int u = 1; u < U; ++u) {
    const TransformerShape& s = config.model.transformer;
    boundary_bytes[static_cast<std::size_t>(u)] =
        config.model.is_transformer()
            ? 4.0 *
                  static_cast<double>(
                      TensorShard::of(config.model).local(static_cast<std::size_t>(rows) * s.seq)) *
                  s.dim
            : 4.0 * rows * layout.layer(u).in;
  }
  const auto embedding_bytes =
      static_cast<std::int64_t>((layout.unit_end(0) - layout.unit_begin(0)) * sizeof(float));

  // The ranks of tensor-parallel position 0's communicator, where the strategies' collectives
  // run (every position's alike), and a tensor group's collectives and ring steps, priced
  // on the ranks of the group an actor stands for first (Note [tensor-parallel passes]).
  std::vector<int> position_ranks;
  if (tp > 1) {
    for (int r = 0; r < outer; ++r) position_ranks.push_back(world_rank(r));
  }
  const auto tensor_seconds = [&](const Actor& actor, SpanKind kind, double bytes) {
    const int first = actor.ranks.front();
    if (kind != SpanKind::kSend) {
      // Waited for in place: the hand-off around the transfer too (LinkProfile).
      std::vector<int> group(static_cast<std::size_t>(tp));
      std::iota(group.begin(), group.end(), first);
      return group_seconds(cluster, kind, group, bytes) + cluster.intra.overhead_s;
    }
    double slowest = 0;  // a ring step is as fast as its slowest link
    for (int t = 0; t < tp; ++t) {
      slowest = std::max(slowest, p2p_seconds(cluster, first + t, first + (t + 1) % tp, bytes));
    }
    return slowest;
  };

  // The first actor's sharded strategy, for memory: its schedule ran the whole step.
  std::unique_ptr<SimSharded> shards;
  std::vector<std::vector<Bucket>> stage_buckets(static_cast<std::size_t>(P));
  for (int a = 0; a < n_actors; ++a) {
    const Actor& actor = actors[static_cast<std::size_t>(a)];
    const int cls = actor.replica_class;
    ProgramBuilder builder{.ops = &step_plan.programs[static_cast<std::size_t>(a)],
                           .idle_before = &options.idle_before,
                           .tensor_ranks = tp};
    builder.tensor = [&, a](SpanKind kind, std::int64_t bytes, int tag) {
      const int id = static_cast<int>(step_plan.transfers.size());
      step_plan.transfers.push_back(
          {.kind = kind,
           .bytes = bytes,
           .tag = tag,
           .channel = 3,
           .actors = {a},
           .seconds = measured_tensor(kind, tag, bytes,
                                      tensor_seconds(actors[static_cast<std::size_t>(a)], kind,
                                                     static_cast<double>(bytes))),
           .ring = kind == SpanKind::kSend,
           .name = op_name(ModelOp::kTensor)});
      return id;
    };
    int posts = 0;
    if (!pipeline) {
      builder.collective = [&](SpanKind kind, std::int64_t bytes, int tag, double extra) {
        const int k = posts++;
        const auto [it, fresh] = stage_collective.try_emplace({0, k}, 0);
        if (fresh) {
          it->second = static_cast<int>(step_plan.transfers.size());
          step_plan.transfers.push_back(
              {.kind = kind,
               .bytes = bytes,
               .tag = tag,
               .actors = everyone,
               .seconds =
                   measured_or(kind, tag, bytes,
                               extra + (tp == 1 ? collective_seconds(cluster, kind, config.ranks,
                                                                     static_cast<double>(bytes))
                                                : group_seconds(cluster, kind, position_ranks,
                                                                static_cast<double>(bytes))))});
        }
        return it->second;
      };
    } else {
      const int stage = actor.stage;
      builder.collective = [&, stage](SpanKind kind, std::int64_t bytes, int tag, double extra) {
        const int k = posts++;
        const auto [it, fresh] = stage_collective.try_emplace({stage, k}, 0);
        if (fresh) {
          std::vector<int> who;
          for (const auto& row : actor_of) who.push_back(row[static_cast<std::size_t>(stage)]);
          auto& ranks = stage_ranks[stage];
          if (ranks.empty()) {
            for (int replica = 0; replica < plan.replicas; ++replica) {
              ranks.push_back(world_rank(plan.rank_of(stage, replica)));
            }
          }
          it->second = static_cast<int>(step_plan.transfers.size());
          step_plan.transfers.push_back(
              {.kind = kind,
               .bytes = bytes,
               .tag = tag,
               .channel = 1,
               .actors = who,
               .seconds = measured_or(
                   kind, tag, bytes,
                   extra + group_seconds(cluster, kind, ranks, static_cast<double>(bytes)))});
        }
        return it->second;
      };
    }
    std::unique_ptr<SimSharded> sharded_sync;
    std::unique_ptr<SimReducer> reducer;
    if (sharded) {
      sharded_sync = std::make_unique<SimSharded>(per_position, layout, costs);
    } else {
      const std::vector<bool> keep =
          pipeline ? stage_kept_units(layout, plan.owned_units(actor.stage, U))
                   : std::vector<bool>{};
      const bool hold_embedding = plan.tied_across_stages && plan.stage_of_chunk(0) == actor.stage;
      reducer = std::make_unique<SimReducer>(per_position, layout, keep, hold_embedding,
                                             !pipeline || plan.replicas > 1, costs);
      stage_buckets[static_cast<std::size_t>(actor.stage)] = reducer->buckets();
    }
    StageContext ctx{.config = &config,
                     .costs = &costs,
                     .plan = &plan,
                     .stage = actor.stage,
                     .boundary_bytes = boundary_bytes};
    ctx.p2p = [&, cls](bool activation, int chunk, int micro, std::int64_t bytes) {
      const auto [it, fresh] = transfers.try_emplace({cls, activation, chunk, micro}, 0);
      if (fresh) {
        const int from_stage = plan.stage_of_chunk(activation ? chunk : chunk + 1);
        const int to_stage = plan.stage_of_chunk(activation ? chunk + 1 : chunk);
        const auto& row = actor_of[static_cast<std::size_t>(cls)];
        const int replica = class_replica[static_cast<std::size_t>(cls)];
        it->second = static_cast<int>(step_plan.transfers.size());
        step_plan.transfers.push_back(
            {.kind = SpanKind::kSend,
             .bytes = bytes,
             .tag = micro,
             .actors = {row[static_cast<std::size_t>(from_stage)],
                        row[static_cast<std::size_t>(to_stage)]},
             .seconds =
                 measured_or(SpanKind::kSend, micro, bytes,
                             p2p_seconds(cluster, world_rank(plan.rank_of(from_stage, replica)),
                                         world_rank(plan.rank_of(to_stage, replica)),
                                         static_cast<double>(bytes)))});
      }
      return it->second;
    };
    if (pipeline && plan.tied_across_stages) {
      const int first = plan.stage_of_chunk(0);
      const int last = plan.stage_of_chunk(static_cast<int>(plan.chunks.size()) - 1);
      if (actor.stage == first || actor.stage == last) {
        ctx.tied_allreduce = [&, cls, first, last](std::int64_t) {
          const auto [it, fresh] = tied.try_emplace(cls, 0);
          if (fresh) {
            const auto& row = actor_of[static_cast<std::size_t>(cls)];
            const int replica = class_replica[static_cast<std::size_t>(cls)];
            it->second = static_cast<int>(step_plan.transfers.size());
            step_plan.transfers.push_back(
                {.kind = SpanKind::kAllreduce,
                 .bytes = embedding_bytes,
                 .tag = -1,
                 .channel = 2,
                 .actors = {row[static_cast<std::size_t>(first)],
                            row[static_cast<std::size_t>(last)]},
                 .seconds = measured_or(SpanKind::kAllreduce, -1, embedding_bytes,
                                        group_seconds(cluster, SpanKind::kAllreduce,
                                                      {world_rank(plan.rank_of(first, replica)),
                                                       world_rank(plan.rank_of(last, replica))},
                                                      static_cast<double>(embedding_bytes)))});
          }
          return it->second;
        };
      }
    }
    stage_program(ctx, sharded ? static_cast<SimSync&>(*sharded_sync) : *reducer, builder);
    if (sharded && !shards) shards = std::move(sharded_sync);
  }

  // The engine: every actor's lanes advance in virtual time.
  for (const std::size_t id : measured_transfers) step_plan.transfers[id].measured = true;
  for (const auto& [id, times] : late)
    std::tie(step_plan.transfers[id].start_delay, step_plan.transfers[id].wake_up) = times;
  const int T = static_cast<int>(step_plan.transfers.size());
  const int S = config.steps;
  std::vector<Instance> instances(static_cast<std::size_t>(T) * static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    for (int k = 0; k < T; ++k) {
      const Transfer& tr = step_plan.transfers[static_cast<std::size_t>(k)];
      Instance& i = instances[static_cast<std::size_t>(s * T + k)];
      i.remaining = tr.seconds;
      i.posted_at.assign(tr.actors.size(), 0);
    }
  }
  // Per actor and channel: the collectives it posted there, in order, and when its last one
  // there ended (Note [a rank's own start]).
  struct Channel {
    std::deque<int> queue;
    double free = 0;
  };
  std::vector<std::array<Channel, 4>> channels(static_cast<std::size_t>(n_actors));
  // Note [a rank's own start]: a measured collective's span on a rank runs from when that
  // rank's communication thread took it up (its issue, or the end of the collective before
  // it on the same communicator: comm/progress_communicator.cpp) to its end, so a rank that
  // arrived first holds the wait for the last in its span, beside whatever it computes
  // meanwhile; T_comm, the overlap and the hidden share count it, and analysis/waiting.h
  // splits it into skew and transfer. The transfer itself moves (and slows compute) only
  // once all have arrived. The simulator's spans start alike: at the member's post, or when
  // its channel's collective before it ended, and a replay's late take-up
  // (Transfer::start_delay) after that; never after the transfer started.
  // Note [the last issuer's core]: on the host a rank's communication thread shares the
  // core its training thread computes on, and the scheduler hands it the core when the
  // last member's issue lets a collective move: the rank that issued it last computes
  // again only once the transfer is done (a 2-rank bucketed mlp:4x1024 here: 26 of 28
  // such collectives), while a rank that had issued it earlier, and computes on, sees its
  // pass slowed (the contention fit). Timed from the traces over the calibration runs
  // (issuer_samples), the share of the transfer the last issuer sits out is the device's
  // issuer_held (0.69-0.74 on the 2-core EPYC: an fsdp unit's all-gather let it on
  // sooner); an actor that sets a collective moving holds its next operation, a pass, a
  // post or a wait, until that share of the transfer has gone by. A pass that began before
  // is not stopped (the pass in flight when a peer's issue set it moving is the contention
  // fit's). A replay fits none: its measured passes, gaps and late starts hold what the
  // core's sharing cost. Without it, the last issuer's next pass ran beside the transfer and the
  // hidden share came 10-20 points over the measured one for DDP and zero2
  // (docs/SIMULATE.md, "The last issuer's core").
  std::vector<int> pending, moving;
  const DeviceProfile& device = cluster.device;
  constexpr double kEps = 1e-15;
  const auto transfer_of = [&](int id) -> const Transfer& {
    return step_plan.transfers[static_cast<std::size_t>(id % T)];
  };
  const double issuer_held = std::clamp(device.issuer_held, 0.0, 1.0);
  // How far along (seconds at full rate left) a holding transfer lets its actor go.
  const auto release_at = [&](int id) { return (1 - issuer_held) * transfer_of(id).seconds; };
  // A collective waits for those its members posted before it on its channel, unless they
  // run side by side (SimulateOptions::collectives_at_once); point to point never does.
  const auto queued = [&](const Transfer& tr) { return !tr.p2p() && !options.collectives_at_once; };
  const auto startable = [&](int id) {
    const Transfer& tr = transfer_of(id);
    const Instance& i = instances[static_cast<std::size_t>(id)];
    if (i.posted != static_cast<int>(tr.actors.size())) return false;
    if (!queued(tr)) return true;
    return std::all_of(tr.actors.begin(), tr.actors.end(), [&](int a) {
      const auto& q =
          channels[static_cast<std::size_t>(a)][static_cast<std::size_t>(tr.channel)].queue;
      return !q.empty() && q.front() == id;
    });
  };

  double t = 0;
  for (;;) {
    for (bool progress = true; progress;) {
      progress = false;
      for (int ai = 0; ai < n_actors; ++ai) {
        Actor& a = actors[static_cast<std::size_t>(ai)];
        const std::vector<StepOp>& program = step_plan.programs[static_cast<std::size_t>(ai)];
        while (!a.finished && !a.computing && a.held_by < 0) {
          if (a.waiting) {
            const StepOp& op = program[a.pc];
            const Instance& awaited = instances[static_cast<std::size_t>(a.step * T + op.transfer)];
            if (!awaited.done) break;
            // Replay: a training thread woken late (Transfer::wake_up).
            if (t < awaited.end + transfer_of(op.transfer).wake_up - kEps * std::max(1.0, t)) break;
            a.spans.push_back(
                {.lane = Lane::kWait,
                 .kind = SpanKind::kWait,
                 .step = a.step,
                 .tag = op.tag,
                 .micro =
                     transfer_of(op.transfer).p2p() && !transfer_of(op.transfer).ring ? op.tag : -1,
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
            a.finished = ++a.step == S;
            progress = true;
            continue;
          }
          if (a.step_start < 0) a.step_start = t;
          const StepOp& op = program[a.pc];
          if (op.kind == StepOpKind::kPost) {
            const int id = a.step * T + op.transfer;
            const Transfer& tr = transfer_of(id);
            Instance& i = instances[static_cast<std::size_t>(id)];
            const auto who = static_cast<std::size_t>(
                std::find(tr.actors.begin(), tr.actors.end(), ai) - tr.actors.begin());
            TANDEM_CHECK(who < tr.actors.size());
            i.posted_at[who] = t;
            if (++i.posted == static_cast<int>(tr.actors.size())) pending.push_back(id);
            if (queued(tr)) {
              channels[static_cast<std::size_t>(ai)][static_cast<std::size_t>(tr.channel)]
                  .queue.push_back(id);
            }
            ++a.pc;
            // The last issue of a collective that moves at once: Note [the last issuer's
            // core] (a replay's late take-up moves it later: the rank went on meanwhile).
            if (issuer_held > 0 && !tr.p2p() && i.posted == static_cast<int>(tr.actors.size()) &&
                tr.start_delay == 0 && startable(id)) {
              a.held_by = id;
              i.holder = ai;
              progress = true;
              break;
            }
          } else if (op.kind == StepOpKind::kWait) {
            if (instances[static_cast<std::size_t>(a.step * T + op.transfer)].done) {
              ++a.pc;  // a finished transfer costs no wait (ddp/grad_sync.cpp)
            } else {
              a.waiting = true;
              a.wait_start = t;
            }
          } else {
            a.computing = true;
            a.idling = op.kind == StepOpKind::kIdle;
            a.remaining = op.seconds * (a.idling ? a.idle_scale : a.slowdown);
            a.op_start = t;
          }
          progress = true;
        }
      }
      for (std::size_t k = 0; k < pending.size();) {
        const int id = pending[k];
        if (!startable(id)) {
          ++k;
          continue;
        }
        Instance& i = instances[static_cast<std::size_t>(id)];
        const Transfer& tr = transfer_of(id);
        if (i.ready < 0) i.ready = t;
        if (t < i.ready + tr.start_delay - kEps * std::max(1.0, t)) {
          ++k;
          continue;
        }
        i.start = t;
        for (std::size_t w = 0; w < tr.actors.size(); ++w) {
          Actor& a = actors[static_cast<std::size_t>(tr.actors[w])];
          ++a.in_flight;
          a.in_flight_sharded += sharded_collective(tr.kind) ? 1 : 0;
          a.sending += !tr.p2p() || w == 0 ? 1 : 0;
          a.receiving += !tr.p2p() || w == 1 || tr.ring ? 1 : 0;
        }
        moving.push_back(id);
        pending[k] = pending.back();
        pending.pop_back();
        progress = true;
      }
    }
    if (std::all_of(actors.begin(), actors.end(), [](const Actor& a) { return a.finished; })) break;

    // Rates until the next event, and the time to it.
    // Compute beside collectives of both families runs at the slower family's rate.
    const auto compute_rate = [&](const Actor& a) {
      if (a.idling) return 1.0;
      double slowdown = 0;
      if (a.in_flight_sharded > 0) {
        slowdown = device.compute_slowdown(SpanKind::kReduceScatter);
      }
      if (a.in_flight > a.in_flight_sharded) {
        slowdown = std::max(slowdown, device.compute_slowdown(SpanKind::kAllreduce));
      }
      return 1 / (1 + slowdown);
    };
    // A transfer slows while a participant computes, and shares each participant's
    // link with the others moving the same way through it (links are full duplex).
    const auto transfer_rate = [&](int id) {
      const Transfer& tr = transfer_of(id);
      if (tr.measured && !tr.p2p()) return 1.0;
      bool busy = false;
      int sharing = 1;
      for (std::size_t w = 0; w < tr.actors.size(); ++w) {
        const Actor& a = actors[static_cast<std::size_t>(tr.actors[w])];
        busy = busy || (a.computing && !a.idling);
        if (!tr.p2p() || tr.ring) {
          sharing = std::max({sharing, a.sending, a.receiving});
        } else {
          sharing = std::max(sharing, w == 0 ? a.sending : a.receiving);
        }
      }
      return (busy ? 1 / (1 + device.comm_slowdown(tr.kind)) : 1.0) / sharing;
    };
    double dt = std::numeric_limits<double>::infinity();
    for (const Actor& a : actors) {
      if (a.computing) dt = std::min(dt, a.remaining / compute_rate(a));
    }
    for (const int id : pending) {  // a collective that could start, held back
      const Instance& i = instances[static_cast<std::size_t>(id)];
      if (i.ready >= 0) dt = std::min(dt, i.ready + transfer_of(id).start_delay - t);
    }
    for (std::size_t ai = 0; ai < actors.size(); ++ai) {  // a wait whose collective ended
      const Actor& a = actors[ai];
      if (!a.waiting) continue;
      const StepOp& op = step_plan.programs[ai][a.pc];
      const Instance& i = instances[static_cast<std::size_t>(a.step * T + op.transfer)];
      if (i.done) dt = std::min(dt, i.end + transfer_of(op.transfer).wake_up - t);
    }
    std::vector<double> rates(moving.size());
    for (std::size_t k = 0; k < moving.size(); ++k) {
      rates[k] = transfer_rate(moving[k]);
      const Instance& i = instances[static_cast<std::size_t>(moving[k])];
      dt = std::min(dt, i.remaining / rates[k]);
      if (i.holder >= 0) {
        dt = std::min(dt, std::max(0.0, i.remaining - release_at(moving[k])) / rates[k]);
      }
    }
    // Something always moves, unless the programs deadlock (a bug in a program builder).
    TANDEM_CHECK(std::isfinite(dt));
    t += dt;
    for (int ai = 0; ai < n_actors; ++ai) {
      Actor& a = actors[static_cast<std::size_t>(ai)];
      if (!a.computing) continue;
      a.remaining -= dt * compute_rate(a);
      if (a.remaining > kEps * std::max(1.0, t)) continue;
      const StepOp& op = step_plan.programs[static_cast<std::size_t>(ai)][a.pc];
      if (a.idling) {
        a.computing = a.idling = false;
        ++a.pc;
        continue;
      }
      a.spans.push_back({.lane = op.span == SpanKind::kMemory ? Lane::kIdle : Lane::kCompute,
                         .kind = op.span,
                         .name = op.name,
                         .step = a.step,
                         .tag = op.tag,
                         .micro = op.micro,
                         .start_ns = ns(a.op_start),
                         .end_ns = ns(t),
                         .flops = op.flops});
      a.computing = false;
      ++a.pc;
    }
    for (std::size_t k = 0; k < moving.size();) {
      const int id = moving[k];
      Instance& i = instances[static_cast<std::size_t>(id)];
      i.remaining -= dt * rates[k];
      if (i.holder >= 0 && i.remaining <= release_at(id) + kEps * std::max(1.0, t)) {
        actors[static_cast<std::size_t>(i.holder)].held_by = -1;
        i.holder = -1;
      }
      if (i.remaining > kEps * std::max(1.0, t)) {
        ++k;
        continue;
      }
      i.done = true;
      i.end = t;
      const Transfer& tr = transfer_of(id);
      for (std::size_t w = 0; w < tr.actors.size(); ++w) {
        Actor& a = actors[static_cast<std::size_t>(tr.actors[w])];
        double own_start = i.posted_at[w];  // Note [a rank's own start]
        if (queued(tr)) {
          Channel& c = channels[static_cast<std::size_t>(tr.actors[w])]
                               [static_cast<std::size_t>(tr.channel)];
          TANDEM_CHECK(!c.queue.empty() && c.queue.front() == id);
          c.queue.pop_front();
          own_start = std::max(own_start, c.free);
          c.free = t;
        }
        own_start += tr.start_delay;
        Span span{.lane = Lane::kComm,
                  .kind = tr.p2p() && w == 1 ? SpanKind::kRecv : tr.kind,
                  .name = tr.name,
                  .step = id / T,
                  .tag = tr.tag,
                  .micro = tr.p2p() && !tr.ring ? tr.tag : -1,
                  .start_ns = ns(std::min(own_start, i.start)),
                  .end_ns = ns(t),
                  .bytes = tr.bytes,
                  .issue_ns = ns(i.posted_at[w])};
        a.spans.push_back(span);
        if (tr.ring) {  // the group's ranks receive what the ones before them sent
          span.kind = SpanKind::kRecv;
          a.spans.push_back(span);
        }
        --a.in_flight;
        a.in_flight_sharded -= sharded_collective(tr.kind) ? 1 : 0;
        a.sending -= !tr.p2p() || w == 0 ? 1 : 0;
        a.receiving -= !tr.p2p() || w == 1 || tr.ring ? 1 : 0;
      }
      moving[k] = moving.back();
      rates[k] = rates.back();
      moving.pop_back();
      rates.pop_back();
    }
  }

  // Memory per rank, as the strategy keeps it (StateBytes) and the passes' buffers (the
  // model layer's own formula, the one train checks host and device memory with).
  const auto replica = static_cast<std::int64_t>(layout.numel() * sizeof(float));
  const std::int64_t buffers = config.model.is_transformer()
                                   ? Transformer::buffer_bytes(config.model, rows)
                                   : Mlp::buffer_bytes(config.model, rows);
  TrainResult result;
  result.timeline.ranks = config.ranks;
  // The spans' names are the model's ops (ModelOp), as a measured run's (Note [fixed span
  // names] in engine/launch.cpp): a fresh table gives them ids 1, 2, ... in order.
  const std::vector<std::string> op_names = model_op_names();
  for (std::size_t i = 0; i < op_names.size(); ++i) {
    TANDEM_CHECK_EQ(result.timeline.names->intern(op_names[i]), static_cast<NameId>(i + 1));
  }
  std::vector<bool> recorded(static_cast<std::size_t>(config.ranks), options.recorded_ranks <= 0);
  if (options.recorded_ranks > 0) {
    int count = 0;
    for (const Actor& a : actors) {
      recorded[static_cast<std::size_t>(a.ranks.front())] = true;
      ++count;
    }
    for (int r = 0; r < config.ranks && count < options.recorded_ranks; ++r) {
      if (!recorded[static_cast<std::size_t>(r)]) {
        recorded[static_cast<std::size_t>(r)] = true;
        ++count;
      }
    }
  }
  // --compress: the 16-bit copy of the gradient, or PowerSGD's state and factor buffers.
  std::int64_t compression_bytes = 0;
  if (config.reducer.compress.casts()) compression_bytes = replica / 2;
  if (config.reducer.compress.kind == Compression::Kind::kPowerSgd) {
    const std::vector<Bucket>& buckets = stage_buckets[0];
    const auto members = powersgd_params(layout, buckets, grad_params(layout));
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      const Bucket& b = buckets[i];
      const PowerSgdSize size =
          powersgd_size(members[i], b.end - b.begin, config.reducer.compress.rank);
      compression_bytes += static_cast<std::int64_t>(
          (size.state_numel + size.p_numel + size.q_numel) * sizeof(float));
    }
  }
  double need = 0;
  for (const Actor& a : actors) {
    // --double-buffer keeps a second gradient array, --compress its wire copies and state
    // (Reducer::state_bytes).
    StateBytes mine{
        .params = replica,
        .grads = (config.reducer.double_buffer ? 2 * replica : replica) + compression_bytes,
        .optimizer = replica};
    int in_flight = 1;
    double held = 1;  // the share of the model's units whose buffers the rank keeps
    if (sharded) {
      std::int64_t full = 0;
      for (int u = 0; u < U; ++u) full += shards->unit_bytes(u);
      mine = sharded_state_bytes(strategy.kind, config.reducer.mode, full, shards->shard_bytes());
      if (config.reducer.compress.casts()) mine.grads += (full + shards->shard_bytes()) / 2;
      if (comm) {
        mine.gathered_peak = shards->gathered_peak();
        if (strategy.kind != StrategyKind::kZero1) mine.grads_peak = grads_peak(a.spans, *shards);
      }
    } else if (pipeline) {
      // StageSync: the stage's units (and the tied embedding its head reads).
      const std::vector<bool> owned = plan.owned_units(a.stage, U);
      const auto floats =
          static_cast<std::int64_t>(stage_kept_numel(layout, stage_kept_units(layout, owned)));
      const auto owned_units = std::count(owned.begin(), owned.end(), true);
      const auto bytes = floats * static_cast<std::int64_t>(sizeof(float));
      mine = {.params = bytes, .grads = bytes, .optimizer = bytes};
      in_flight = peak_in_flight(stage_actions(plan.shape, a.stage));
      held = static_cast<double>(owned_units) / U;
    }
    mine.activations = static_cast<std::int64_t>(static_cast<double>(buffers) * held) * in_flight;
    // 16-bit copies of the weights a GEMM reads: the CUDA backend keeps one of the whole
    // model (CudaBackend::extra_bytes), sharded or staged or not.
    const std::int64_t casts = casts_gemm_inputs(config.precision) ? replica / 2 : 0;
    need = std::max(need, static_cast<double>(mine.persistent() + mine.activations +
                                              mine.gathered_peak + mine.grads_peak + casts));
    for (const int r : a.ranks) {
      for (Span s : a.spans) {
        s.rank = r;
        if (config.record && recorded[static_cast<std::size_t>(r)]) {
          result.timeline.spans.push_back(s);
        }
      }
      for (int s = 0; s < S; ++s) {
        const auto& [start, end] = a.steps[static_cast<std::size_t>(s)];
        result.steps.push_back(
            {.rank = r, .step = s, .has_loss = false, .start_ns = ns(start), .end_ns = ns(end)});
      }
      result.memory.push_back({.rank = r, .state = mine, .micro_batches_in_flight = in_flight});
    }
  }
  if (need > cluster.device.memory_bytes) {
    throw UsageError("--model " + config.model.text + " with --batch " +
                     std::to_string(config.batch) + " and --strategy " + strategy.to_string() +
                     (pipeline ? " on " + std::to_string(P) + " pipeline stages" : "") + " needs " +
                     format_bytes(need) + " per device (" +
                     std::to_string(static_cast<long long>(need)) +
                     " bytes: parameters, gradients, optimizer state and activations), but " +
                     cluster.device.name + " has " + format_bytes(cluster.device.memory_bytes));
  }
  std::sort(result.steps.begin(), result.steps.end(), [](const StepRecord& x, const StepRecord& y) {
    return std::tie(x.step, x.rank) < std::tie(y.step, y.rank);
  });
  std::sort(result.memory.begin(), result.memory.end(),
            [](const RankMemory& x, const RankMemory& y) { return x.rank < y.rank; });
  if (pipeline) {
    result.pipeline = plan.describe();  // as train() says it
    result.sync = plan.describe();
    if (plan.replicas > 1) {
      result.sync += "; each stage's gradients averaged over " + std::to_string(plan.replicas) +
                     " replicas (" + strategy.to_string() + ")";
    }
  } else if (!sharded) {
    result.buckets = stage_buckets[0];
    result.sync = strategy.to_string() + ", " + std::to_string(result.buckets.size()) +
                  (result.buckets.size() == 1 ? " bucket" : " buckets");
  } else {
    result.sync = strategy.to_string() + ", " + std::to_string(U) + " units sharded over " +
                  std::to_string(outer) + " ranks";
    if (strategy.kind == StrategyKind::kFsdp) {
      result.sync += ", prefetch " + std::to_string(config.shard.prefetch);
      if (!config.shard.reshard_after_forward) result.sync += ", kept from forward to backward";
    }
  }
  // Bytes the first rank moves per step (as a rank's communicator counts them), and what
  // they would be without --compress: the 16-bit reductions twice as large, PowerSGD's
  // factors the buckets themselves.
  const Compression& compress = config.reducer.compress;
  for (const Transfer& tr : step_plan.transfers) {
    // A point-to-point transfer is counted where it is sent (as the engine counts it).
    if (tr.p2p() ? tr.actors.front() == 0
                 : std::find(tr.actors.begin(), tr.actors.end(), 0) != tr.actors.end()) {
      result.bytes_per_step += tr.bytes;
      const bool reduction = tr.kind == SpanKind::kAllreduce || tr.kind == SpanKind::kReduceScatter;
      result.uncompressed_bytes_per_step += compress.casts() && reduction ? 2 * tr.bytes : tr.bytes;
    }
  }
  if (compress.kind == Compression::Kind::kPowerSgd && config.reducer.mode != CommMode::kOff) {
    result.uncompressed_bytes_per_step = 0;
    for (const Bucket& b : result.buckets) result.uncompressed_bytes_per_step += b.bytes();
  }
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
