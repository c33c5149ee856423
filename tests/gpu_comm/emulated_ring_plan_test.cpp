// The emulated ring's schedule replayed on the CPU, element by element as the kernel does
// it, against the reference (peers ranks holding the same data): runs without a GPU.
#include "comm/device/emulated_ring_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tandem {
namespace {

// The kernel's arithmetic in fp32 (emulated_ring.cu), on host arrays.
std::vector<float> replay(std::vector<float> own, int peers, bool average) {
  const std::vector<RingLaunch> plan = emulated_ring_plan(own.size(), peers, average);
  const std::size_t slot_elems = ring_slot_elems(own.size(), peers);
  std::vector<float> slots(slot_elems * static_cast<std::size_t>(std::max(1, peers - 1)), NAN);
  for (const RingLaunch& l : plan) {
    EXPECT_LE(l.recv.size, slot_elems);
    EXPECT_LE(l.next.size, slot_elems);
    EXPECT_LE(l.recv.begin + l.recv.size, own.size());
    EXPECT_LE(l.next.begin + l.next.size, own.size());
    // The ranges a kernel reads and writes in `own` must not overlap (threads race there).
    EXPECT_TRUE(l.recv.size == 0 || l.next.size == 0 ||
                l.recv.begin + l.recv.size <= l.next.begin ||
                l.next.begin + l.next.size <= l.recv.begin);
    float* inbox = slots.data() + static_cast<std::size_t>(l.inbox_slot) * slot_elems;
    float* outbox = slots.data() + static_cast<std::size_t>(l.outbox_slot) * slot_elems;
    for (std::size_t i = 0; i < std::max(l.recv.size, l.next.size); ++i) {
      if (i < l.recv.size) {
        const float in = inbox[i];
        own[l.recv.begin + i] = l.reduce ? (own[l.recv.begin + i] + in) * l.recv_scale : in;
      }
      if (i < l.next.size) outbox[i] = own[l.next.begin + i] * l.next_factor;
    }
  }
  return own;
}

TEST(GpuCommTest, EmulatedRingPlanGivesTheRingResult) {
  for (int peers : {1, 2, 3, 4, 5, 8, 16}) {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{1000}}) {
      for (bool average : {false, true}) {
        std::vector<float> data(n);
        for (std::size_t i = 0; i < n; ++i) data[i] = 0.37f * static_cast<float>(i % 11) - 1.5f;
        const std::vector<float> got = replay(data, peers, average);
        double worst = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const double want = average ? data[i] : static_cast<double>(data[i]) * peers;
          worst = std::max(worst, std::abs(got[i] - want) / std::max(1.0, std::abs(want)));
        }
        EXPECT_LT(worst, 1e-6) << "peers " << peers << ", n " << n
                               << (average ? ", average" : ", sum");
      }
    }
  }
}

TEST(GpuCommTest, EmulatedRingPlanHasTheRingsShape) {
  const int peers = 8;
  const std::size_t n = 8000;
  const std::vector<RingLaunch> plan = emulated_ring_plan(n, peers, true);
  ASSERT_EQ(plan.size(), 1u + 2 * (peers - 1));  // the first message, then 2(P-1) steps
  std::size_t reduced = 0, copied = 0;
  for (const RingLaunch& l : plan) {
    (l.reduce ? reduced : copied) += l.recv.size;
    EXPECT_LT(l.inbox_slot, peers - 1);
    EXPECT_LT(l.outbox_slot, peers - 1);
  }
  // Reduce-scatter touches P-1 chunks, allgather the other P-1 (the first launch none).
  EXPECT_EQ(reduced, n / peers * (peers - 1));
  EXPECT_EQ(copied, n / peers * (peers - 1));
  EXPECT_TRUE(emulated_ring_plan(n, 1, false).empty());
  EXPECT_TRUE(emulated_ring_plan(0, 4, false).empty());
}

}  // namespace
}  // namespace tandem
