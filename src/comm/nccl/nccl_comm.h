// The `nccl` device communicator: one GPU per rank, collectives from NCCL on the rank's
// communication stream. See docs/GPU.md ("The nccl backend").
//
// Rendezvous: in one process every rank's communicator is made at once from one
// ncclUniqueId (ncclCommInitRankConfig per device inside one NCCL group); across processes
// rank 0's ncclUniqueId travels over the host communicator (the mpi backend) first.
// Communicators are non-blocking (ncclConfig_t::blocking = 0), so that a timeout can
// ncclCommAbort them from the communication thread; options' CTA limits go to
// minCTAs/maxCTAs. Operations are enqueued on the communication stream as the device
// backends' skeleton describes (comm/device/device_communicator.h), operations issued
// between group_start() and group_end() inside one NCCL group; the communication thread
// also polls ncclCommGetAsyncError. NCCL has no tags: sends and receives between two
// ranks match in issue order.
//
// split(): ncclCommSplit (NCCL 2.18 or later; older NCCL: a RuntimeError) with this
// communicator's config; the child is an nccl communicator on the same device. Not yet
// run on GPUs (built only). A thread that owns several ranks calls begin_shutdown() on
// every rank's child before destroying any, as for the parents.
//
// Where NCCL is not found at build time the backend is not built and not registered.
#pragma once

#include <memory>
#include <vector>

#include "comm/backend_registry.h"

namespace tandem {

// Rank r on CUDA device r, r < ranks (threads drive them afterwards).
std::vector<std::unique_ptr<Communicator>> make_nccl_local(const BackendOptions& options,
                                                           int ranks);
// This process's rank of `host`, on CUDA device `device`.
std::unique_ptr<Communicator> make_nccl_process(const BackendOptions& options,
                                                ProcessCommunicator& host, int device);

}  // namespace tandem
