// The `emulated` device communicator: one real rank on one GPU that runs its side of a
// ring all-reduce over `emulated_peers` ranks, so that compute shares the GPU (SMs, HBM
// bandwidth) with a communication kernel of a real ring's shape. See docs/GPU.md
// ("Emulated ring") for the steps and the bytes they move.
//
// What it promises: the peers are taken to hold the same data as this rank, so an
// all-reduce's sum gives data x peers and average gives data (up to rounding: each
// element is scaled by a small integer ratio once). size() is 1 (one real rank); the
// other operations are those of a world of one, as device copies without emulated cost
// (a receive must follow its send). emulated() is true and describe() says so, and every
// output that shows the backend must. split() gives a world of one for any color: a new
// emulated ring on the same device with the same options (peers, blocks, timeout).
#pragma once

#include <memory>

#include "comm/backend_registry.h"

namespace tandem {

// Rank 0 of 1 on CUDA device `device`. Throws UsageError for bad options, RuntimeError
// when CUDA fails.
std::unique_ptr<Communicator> make_emulated_ring(const BackendOptions& options, int device);

// Default number of blocks of the reduce-copy kernels: about NCCL's channel count for an
// all-reduce within one node (each channel is one CTA).
inline constexpr int kEmulatedDefaultBlocks = 16;

}  // namespace tandem
