// The profile graph and its replay (profile_replay.h, Note [profile graph]).
#include "experiment/profile_replay.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "analysis/intervals.h"
#include "analysis/waiting.h"
#include "core/error.h"

namespace tandem {

namespace {

constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::min();
constexpr std::int32_t kNoNode = -1;

struct Node {
  std::int64_t start = 0, end = 0;  // measured
  std::int64_t launch = kNone;
  std::int64_t latency = 0;            // start - gate, as measured (the start itself: no gate)
  bool anchored = false;               // nothing gated it: it starts when it did
  std::int32_t queue_pred = kNoNode;   // the queue's latest-ending earlier span
  std::int32_t cross = kNoNode;        // another queue's span it waited for
  std::int32_t merged_pred = kNoNode;  // overlap=off: the rank's latest-ending earlier span
  std::int32_t comm_pred = kNoNode;    // a comm span's: the rank's latest-ending earlier one
  std::int64_t queue = -1;
  bool explicit_wait = false;          // `cross` is a stream wait the trace recorded
  std::int32_t instance = -1;          // collective instance, -1: none
};

bool is_comm(const Span& s) { return s.lane == Lane::kComm; }
bool is_compute(const Span& s) { return s.lane == Lane::kCompute; }

// Each rank's queues in start order: fills queue_pred (and merged_pred over the rank's
// queues together, comm_pred over its communication), and returns the number of queues.
std::size_t order_queues(const Timeline& t, const std::vector<SpanOrigin>& origins,
                         std::vector<Node>& nodes) {
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::int32_t>> queues;
  std::map<std::int32_t, std::vector<std::int32_t>> ranks, comm;
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    const Span& s = t.spans[i];
    std::int64_t queue = i < origins.size() ? origins[i].queue : -1;
    if (queue < 0) queue = -2 - static_cast<std::int64_t>(s.lane);  // tandem's lanes
    nodes[i].queue = queue;
    queues[{s.rank, queue}].push_back(static_cast<std::int32_t>(i));
    ranks[s.rank].push_back(static_cast<std::int32_t>(i));
    if (is_comm(s)) comm[s.rank].push_back(static_cast<std::int32_t>(i));
  }
  const auto by_start = [&](std::int32_t a, std::int32_t b) {
    return std::tie(nodes[a].start, nodes[a].end, a) < std::tie(nodes[b].start, nodes[b].end, b);
  };
  const auto chain = [&](std::vector<std::int32_t>& order, std::int32_t Node::*pred) {
    std::sort(order.begin(), order.end(), by_start);
    std::int32_t latest = kNoNode;
    for (std::int32_t n : order) {
      nodes[n].*pred = latest;
      if (latest == kNoNode || nodes[n].end >= nodes[latest].end) latest = n;
    }
  };
  for (auto& [key, order] : queues) chain(order, &Node::queue_pred);
  for (auto& [rank, order] : ranks) chain(order, &Node::merged_pred);
  for (auto& [rank, order] : comm) chain(order, &Node::comm_pred);
  return queues.size();
}

// The stream waits the trace recorded: each consumer's first node launched after the
// wait waits for the producer's last node launched before the record. Returns the ranks
// that have any (their waits are not inferred from the timing).
std::set<std::int32_t> explicit_waits(const Timeline& t,
                                      const std::vector<ImportedStreamWait>& waits,
                                      std::vector<Node>& nodes, ProfileGraphStats& stats) {
  std::set<std::int32_t> ranks;
  if (waits.empty()) return ranks;
  // (rank, queue) -> its launched nodes by launch time.
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::int32_t>> launched;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].launch != kNone)
      launched[{t.spans[i].rank, nodes[i].queue}].push_back(static_cast<std::int32_t>(i));
  }
  for (auto& [key, v] : launched) {
    std::sort(v.begin(), v.end(),
              [&](std::int32_t a, std::int32_t b) { return nodes[a].launch < nodes[b].launch; });
  }
  for (const ImportedStreamWait& w : waits) {
    ranks.insert(w.rank);
    const auto producers = launched.find({w.rank, w.producer});
    const auto consumers = launched.find({w.rank, w.queue});
    if (producers == launched.end() || consumers == launched.end()) continue;
    const std::vector<std::int32_t>& p = producers->second;
    const std::vector<std::int32_t>& c = consumers->second;
    const auto before =
        std::upper_bound(p.begin(), p.end(), w.record_ns,
                         [&](std::int64_t when, std::int32_t n) { return when < nodes[n].launch; });
    const auto after =
        std::lower_bound(c.begin(), c.end(), w.wait_ns,
                         [&](std::int32_t n, std::int64_t when) { return nodes[n].launch < when; });
    if (before == p.begin() || after == c.end()) continue;
    const std::int32_t producer = *std::prev(before);
    Node& consumer = nodes[static_cast<std::size_t>(*after)];
    if (consumer.explicit_wait && nodes[consumer.cross].end >= nodes[producer].end) continue;
    stats.explicit_waits += !consumer.explicit_wait;
    consumer.cross = producer;
    consumer.explicit_wait = true;
  }
  return ranks;
}

