// The emulated ring's schedule (Note [emulated ring] in emulated_ring.cu) as plain host
// data: one entry per reduce-copy kernel. Kept apart from the kernels so that a test can
// replay it on the CPU and check the result without a GPU.
#pragma once

#include <cstddef>
#include <vector>

namespace tandem {

// Elements [begin, begin + size) of the all-reduced array.
struct RingChunk {
  std::size_t begin = 0;
  std::size_t size = 0;
};

// One kernel: element i of `recv` takes inbox slot `inbox_slot`[i] (reduce: own += inbox,
// then times recv_scale; copy: own = inbox); element i of `next` is written to outbox slot
// `outbox_slot`[i] as own[next.begin + i] x next_factor (the left neighbour's next
// message). Per element, the inbox is read before the outbox is written (the slots may be
// the same with two peers).
struct RingLaunch {
  RingChunk recv{};
  bool reduce = false;
  float recv_scale = 1.0f;
  int inbox_slot = 0;
  RingChunk next{};
  float next_factor = 1.0f;
  int outbox_slot = 0;
};

// Chunk c of `count` elements cut into `peers` balanced chunks.
RingChunk ring_chunk(std::size_t count, int peers, int c);
// Elements of one inbox slot: the largest chunk.
std::size_t ring_slot_elems(std::size_t count, int peers);
// The kernels of one all-reduce of `count` elements over `peers` (>= 2) ranks holding the
// same data, rank 0's side: 1 + 2 (peers - 1) launches, peers - 1 slots. The result is
// data x peers for sum, data for average.
std::vector<RingLaunch> emulated_ring_plan(std::size_t count, int peers, bool average);

}  // namespace tandem
