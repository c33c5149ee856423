// The emulated ring's schedule (emulated_ring_plan.h).
#include "comm/device/emulated_ring_plan.h"

namespace tandem {

RingChunk ring_chunk(std::size_t count, int peers, int c) {
  const auto p = static_cast<std::size_t>(peers);
  const auto cc = static_cast<std::size_t>(c);
  const std::size_t begin = count * cc / p;
  return {begin, count * (cc + 1) / p - begin};
}

std::size_t ring_slot_elems(std::size_t count, int peers) {
  const auto p = static_cast<std::size_t>(peers);
  return (count + p - 1) / p;
}

namespace {

// What rank 0 receives at one step.
struct RingStep {
  int chunk = 0;
  bool reduce = false;
  int inbound_multiple = 0;  // reduce-scatter: the message is inbound_multiple x d[chunk]
  bool last_reduce = false;  // the chunk is finished here (average scales it)
};

// Reduce-scatter step k receives chunk (-k-1) mod P summed over k+1 ranks; allgather step
// k receives the finished chunk (-k) mod P.
std::vector<RingStep> ring_steps(int p) {
  std::vector<RingStep> steps;
  for (int k = 0; k + 1 < p; ++k) {
    steps.push_back({.chunk = ((-k - 1) % p + p) % p,
                     .reduce = true,
                     .inbound_multiple = k + 1,
                     .last_reduce = k + 2 == p});
  }
  for (int k = 0; k + 1 < p; ++k) steps.push_back({.chunk = ((-k) % p + p) % p, .reduce = false});
  return steps;
}

}  // namespace

std::vector<RingLaunch> emulated_ring_plan(std::size_t count, int peers, bool average) {
  std::vector<RingLaunch> plan;
  if (peers < 2 || count == 0) return plan;  // a ring of one: the data is the result
  const int p = peers;
  const float target = average ? 1.0f : static_cast<float>(p);  // final value / d
  // own[c] = multiple[c] x d[c] at every point of the schedule.
  std::vector<float> multiple(static_cast<std::size_t>(p), 1.0f);
  const std::vector<RingStep> steps = ring_steps(p);
  const auto inbound_factor = [&](const RingStep& s) {
    const float value = s.reduce ? static_cast<float>(s.inbound_multiple) : target;
    return value / multiple[static_cast<std::size_t>(s.chunk)];
  };
  const auto slot = [&](int j) { return j % (p - 1); };

  // The left neighbour's first message, then one kernel per step; the message of step
  // j + 1 is written by kernel j from rank 0's own copy of that chunk, which no kernel
  // changes in between (each step changes only the chunk it receives).
  plan.push_back({.next = ring_chunk(count, p, steps[0].chunk),
                  .next_factor = inbound_factor(steps[0]),
                  .outbox_slot = slot(0)});
  for (std::size_t j = 0; j < steps.size(); ++j) {
    const RingStep& s = steps[j];
    RingLaunch launch{.recv = ring_chunk(count, p, s.chunk),
                      .reduce = s.reduce,
                      .recv_scale = s.last_reduce && average ? 1.0f / static_cast<float>(p) : 1.0f,
                      .inbox_slot = slot(static_cast<int>(j))};
    if (j + 1 < steps.size()) {
      launch.next = ring_chunk(count, p, steps[j + 1].chunk);
      launch.next_factor = inbound_factor(steps[j + 1]);
      launch.outbox_slot = slot(static_cast<int>(j) + 1);
    }
    plan.push_back(launch);
    float& m = multiple[static_cast<std::size_t>(s.chunk)];
    m = s.reduce && !s.last_reduce ? static_cast<float>(s.inbound_multiple + 1) : target;
  }
  return plan;
}

}  // namespace tandem