// Cross-queue waits and each node's gate and latency (Note [profile graph]); on the ranks
// in `recorded`, only the waits the trace recorded.
void find_gates(const Timeline& t, const std::set<std::int32_t>& recorded, std::vector<Node>& nodes,
                ProfileGraphStats& stats) {
  // Per rank, its spans by end.
  std::map<std::int32_t, std::vector<std::int32_t>> by_end;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    by_end[t.spans[i].rank].push_back(static_cast<std::int32_t>(i));
  for (auto& [rank, order] : by_end) {
    std::sort(order.begin(), order.end(),
              [&](std::int32_t a, std::int32_t b) { return nodes[a].end < nodes[b].end; });
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    std::int64_t gate = n.launch;
    if (n.queue_pred != kNoNode) gate = std::max(gate, nodes[n.queue_pred].end);
    if (n.explicit_wait) gate = std::max(gate, nodes[n.cross].end);
    if (!recorded.contains(t.spans[i].rank) && (gate == kNone || n.start > gate)) {
      // Left waiting by neither its queue nor its launch: another queue's end just before?
      const std::vector<std::int32_t>& ends = by_end[t.spans[i].rank];
      auto it = std::upper_bound(ends.begin(), ends.end(), n.start,
                                 [&](std::int64_t s, std::int32_t m) { return s < nodes[m].end; });
      while (it != ends.begin()) {
        const std::int32_t m = *--it;
        if (nodes[m].end <= gate || n.start - nodes[m].end > kDependencyWindow) break;
        if (static_cast<std::size_t>(m) != i && nodes[m].queue != n.queue &&
            nodes[m].start < n.start) {
          n.cross = m;
          gate = nodes[m].end;
          ++stats.cross_queue;
          break;
        }
      }
    }
    if (gate == kNone) {
      n.anchored = true;
      continue;
    }
    if (n.cross == kNoNode && n.launch != kNone &&
        (n.queue_pred == kNoNode || n.launch > nodes[n.queue_pred].end)) {
      ++stats.launch_gated;
    }
    n.latency = n.start - gate;
  }
}

// The median of `values`, or kNone for none.
std::int64_t median_ns(std::vector<std::int64_t> values) {
  if (values.empty()) return kNone;
  std::nth_element(values.begin(), values.begin() + static_cast<long>(values.size() / 2),
                   values.end());
  return values[values.size() / 2];
}

