// How a communication backend is set up: what every backend reads (the world's size,
// the timeout), and each backend's own options in a type of its own (as c10d's process
// groups each have their Options), gathered in BackendOptions so that the registry
// (comm/backend_registry.h) can hand one value to whichever backend is chosen.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "comm/link_model.h"

namespace tandem {

// local (threads of one process, docs/ARCHITECTURE.md): emulated wire time.
struct LocalBackendOptions {
  LinkModel link{};
};

// mpi (docs/MPI.md): the allreduce algorithm ("auto", "native", "ring"; empty: auto) and
// the communication thread's idle poll: 0 yields the core between polls, > 0 sleeps that
// long once polling found nothing for a while; -1: the default.
struct MpiBackendOptions {
  std::string allreduce_algorithm;
  std::int64_t poll_sleep_ns = -1;
};

// The device backends, nccl and emulated (docs/GPU.md).
struct DeviceBackendOptions {
  int emulated_peers = 2;   // ring size the emulation mimics
  int emulated_blocks = 0;  // CUDA blocks of the emulated reduce-copy kernels; 0: default
  int nccl_min_ctas = 0;    // NCCL's CTA limits; 0: NCCL's default
  int nccl_max_ctas = 0;
};

struct BackendOptions {
  int ranks = 1;  // in-process worlds: how many ranks
  std::chrono::nanoseconds timeout{std::chrono::seconds(300)};
  LocalBackendOptions local{};
  MpiBackendOptions mpi{};
  DeviceBackendOptions device{};
};

}  // namespace tandem
