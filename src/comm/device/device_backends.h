// Making device communicators: NCCL across GPUs, or the emulated ring on a single GPU.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/device/device_comm.h"

namespace tandem {

struct DeviceCommOptions {
  // "nccl", "emulated", or "auto": nccl where there is more than one rank with a GPU
  // each, emulated on a single GPU.
  std::string backend = "auto";
  int emulated_peers = 2;   // ring size the emulation mimics (its buffers and steps)
  int emulated_blocks = 0;  // CUDA blocks of the emulated reduce-copy kernels; 0: default
  int nccl_min_ctas = 0;    // NCCL's CTA limits (ncclConfig_t); 0: NCCL's default
  int nccl_max_ctas = 0;
  std::chrono::seconds timeout{300};
};

// In one process: one communicator per rank, rank r on CUDA device r (threads drive
// them). With one rank and backend auto or emulated, the emulated ring.
// Throws UsageError naming --backend or --ranks when the machine cannot provide them.
std::vector<std::unique_ptr<DeviceCommunicator>> make_local_device_communicators(
    const DeviceCommOptions& options, int ranks);

// Destroys in-process ranks' communicators: begin_shutdown() on every one first, so that
// NCCL's node-wide finalize can complete, then the destructors.
void destroy_device_communicators(std::vector<std::unique_ptr<DeviceCommunicator>>& comms);

// Across processes (mpirun, srun): this process's rank of `host` (the mpi backend), on
// device host.rank() % visible devices; the NCCL unique id travels over `host`.
std::unique_ptr<DeviceCommunicator> make_process_device_communicator(
    const DeviceCommOptions& options, Communicator& host);

}  // namespace tandem