// contention=off: the durations (and transfers) of the spans that overlapped the other
// kind of work on their rank, replaced by their unoverlapped peers' medians; slowdown=off
// (`compute_only`): the compute spans' only.
void remove_contention(const Timeline& t, const std::vector<Node>& nodes,
                       std::vector<std::int64_t>& duration, std::vector<std::int64_t>& transfer,
                       const Timeline* baseline, bool compute_only, ProfileGraphStats& stats) {
  // Per rank, the union of its compute and of its communication.
  std::map<std::int32_t, std::vector<Interval>> compute_spans, comm_spans;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Span& s = t.spans[i];
    if (is_compute(s)) compute_spans[s.rank].push_back({nodes[i].start, nodes[i].end});
    if (is_comm(s)) comm_spans[s.rank].push_back({nodes[i].start, nodes[i].end});
  }
  std::map<std::int32_t, IntervalSet> compute, comm;
  for (auto& [rank, v] : compute_spans) compute[rank] = union_of(std::move(v));
  for (auto& [rank, v] : comm_spans) comm[rank] = union_of(std::move(v));
  // A span overlapped when the other kind ran on its rank meanwhile; the unoverlapped
  // values by name (compute) or by kind and bytes (communication).
  std::vector<bool> overlapped(nodes.size(), false);
  std::map<NameId, std::vector<std::int64_t>> alone_compute;
  std::map<std::tuple<SpanKind, std::int64_t, bool>, std::vector<std::int64_t>> alone_comm;
  const auto comm_key = [&](std::size_t i) {
    return std::make_tuple(t.spans[i].kind, static_cast<std::int64_t>(t.spans[i].bytes),
                           nodes[i].instance >= 0);
  };
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const Span& s = t.spans[i];
    if (is_compute(s)) {
      overlapped[i] = covered_length(comm[s.rank], {nodes[i].start, nodes[i].end}) > 0;
      if (!overlapped[i]) alone_compute[s.name].push_back(duration[i]);
    } else if (is_comm(s)) {
      overlapped[i] = covered_length(compute[s.rank], {nodes[i].start, nodes[i].end}) > 0;
      if (!overlapped[i])
        alone_comm[comm_key(i)].push_back(nodes[i].instance >= 0 ? transfer[i] : duration[i]);
    }
  }
  std::map<NameId, std::int64_t> compute_median;
  for (auto& [name, v] : alone_compute) compute_median[name] = median_ns(std::move(v));
  // A compute-only profile of the same job (--baseline): its spans of a name, all of them
  // alone, take precedence.
  if (baseline != nullptr) {
    std::map<std::string_view, std::vector<std::int64_t>> by_name;
    for (const Span& b : baseline->spans) {
      if (is_compute(b)) by_name[baseline->names->name(b.name)].push_back(b.end_ns - b.start_ns);
    }
    std::map<std::string_view, std::int64_t> medians;
    for (auto& [name, v] : by_name) medians[name] = median_ns(std::move(v));
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (!is_compute(t.spans[i])) continue;
      const auto it = medians.find(t.names->name(t.spans[i].name));
      if (it != medians.end()) compute_median[t.spans[i].name] = it->second;
    }
  }
  std::map<std::tuple<SpanKind, std::int64_t, bool>, std::int64_t> comm_median;
  for (auto& [key, v] : alone_comm) comm_median[key] = median_ns(std::move(v));
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!overlapped[i] || (compute_only && !is_compute(t.spans[i]))) continue;
    const Span& s = t.spans[i];
    std::int64_t value = kNone;
    if (is_compute(s)) {
      const auto it = compute_median.find(s.name);
      if (it != compute_median.end()) value = it->second;
    } else {
      const auto it = comm_median.find(comm_key(i));
      if (it != comm_median.end()) value = it->second;
    }
    if (value == kNone) {
      ++stats.contention_kept;
      continue;
    }
    ++stats.contention_changed;
    (is_comm(s) && nodes[i].instance >= 0 ? transfer[i] : duration[i]) = value;
  }
}

// Note [one collective at a time]
// A collective moves its data once every member has started it and each member's rank
// has finished its collective before: a rank's collectives transfer one at a time (NCCL
// kernels queue on their stream; gloo's work queues behind the process group's, and its
// span opens at the enqueue). Its transfer is measured from that moment, so time a span
// spent queued behind another is not counted again when a what-if reorders them.
std::int64_t instance_ready(const std::vector<Node>& nodes, const std::vector<std::size_t>& members,
                            const std::vector<std::int64_t>& start,
                            const std::vector<std::int64_t>& end) {
  std::int64_t ready = kNone;
  for (std::size_t m : members) {
    ready = std::max(ready, start[m]);
    if (nodes[m].comm_pred != kNoNode)
      ready = std::max(ready, end[static_cast<std::size_t>(nodes[m].comm_pred)]);
  }
  return ready;
}

