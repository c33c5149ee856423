// Registers the `nccl` device backend (comm/backend_registry.h): one GPU per rank, rank r
// on device r in one process, or the node-local rank's device in a job. Built only where
// CMake found NCCL.
#include "comm/backend_registry.h"
#include "comm/device/device_select.h"
#include "comm/nccl/nccl_comm.h"
#include "cuda/resources.h"

namespace tandem {
namespace {

std::string unavailable() { return cuda::unavailable_reason(); }

std::vector<std::unique_ptr<Communicator>> nccl_world(const BackendOptions& options) {
  const int devices = visible_devices();
  if (options.ranks > devices) {
    throw UsageError("--ranks " + std::to_string(options.ranks) +
                     " with --device-comm nccl needs a GPU per rank, but " +
                     std::to_string(devices) +
                     " CUDA device(s) are visible (on one GPU: --device-comm shared runs the ranks "
                     "on it, --ranks 1 emulates a ring)");
  }
  const CurrentDeviceRestorer restore;
  return make_nccl_local(options, options.ranks);
}

// The node-local rank picks the device, so that ranks of several hosts each use their
// host's GPUs from 0.
std::unique_ptr<Communicator> nccl_member(const BackendOptions& options,
                                          ProcessCommunicator& host) {
  const int devices = visible_devices();
  if (host.ranks_on_host() > devices) {
    throw UsageError("--device-comm nccl: " + std::to_string(host.ranks_on_host()) +
                     " ranks on host " + host.host_name() + " but " + std::to_string(devices) +
                     " CUDA device(s) visible there (one GPU per rank)");
  }
  const CurrentDeviceRestorer restore;
  return make_nccl_process(options, host, host.local_rank());
}

[[maybe_unused]] const bool kNcclRegistered =
    register_backend({.name = "nccl",
                      .memory = MemoryKind::kDevice,
                      .unavailable = &unavailable,
                      .make_world = &nccl_world,
                      .make_job_member = &nccl_member});

}  // namespace
}  // namespace tandem
