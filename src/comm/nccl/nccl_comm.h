// The `nccl` device communicator: one GPU per rank, collectives from NCCL on the rank's
// communication stream. See docs/GPU.md ("The nccl backend").
//
// Rendezvous: in one process every rank's communicator is made at once from one
// ncclUniqueId (ncclCommInitRankConfig per device inside one NCCL group); across processes
// rank 0's ncclUniqueId travels over the host communicator (the mpi backend) first.
// Communicators are non-blocking (ncclConfig_t::blocking = 0), so that a timeout can
// ncclCommAbort them from the progress thread; options' CTA limits go to minCTAs/maxCTAs.
// Each collective is enqueued after cudaStreamWaitEvent(ready); its DeviceWork completes
// on the progress thread (comm/device/device_progress.h), which also polls
// ncclCommGetAsyncError.
//
// Where NCCL is not found at build time, both functions throw UsageError (the build
// compiles nccl_unavailable.cpp instead).
#pragma once

#include <memory>
#include <vector>

#include "comm/device/device_backends.h"

namespace tandem {

// Rank r on CUDA device r, r < ranks (threads drive them afterwards).
std::vector<std::unique_ptr<DeviceCommunicator>> make_nccl_local(const DeviceCommOptions& options,
                                                                 int ranks);
// This process's rank of `host`, on CUDA device `device`.
std::unique_ptr<DeviceCommunicator> make_nccl_process(const DeviceCommOptions& options,
                                                      Communicator& host, int device);

}  // namespace tandem