// The graph evaluated with these durations and transfers: every span's start and end,
// gates from the evaluated ends (Note [profile graph]).
Timeline evaluate(const Timeline& measured, const std::vector<Node>& nodes,
                  const std::vector<std::vector<std::size_t>>& instances,
                  const std::vector<std::int64_t>& duration,
                  const std::vector<std::int64_t>& transfer, bool merged) {
  const std::size_t n = nodes.size();
  std::vector<std::int64_t> start(n, 0), end(n, 0);
  std::vector<std::int32_t> pending(n, 0);
  std::vector<std::vector<std::int32_t>> dependents(n);
  const auto gates = [&](std::size_t i) {
    std::array<std::int32_t, 3> g = {nodes[i].queue_pred, nodes[i].cross,
                                     merged ? nodes[i].merged_pred : kNoNode};
    return g;
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::int32_t g : gates(i)) {
      if (g == kNoNode) continue;
      ++pending[i];
      dependents[static_cast<std::size_t>(g)].push_back(static_cast<std::int32_t>(i));
    }
  }
  // An instance completes once its members have started and each member's rank has ended
  // its collective before (Note [one collective at a time]).
  std::vector<std::size_t> instance_pending(instances.size());
  std::vector<std::vector<std::size_t>> waiting_instances(n);
  for (std::size_t k = 0; k < instances.size(); ++k) {
    instance_pending[k] = instances[k].size();
    for (std::size_t m : instances[k]) {
      if (nodes[m].comm_pred == kNoNode) continue;
      ++instance_pending[k];
      waiting_instances[static_cast<std::size_t>(nodes[m].comm_pred)].push_back(k);
    }
  }
  std::vector<std::size_t> complete;  // instances whose members can end
  std::vector<std::int32_t> ready;
  for (std::size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push_back(static_cast<std::int32_t>(i));
  }
  std::size_t ended = 0;
  const auto finish = [&](std::size_t i, std::int64_t t) {
    end[i] = t;
    ++ended;
    for (std::int32_t d : dependents[i]) {
      if (--pending[static_cast<std::size_t>(d)] == 0) ready.push_back(d);
    }
    for (std::size_t k : waiting_instances[i]) {
      if (--instance_pending[k] == 0) complete.push_back(k);
    }
  };
  while (!ready.empty() || !complete.empty()) {
    if (!complete.empty()) {
      const std::size_t k = complete.back();
      complete.pop_back();
      const std::vector<std::size_t>& members = instances[k];
      const std::int64_t at = instance_ready(nodes, members, start, end);
      for (std::size_t m : members) finish(m, std::max(start[m], at + transfer[m]));
      continue;
    }
    const auto i = static_cast<std::size_t>(ready.back());
    ready.pop_back();
    const Node& node = nodes[i];
    if (node.anchored) {
      start[i] = node.start;
    } else {
      std::int64_t gate = node.launch;
      if (node.queue_pred != kNoNode)
        gate = std::max(gate, end[static_cast<std::size_t>(node.queue_pred)]);
      if (node.cross != kNoNode) gate = std::max(gate, end[static_cast<std::size_t>(node.cross)]);
      start[i] = gate + node.latency;
    }
    // overlap=off: not before the rank's work that started before it has ended (a
    // constraint beside its own gate: its latency belongs to that gate).
    if (merged && node.merged_pred != kNoNode)
      start[i] = std::max(start[i], end[static_cast<std::size_t>(node.merged_pred)]);
    if (node.instance < 0) {
      finish(i, start[i] + duration[i]);
      continue;
    }
    const auto k = static_cast<std::size_t>(node.instance);
    if (--instance_pending[k] == 0) complete.push_back(k);
  }
  if (ended < n) {
    for (std::size_t i = 0; i < n; ++i) {
      if (pending[i] == 0) continue;
      const Span& s = measured.spans[i];
      throw UsageError("--from-trace: the traces cannot be replayed in order: rank " +
                       std::to_string(s.rank) + "'s " + std::string(measured.names->name(s.name)) +
                       " (step " + std::to_string(s.step) +
                       ") waits for a collective its peers issued in another order");
    }
  }
  Timeline out = measured;
  for (std::size_t i = 0; i < n; ++i) {
    out.spans[i].start_ns = start[i];
    out.spans[i].end_ns = end[i];
  }
  return out;
}

// Note [clocks by collective ends]
// The ranks' traces need not share a clock: Kineto stamps each host's own, and PyTorch's
// legacy profiler counts from each process's profiler start. A collective's members finish
// together (the last hop's data reaches every rank at about the same moment), so rank r's
// clock runs ahead of the first rank's by the median over the collectives they share of
// r's end minus the first rank's. Where the clocks agree this is the noise of the ends,
// microseconds; where they do not, it is what a skew computed across them would be
// wrong by. Ranks sharing no collective with the first keep their clock.
std::map<std::int32_t, std::int64_t> clock_offsets(
    const Timeline& t, const std::vector<Node>& nodes,
    const std::vector<std::vector<std::size_t>>& instances) {
  std::int32_t first = std::numeric_limits<std::int32_t>::max();
  for (const Span& s : t.spans) first = std::min(first, s.rank);
  std::map<std::int32_t, std::vector<std::int64_t>> differences;
  for (const auto& members : instances) {
    std::int64_t reference = kNone;
    for (std::size_t m : members) {
      if (t.spans[m].rank == first) reference = nodes[m].end;
    }
    if (reference == kNone) continue;
    for (std::size_t m : members) {
      if (t.spans[m].rank != first)
        differences[t.spans[m].rank].push_back(nodes[m].end - reference);
    }
  }
  std::map<std::int32_t, std::int64_t> offsets;
  for (auto& [rank, d] : differences) offsets[rank] = median_ns(std::move(d));
  return offsets;
}

}  // namespace

ProfileReplay replay_profile(const ImportResult& run, const WhatIf& what_if,
                             const ImportResult* baseline) {
  for (const TraceFileInfo& f : run.files) {
    if (f.format != "kineto") {
      throw UsageError("--from-trace " + f.path +
                       ": a tandem trace; replay its results directory instead (--from-trace "
                       "RUN, the directory train or characterize wrote)");
    }
  }
  if (what_if.bucket_mb > 0 || what_if.ranks > 0) {
    throw UsageError(std::string("--what-if ") + (what_if.ranks > 0 ? "ranks" : "bucket-mb") +
                     ": a profile's replay changes network, contention and overlap only (it has "
                     "no plan to rebuild; tandem's own runs take it)");
  }
  const Timeline& t = run.timeline;
  if (t.spans.empty()) throw UsageError("--from-trace: the traces hold no spans to replay");
  ProfileReplay out;
  ProfileGraphStats& stats = out.stats;
  stats.nodes = t.spans.size();
  std::vector<Node> nodes(t.spans.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].start = t.spans[i].start_ns;
    nodes[i].end = t.spans[i].end_ns;
    if (i < run.origins.size() && run.origins[i].launch_ns >= 0)
      nodes[i].launch = run.origins[i].launch_ns;
  }
  stats.queues = order_queues(t, run.origins, nodes);

  // Collectives across ranks; a member ends at the last member's start plus its transfer.
  std::vector<const Span*> comm;
  std::vector<std::size_t> comm_index;
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    if (!is_comm(t.spans[i])) continue;
    comm.push_back(&t.spans[i]);
    comm_index.push_back(i);
  }
  std::vector<std::vector<std::size_t>> instances = match_collectives(comm);
  for (auto& members : instances) {
    for (std::size_t& m : members) m = comm_index[m];
  }
  // Each rank's clock as the first rank's (Note [clocks by collective ends]): every node
  // shifted into it for the graph, the replayed spans shifted back.
  const std::map<std::int32_t, std::int64_t> offsets = clock_offsets(t, nodes, instances);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto it = offsets.find(t.spans[i].rank);
    if (it == offsets.end()) continue;
    nodes[i].start -= it->second;
    nodes[i].end -= it->second;
    if (nodes[i].launch != kNone) nodes[i].launch -= it->second;
  }
  std::vector<std::int64_t> transfer(nodes.size(), 0), duration(nodes.size(), 0);
  std::vector<std::int64_t> measured_start(nodes.size()), measured_end(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    measured_start[i] = nodes[i].start;
    measured_end[i] = nodes[i].end;
  }
  for (std::size_t k = 0; k < instances.size(); ++k) {
    const std::int64_t ready = instance_ready(nodes, instances[k], measured_start, measured_end);
    for (std::size_t m : instances[k]) {
      nodes[m].instance = static_cast<std::int32_t>(k);
      transfer[m] = std::max<std::int64_t>(0, nodes[m].end - ready);
    }
  }
  stats.collectives = instances.size();
  for (std::size_t i : comm_index) stats.unmatched_comm += nodes[i].instance < 0;
  find_gates(t, explicit_waits(t, run.stream_waits, nodes, stats), nodes, stats);
  for (std::size_t i = 0; i < nodes.size(); ++i) duration[i] = nodes[i].end - nodes[i].start;

  const auto own_clocks = [&](Timeline timeline) {
    for (Span& s : timeline.spans) {
      const auto it = offsets.find(s.rank);
      if (it == offsets.end()) continue;
      s.start_ns += it->second;
      s.end_ns += it->second;
    }
    return timeline;
  };
  out.replayed = own_clocks(evaluate(t, nodes, instances, duration, transfer, /*merged=*/false));
  if (what_if.contention_off || what_if.slowdown_off) {
    remove_contention(t, nodes, duration, transfer,
                      baseline != nullptr ? &baseline->timeline : nullptr,
                      /*compute_only=*/!what_if.contention_off, stats);
  }
  if (what_if.network != 1) {
    for (std::size_t i : comm_index) {
      auto& value = nodes[i].instance >= 0 ? transfer[i] : duration[i];
      value = static_cast<std::int64_t>(static_cast<double>(value) / what_if.network);
    }
  }
  out.what_if =
      what_if.any()
          ? own_clocks(evaluate(t, nodes, instances, duration, transfer, what_if.overlap_off))
          : out.replayed;

  char line[320];
  std::snprintf(line, sizeof line,
                "graph: %zu spans on %zu queues; %zu waited for another queue's span (%zu by the "
                "stream waits the trace recorded, %zu read from its timing, within %lld us), "
                "%zu for their launch; %zu collectives matched across ranks",
                stats.nodes, stats.queues, stats.explicit_waits + stats.cross_queue,
                stats.explicit_waits, stats.cross_queue,
                static_cast<long long>(kDependencyWindow / 1000), stats.launch_gated,
                stats.collectives);
  out.notes.emplace_back(line);
  std::int64_t largest = 0;
  std::int32_t largest_rank = 0;
  for (const auto& [rank, offset] : offsets) {
    if (std::abs(offset) > std::abs(largest)) {
      largest = offset;
      largest_rank = rank;
    }
  }
  if (!offsets.empty()) {
    std::snprintf(line, sizeof line,
                  "clocks aligned by the collectives' ends (Note [clocks by collective ends]): "
                  "rank %d's clock %+.3f ms off the first rank's, the largest offset",
                  largest_rank, static_cast<double>(largest) / 1e6);
    out.notes.emplace_back(line);
  }
  if (stats.unmatched_comm > 0) {
    out.notes.push_back(std::to_string(stats.unmatched_comm) +
                        " communication spans matched no peer's (a rank's trace lacks them, or "
                        "they are point to point): replayed with their measured duration");
  }
  if (stats.launch_gated > 0 && what_if.any()) {
    out.notes.emplace_back(
        "launches are kept as measured (the CPU is not replayed): a rank whose GPU waited for its "
        "CPU keeps waiting");
  }
  if (what_if.contention_off || what_if.slowdown_off) {
    out.notes.push_back(std::to_string(stats.contention_changed) +
                        " overlapped spans given their unoverlapped peers' median time; " +
                        std::to_string(stats.contention_kept) +
                        " kept as measured (no unoverlapped span of their name or size)");
  }
  return out;
}

}  // namespace tandem
